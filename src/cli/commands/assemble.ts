/**
 * `ibex-context assemble`: one AssembleContext call (SPEC §2), printed as the assembled context and a
 * short table of the answer's numbers, or as the response object with `--json`.
 */
import { parseArgs } from 'node:util';
import { status } from '@grpc/grpc-js';
import {
  CONNECTION_FLAGS,
  CONNECTION_USAGE,
  connectionFromFlags,
  numberFlag,
  statusName,
} from '../../client/cli-options.js';
import {
  type ConnectionOptions,
  createContextClient,
  LEVEL_METADATA_KEY,
} from '../../client/context-client.js';
import { renderTable } from '../../client/stats.js';
import type { AssembleContextRequestInput, AssembleContextResponse, Message } from '../../server/proto.js';

const USAGE = `usage: ibex-context assemble --org <uuid> --agent <uuid> --model <model> --query <text> [options]

      --message <role:content>  a recent message (repeatable, in order); split at the first ':'
      --session <id>            session_id
      --skip-hot                options.skip_hot_memories
      --skip-cold               options.skip_cold_memories
      --max-memories <n>        options.max_memories (0..100; 0 = no cap)
      --available-tokens <n>    available_tokens
      --timeout <ms>            gRPC deadline (default 1000)
      --json                    print the response object (or {"error", "code", "details"}) as JSON
${CONNECTION_USAGE}`;

/**
 * Parses `role:content` (split at the first `:`; the content may contain more colons).
 * @throws Error when there is no `:`.
 */
export function parseMessageFlag(text: string): Message {
  const i = text.indexOf(':');
  if (i < 0) throw new Error(`--message must be role:content, got '${text}'`);
  return { role: text.slice(0, i), content: text.slice(i + 1) };
}

/** The table printed under the context: token counts, memories, level, branches, metrics. */
export function formatAssembleSummary(res: AssembleContextResponse, levelHeader: string | undefined): string {
  const d = res.degradation;
  const m = res.metrics;
  const byExclusion = new Map<string, number>();
  for (const u of res.memories_used ?? [])
    byExclusion.set(u.exclusion, (byExclusion.get(u.exclusion) ?? 0) + 1);
  const leftOut = [...byExclusion].filter(([k]) => k !== 'included').map(([k, n]) => `${k} ${n}`);
  const rows: string[][] = [
    ['field', 'value'],
    ['tokens_used', String(res.tokens_used)],
    [
      'directive / history / memory tokens',
      `${res.directive_tokens} / ${res.history_tokens} / ${res.memory_tokens}`,
    ],
    [
      'memories_included',
      `${res.memories_included}` +
        (leftOut.length > 0 ? ` (scored but left out: ${leftOut.join(', ')})` : ''),
    ],
    [
      'level',
      `${d?.level ?? '?'}${d?.intentional ? ' (intentional)' : ''}` +
        (levelHeader && levelHeader !== d?.level ? ` [header says ${levelHeader}]` : ''),
    ],
  ];
  if (d && d.reasons.length > 0) rows.push(['reasons', d.reasons.join(', ')]);
  for (const b of d?.branches ?? []) {
    rows.push([
      `branch ${b.name}`,
      `${b.status} in ${b.latency_ms.toFixed(2)} ms${b.detail ? ` (${b.detail})` : ''}`,
    ]);
  }
  if (m) {
    rows.push(
      [
        'metrics ms',
        `total ${m.total_ms} · budget ${m.budget_calculation_ms} · directive ${m.directive_load_ms} · ` +
          `hot ${m.hot_memory_retrieval_ms} · cold ${m.cold_memory_retrieval_ms} · ranking ${m.ranking_ms} · ` +
          `packing ${m.packing_ms} · formatting ${m.formatting_ms}`,
      ],
      ['pool µs', `wait ${m.pool_wait_us} · run ${m.pool_run_us}`],
      ['candidates_evaluated', String(m.candidates_evaluated)],
    );
  }
  rows.push(['score_schema', res.score_schema]);
  if (res.request_id) rows.push(['request_id', res.request_id]);
  return renderTable(rows);
}

/**
 * CLI entry.
 * @returns 0 on an OK answer, 1 on a gRPC error status (printed as `CODE: details`) or a connection
 *   failure, 2 for bad flags.
 */
export async function run(argv: string[]): Promise<number> {
  let conn: ConnectionOptions;
  let req: AssembleContextRequestInput;
  let timeoutMs: number;
  let json: boolean;
  try {
    const { values } = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: {
        ...CONNECTION_FLAGS,
        org: { type: 'string' },
        agent: { type: 'string' },
        model: { type: 'string' },
        query: { type: 'string' },
        message: { type: 'string', multiple: true },
        session: { type: 'string' },
        'skip-hot': { type: 'boolean' },
        'skip-cold': { type: 'boolean' },
        'max-memories': { type: 'string' },
        'available-tokens': { type: 'string' },
        timeout: { type: 'string' },
        json: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
      },
    });
    if (values.help) {
      process.stdout.write(`${USAGE}\n`);
      return 0;
    }
    for (const name of ['org', 'agent', 'model'] as const) {
      if (values[name] === undefined) throw new Error(`--${name} is required`);
    }
    json = values.json ?? false;
    conn = connectionFromFlags(values);
    timeoutMs = numberFlag('timeout', values.timeout, 1000, { min: 1, max: 3_600_000 });
    // Range checks that the server makes (max_memories 0..100, UUIDs) are left to it, so this tool
    // shows the service's own INVALID_ARGUMENT details.
    req = {
      org_id: values.org,
      agent_id: values.agent,
      model: values.model,
      query: values.query ?? '',
      session_id: values.session ?? '',
      recent_messages: (values.message ?? []).map(parseMessageFlag),
      available_tokens: numberFlag('available-tokens', values['available-tokens'], 0, {
        min: 0,
        max: 2 ** 31 - 1,
        integer: true,
      }),
      options: {
        skip_hot_memories: values['skip-hot'] ?? false,
        skip_cold_memories: values['skip-cold'] ?? false,
        max_memories: numberFlag('max-memories', values['max-memories'], 0, {
          min: -(2 ** 31),
          max: 2 ** 31 - 1,
          integer: true,
        }),
      },
    };
  } catch (err) {
    process.stderr.write(`ibex-context assemble: ${(err as Error).message}\n${USAGE}\n`);
    return 2;
  }

  const client = createContextClient(conn);
  try {
    const outcome = await client.assemble(req, { deadlineMs: timeoutMs });
    if (outcome.status.code !== status.OK || outcome.response === null) {
      const code = statusName(outcome.status.code);
      if (json) {
        const error = `${code}: ${outcome.status.details}`;
        process.stdout.write(`${JSON.stringify({ error, code, details: outcome.status.details })}\n`);
      } else {
        process.stderr.write(`ibex-context assemble: ${code}: ${outcome.status.details}\n`);
      }
      return 1;
    }
    const res = outcome.response;
    if (json) {
      process.stdout.write(`${JSON.stringify(res, null, 2)}\n`);
    } else {
      const header = outcome.metadata.get(LEVEL_METADATA_KEY)[0];
      const context = res.assembled_context === '' ? '(empty context)' : res.assembled_context;
      process.stdout.write(
        `${context}\n\n${formatAssembleSummary(res, typeof header === 'string' ? header : undefined)}\n`,
      );
    }
    return 0;
  } finally {
    client.close();
  }
}
