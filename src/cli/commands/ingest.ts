/**
 * `ibex-context ingest --locomo <dir> [--db <path>] [--org <uuid>]`: loads LoCoMo conversations into
 * the embedded store (SPEC §4.3) — one org, one agent per conversation, every dialogue turn an
 * `episodic` memory `<speaker>: <text>`, every session summary a `factual` memory, one directive per
 * agent. Everything is derived deterministically (ids, confidences, timestamps), and each agent is
 * replaced as a whole, so re-running gives the same store.
 *
 * `readLocomo` is also the reader the replay tool uses (turns, sessions, agent ids, QA).
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { loadSettings } from '../../config/settings.js';
import { type DirectiveRow, EmbeddedStore, type MemoryRow } from '../../retrieval/embedded-store.js';
import { canonicalUuid, uuidV5 } from '../../retrieval/uuid.js';

/** Default org of ingested LoCoMo agents. */
export const LOCOMO_ORG_ID = '1b0c0e70-10c0-4c00-8a00-00000000000a';
/** UUIDv5 namespace for agent ids (name `locomo:<file stem or sample_id>`). */
export const LOCOMO_AGENT_NS = '5d2f6a1e-8c4b-4f0e-9a7d-2b1c3e4f5a60';
/** UUIDv5 namespace for memory and directive-version ids (name `<agent_id>:<dia_id>` …). */
export const LOCOMO_MEMORY_NS = '9e3b7c2d-4a1f-4e8b-b6c5-0d1e2f3a4b5c';

/** One dialogue turn. */
export interface LocomoTurn {
  speaker: string;
  /** e.g. `D1:3` (session 1, turn 3). */
  diaId: string;
  text: string;
  /** LoCoMo's caption of an image shared in the turn, when there is one. */
  imageCaption?: string;
  /** Id of the turn's memory. */
  memoryId: string;
  /** Epoch ms: session start + turn index seconds, so recency follows dialogue order. */
  createdAt: number;
}

/** One session: its turns in order and its summary. */
export interface LocomoSession {
  /** N of `session_N`. */
  index: number;
  /** As written, e.g. `1:56 pm on 8 May, 2023`; "" when absent. */
  dateTime: string;
  /** Epoch ms (UTC) parsed from `dateTime`; see {@link parseLocomoDate} for the fallback. */
  startedAt: number;
  turns: LocomoTurn[];
  summary: string | null;
  /** Id of the summary's memory, when there is a summary. */
  summaryMemoryId: string | null;
}

/** A QA item as LoCoMo gives it (useful as replay queries). */
export interface LocomoQa {
  question: string;
  answer: unknown;
  evidence: string[];
  category: number | null;
}

/** One conversation = one agent. */
export interface LocomoConversation {
  /** Source file path. */
  file: string;
  /** `sample_id` when the file has one, else the file stem (`26` for `26.json`). */
  sampleId: string;
  /** {@link locomoAgentId} of `sampleId`. */
  agentId: string;
  speakerA: string;
  speakerB: string;
  /** Sessions that have turns, by index. */
  sessions: LocomoSession[];
  qa: LocomoQa[];
}

/** Ingest result, printed by the CLI. */
export interface IngestSummary {
  db: string;
  org_id: string;
  agents: {
    agent_id: string;
    sample_id: string;
    file: string;
    speakers: [string, string];
    memories: number;
  }[];
  memories: number;
  directives: number;
}

/**
 * Agent id of a LoCoMo conversation: UUIDv5(`locomo:<key>`), key = the file's stem (`/x/26.json` → `26`)
 * or a `sample_id` (`conv-26`). Pure and stable.
 */
export function locomoAgentId(file: string): string {
  const key = path.basename(file).replace(/\.json$/i, '');
  return uuidV5(`locomo:${key}`, LOCOMO_AGENT_NS);
}

/** Deterministic confidence in [0.5, 1] from a memory id (4 decimals). */
export function locomoConfidence(memoryId: string): number {
  const u32 = createHash('sha256').update(memoryId).digest().readUInt32BE(0);
  return Math.round((0.5 + (0.5 * u32) / 0xffffffff) * 10_000) / 10_000;
}

const MONTHS = [
  'january',
  'february',
  'march',
  'april',
  'may',
  'june',
  'july',
  'august',
  'september',
  'october',
  'november',
  'december',
];

/**
 * Parses LoCoMo's `h:mm am|pm on D Month, YYYY` as UTC epoch ms.
 * @returns `null` when the text is not in that form (callers then fall back, see {@link readLocomo}).
 */
export function parseLocomoDate(text: string): number | null {
  const m = /^\s*(\d{1,2}):(\d{2})\s*(am|pm)\s+on\s+(\d{1,2})\s+([a-z]+),?\s+(\d{4})\s*$/i.exec(text);
  if (m === null) {
    const t = Date.parse(text);
    return Number.isFinite(t) ? t : null;
  }
  const month = MONTHS.findIndex((name) => name.startsWith(m[5]!.toLowerCase()) && m[5]!.length >= 3);
  const hour12 = Number(m[1]);
  const minute = Number(m[2]);
  if (month < 0 || hour12 < 1 || hour12 > 12 || minute > 59) return null;
  const hour = (hour12 % 12) + (m[3]!.toLowerCase() === 'pm' ? 12 : 0);
  return Date.UTC(Number(m[6]), month, Number(m[4]), hour, minute);
}

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const DAY_MS = 86_400_000;

/**
 * One LoCoMo sample → conversation. Accepts the flat per-file layout of `datasets/locomo10/*.json`
 * (`speaker_a`, `session_N`, `session_N_date_time`, `session_N_summary`, `qa` at top level) and the
 * upstream layout (`{sample_id, conversation: {...}, session_summary: {...}, qa}`).
 * @throws Error naming the file when speakers or sessions are missing.
 */
export function parseLocomoSample(sample: unknown, file: string, fallbackKey: string): LocomoConversation {
  if (!isObject(sample)) throw new Error(`${file}: not a LoCoMo sample object`);
  const conv = isObject(sample.conversation) ? sample.conversation : sample;
  const summaries = isObject(sample.session_summary) ? sample.session_summary : {};
  const speakerA = conv.speaker_a;
  const speakerB = conv.speaker_b;
  if (typeof speakerA !== 'string' || typeof speakerB !== 'string') {
    throw new Error(`${file}: speaker_a and speaker_b must be strings`);
  }
  const sampleId =
    typeof sample.sample_id === 'string' && sample.sample_id !== '' ? sample.sample_id : fallbackKey;
  const agentId = locomoAgentId(sampleId);
  const indexes = Object.keys(conv)
    .map((k) => /^session_(\d+)$/.exec(k))
    .filter((m): m is RegExpExecArray => m !== null && Array.isArray(conv[m[0]]))
    .map((m) => Number(m[1]))
    .sort((a, b) => a - b);
  if (indexes.length === 0) throw new Error(`${file}: no session_N turn lists`);

  const sessions: LocomoSession[] = [];
  const seenDia = new Map<string, number>();
  let previousStart: number | null = null;
  for (const index of indexes) {
    const dateTime =
      typeof conv[`session_${index}_date_time`] === 'string'
        ? (conv[`session_${index}_date_time`] as string)
        : '';
    // Undated sessions sit a day after the previous one (or at the epoch), keeping recency order sane.
    const startedAt: number =
      parseLocomoDate(dateTime) ?? (previousStart === null ? 0 : previousStart + DAY_MS);
    previousStart = startedAt;
    const turns: LocomoTurn[] = [];
    for (const raw of conv[`session_${index}`] as unknown[]) {
      if (!isObject(raw)) continue;
      const { speaker, dia_id, text } = raw;
      if (typeof speaker !== 'string' || typeof text !== 'string' || text.trim() === '') continue;
      let diaId = typeof dia_id === 'string' && dia_id !== '' ? dia_id : `S${index}:${turns.length + 1}`;
      // A repeated dia_id would silently overwrite an earlier memory; suffix it instead.
      const seen = seenDia.get(diaId) ?? 0;
      seenDia.set(diaId, seen + 1);
      if (seen > 0) diaId = `${diaId}#${seen}`;
      const turn: LocomoTurn = {
        speaker,
        diaId,
        text,
        memoryId: uuidV5(`${agentId}:${diaId}`, LOCOMO_MEMORY_NS),
        createdAt: startedAt + turns.length * 1000,
      };
      if (typeof raw.blip_caption === 'string' && raw.blip_caption !== '')
        turn.imageCaption = raw.blip_caption;
      turns.push(turn);
    }
    const summaryRaw = conv[`session_${index}_summary`] ?? summaries[`session_${index}_summary`];
    const summary = typeof summaryRaw === 'string' && summaryRaw.trim() !== '' ? summaryRaw : null;
    sessions.push({
      index,
      dateTime,
      startedAt,
      turns,
      summary,
      summaryMemoryId: summary === null ? null : uuidV5(`${agentId}:summary:${index}`, LOCOMO_MEMORY_NS),
    });
  }
  const qaRaw = Array.isArray(sample.qa) ? sample.qa : [];
  const qa: LocomoQa[] = qaRaw.filter(isObject).flatMap((q) =>
    typeof q.question === 'string'
      ? [
          {
            question: q.question,
            answer: q.answer ?? q.adversarial_answer ?? null,
            evidence: Array.isArray(q.evidence)
              ? q.evidence.filter((e): e is string => typeof e === 'string')
              : [],
            category: typeof q.category === 'number' ? q.category : null,
          },
        ]
      : [],
  );
  return { file, sampleId, agentId, speakerA, speakerB, sessions, qa };
}

/**
 * Reads every `*.json` of `dir` (or the one file `dir` names), in file-name order. A file may hold one
 * sample or an array of samples (upstream `locomo10.json`).
 * @throws Error for unreadable files, invalid JSON, or samples without speakers/sessions (message names the file).
 */
export async function readLocomo(dir: string): Promise<LocomoConversation[]> {
  const stat = await fs.stat(dir);
  const files = stat.isDirectory()
    ? (await fs.readdir(dir))
        .filter((f) => f.toLowerCase().endsWith('.json'))
        .sort((a, b) => a.localeCompare(b, 'en', { numeric: true }))
        .map((f) => path.join(dir, f))
    : [dir];
  const out: LocomoConversation[] = [];
  for (const file of files) {
    let data: unknown;
    try {
      data = JSON.parse(await fs.readFile(file, 'utf8'));
    } catch (err) {
      throw new Error(`${file}: ${(err as Error).message}`);
    }
    const stem = path.basename(file).replace(/\.json$/i, '');
    if (Array.isArray(data)) {
      for (const [i, sample] of data.entries()) out.push(parseLocomoSample(sample, file, `${stem}#${i}`));
    } else {
      out.push(parseLocomoSample(data, file, stem));
    }
  }
  return out;
}

/** The memories of one conversation: episodic turns and factual summaries. */
export function locomoMemories(conv: LocomoConversation, orgId: string): MemoryRow[] {
  const rows: MemoryRow[] = [];
  for (const session of conv.sessions) {
    for (const turn of session.turns) {
      rows.push({
        id: turn.memoryId,
        org_id: orgId,
        agent_id: conv.agentId,
        content: `${turn.speaker}: ${turn.text}`,
        category: 'episodic',
        confidence: locomoConfidence(turn.memoryId),
        created_at: turn.createdAt,
      });
    }
    if (session.summary !== null && session.summaryMemoryId !== null) {
      rows.push({
        id: session.summaryMemoryId,
        org_id: orgId,
        agent_id: conv.agentId,
        content: session.summary,
        category: 'factual',
        confidence: locomoConfidence(session.summaryMemoryId),
        // Just after the session's last turn: a summary is written once the session is over.
        created_at: session.startedAt + session.turns.length * 1000,
      });
    }
  }
  return rows;
}

/** The directive of one conversation's agent (mode `system_first`, deterministic version id). */
export function locomoDirective(conv: LocomoConversation, orgId: string): DirectiveRow {
  return {
    org_id: orgId,
    agent_id: conv.agentId,
    content:
      `You are the assistant of ${conv.speakerA} and ${conv.speakerB}. Your memories are their past ` +
      'conversations: answer from them, say so when they do not cover the question, and never invent details.',
    injection_mode: 'system_first',
    version_id: uuidV5(`${conv.agentId}:directive:v1`, LOCOMO_MEMORY_NS),
  };
}

/** Replaces each conversation's agent (memories + directive) in `store`. */
export function ingestLocomo(
  store: EmbeddedStore,
  conversations: readonly LocomoConversation[],
  orgId: string,
): IngestSummary {
  const org = canonicalUuid(orgId);
  if (org === null) throw new Error('org must be a UUID');
  const summary: IngestSummary = { db: store.path, org_id: org, agents: [], memories: 0, directives: 0 };
  for (const conv of conversations) {
    const rows = locomoMemories(conv, org);
    store.replaceAgent(org, conv.agentId, rows, locomoDirective(conv, org));
    summary.agents.push({
      agent_id: conv.agentId,
      sample_id: conv.sampleId,
      file: conv.file,
      speakers: [conv.speakerA, conv.speakerB],
      memories: rows.length,
    });
    summary.memories += rows.length;
    summary.directives++;
  }
  return summary;
}

const USAGE =
  'usage: ibex-context ingest --locomo <dir|file> [--db <path> | --postgres <url>] [--org <uuid>]\n' +
  'store: --postgres, else --db, else IBEX_CONTEXT_POSTGRES_URL (schema IBEX_CONTEXT_POSTGRES_SCHEMA), else IBEX_CONTEXT_EMBEDDED_DB';

/**
 * CLI entry. Prints the {@link IngestSummary} as one JSON line on stdout.
 * @returns 0 on success, 2 for bad arguments, 1 when reading or writing fails (JSON `{"error"}` on stderr).
 */
export async function run(argv: string[]): Promise<number> {
  let locomo: string;
  let db: string;
  let org: string;
  let postgres: { url: string; schema: string } | null = null;
  try {
    const { values } = parseArgs({
      args: argv,
      strict: true,
      options: {
        locomo: { type: 'string' },
        db: { type: 'string' },
        postgres: { type: 'string' },
        org: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    });
    if (values.help) {
      process.stdout.write(`${USAGE}\n`);
      return 0;
    }
    if (values.locomo === undefined) throw new Error('--locomo <dir> is required');
    locomo = values.locomo;
    const orgId = canonicalUuid(values.org ?? LOCOMO_ORG_ID);
    if (orgId === null) throw new Error('--org must be a UUID');
    org = orgId;
    if (values.postgres !== undefined && !/^postgres(ql)?:\/\/\S+$/.test(values.postgres.trim()))
      throw new Error('--postgres must be a postgres:// URL');
    // Only the store settings are read from the environment, so unrelated settings cannot block an import.
    const env = loadSettings({
      IBEX_CONTEXT_EMBEDDED_DB: process.env.IBEX_CONTEXT_EMBEDDED_DB,
      IBEX_CONTEXT_POSTGRES_URL: values.postgres ?? process.env.IBEX_CONTEXT_POSTGRES_URL,
      IBEX_CONTEXT_POSTGRES_SCHEMA: process.env.IBEX_CONTEXT_POSTGRES_SCHEMA,
    });
    if (values.postgres !== undefined && values.db !== undefined) throw new Error('give --db or --postgres');
    db = values.db ?? env.embeddedDb;
    if (values.db === undefined && env.postgres.url !== '')
      postgres = { url: env.postgres.url, schema: env.postgres.schema };
  } catch (err) {
    process.stderr.write(`${JSON.stringify({ error: (err as Error).message })}\n${USAGE}\n`);
    return 2;
  }
  if (postgres !== null) {
    // Loaded on demand so the embedded path never loads `pg`.
    const { runPostgresIngest } = await import('../../retrieval/postgres/ingest-locomo.js');
    return runPostgresIngest(locomo, postgres, org);
  }
  let store: EmbeddedStore | undefined;
  try {
    const conversations = await readLocomo(locomo);
    store = EmbeddedStore.open(db);
    const summary = ingestLocomo(store, conversations, org);
    process.stdout.write(`${JSON.stringify(summary)}\n`);
    return 0;
  } catch (err) {
    process.stderr.write(`${JSON.stringify({ error: `ingest: ${(err as Error).message}` })}\n`);
    return 1;
  } finally {
    store?.close();
  }
}
