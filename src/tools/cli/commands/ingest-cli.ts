// `ibex-context ingest`: flags, store choice, progress line and summary around {@link ingestLocomo}.

import type { AgentWriter } from '../../../retrieval/ports.js';
import { EmbeddedStore } from '../../../retrieval/sqlite/embedded-store.js';
import { canonicalUuid } from '../../../util/uuid.js';
import { renderTable } from '../../client/stats.js';
import { LOCOMO_ORG_ID, readLocomo } from '../../locomo/dataset.js';
import { type IngestSummary, ingestLocomo } from '../../locomo/ingest.js';
import { commandPrologue, progressLine, STORE_FLAGS, storeFromFlags } from '../command-args.js';
import { printCommandError } from '../command-error.js';

const USAGE = `usage: ibex-context ingest --locomo <dir|file> [options]

      --locomo <dir|file>   LoCoMo conversations (a directory of *.json, or one file)
      --db <path>           embedded store to write (default $IBEX_CONTEXT_EMBEDDED_DB or ./var/ibex-context.db)
      --postgres <url>      PostgreSQL store to write instead (default $IBEX_CONTEXT_POSTGRES_URL, schema
                            $IBEX_CONTEXT_POSTGRES_SCHEMA); --db wins over the variable
      --org <uuid>          org to ingest under (default ${LOCOMO_ORG_ID})
      --json                print the summary as one JSON object (errors as {"error"})
  -h, --help                this text

Each conversation becomes one agent (its memories and directive replace what that agent had).
Prints the org and a table of agents; pass the org and an agent to 'assemble', the dir to 'replay'.`;

/** The human summary of an ingest: where, which org, and one row per agent. */
export function formatIngestSummary(summary: IngestSummary): string {
  const rows = [
    ['agent_id', 'sample', 'speakers', 'memories'],
    ...summary.agents.map((a) => [a.agent_id, a.sample_id, a.speakers.join(' & '), String(a.memories)]),
    ['total', '', `${summary.agents.length} agents`, String(summary.memories)],
  ];
  return [`ingested into ${summary.db}`, `org_id ${summary.org_id}`, renderTable(rows)].join('\n');
}

/** CLI entry: a table (or `--json` summary) on stdout; 0 on success, 2 for bad flags, 1 when I/O fails. */
export async function run(argv: string[]): Promise<number> {
  const parsed = await commandPrologue(
    argv,
    {
      command: 'ingest',
      usage: USAGE,
      options: { ...STORE_FLAGS, locomo: { type: 'string' }, org: { type: 'string' } },
    },
    (values) => {
      if (values.locomo === undefined) throw new Error('--locomo <dir> is required');
      const org = canonicalUuid(values.org ?? LOCOMO_ORG_ID);
      if (org === null) throw new Error('--org must be a UUID');
      if (values.postgres !== undefined && values.db !== undefined)
        throw new Error('give --db or --postgres');
      return { locomo: values.locomo, org, ...storeFromFlags(values) };
    },
  );
  if (parsed.exit !== null) return parsed.exit;
  const { json } = parsed;
  const { locomo, org, db, postgres } = parsed.config;
  const progress = progressLine();
  // The embedded import draws a progress line on a terminal; the PostgreSQL one never has.
  const drawsProgress = postgres === null && progress.tty;
  let target: IngestTarget | undefined;
  try {
    const conversations = await readLocomo(locomo);
    target = postgres === null ? openEmbedded(db) : await openPostgres(postgres);
    const onAgent = drawsProgress
      ? (done: number, total: number, memories: number) =>
          progress.draw(`ingest ${done}/${total} conversations, ${memories} memories`)
      : undefined;
    const summary = await ingestLocomo(target.writer, conversations, org, { db: target.db, onAgent });
    if (drawsProgress) progress.clear();
    process.stdout.write(json ? `${JSON.stringify(summary)}\n` : `${formatIngestSummary(summary)}\n`);
    return 0;
  } catch (err) {
    if (drawsProgress) progress.clear();
    printCommandError('ingest', (err as Error).message, json);
    return 1;
  } finally {
    await target?.close();
  }
}

/** The store an ingest writes to, as the CLI opened it. */
interface IngestTarget {
  writer: AgentWriter;
  db: string;
  close(): void | Promise<void>;
}

/** Opens (creating if needed) the embedded store at `file`. @throws the open or migration error. */
function openEmbedded(file: string): IngestTarget {
  const store = EmbeddedStore.open(file);
  return { writer: store, db: store.path, close: () => store.close() };
}

/**
 * Opens the PostgreSQL store, `pg` loaded on demand; the URL may hold a password, so only the schema is
 * named. @throws the connection or migration error.
 */
async function openPostgres(pg: { url: string; schema: string }): Promise<IngestTarget> {
  const { PgStore } = await import('../../../retrieval/postgres/pg-store.js');
  const store = await PgStore.open({ url: pg.url, schema: pg.schema, poolMax: 2 });
  return { writer: store, db: `postgres:${store.schema}`, close: () => store.close() };
}
