// `ibex-context assemble`: one call (contract.md §2), shown as context + summary, or `--json`.

import { status } from '@grpc/grpc-js';
import type { AssembleContextRequestInput, AssembleContextResponse, Message } from '../../../wire/proto.js';
import { LEVEL_HEADER } from '../../../wire/wire-headers.js';
import {
  CONNECTION_FLAGS,
  CONNECTION_USAGE,
  connectionFromFlags,
  deadlineSide,
  describeStatus,
  numberFlag,
  statusName,
} from '../../client/cli-options.js';
import { createContextClient } from '../../client/context-client.js';
import { renderTable } from '../../client/stats.js';
import { booleanFlags, commandPrologue, stringFlags } from '../command-args.js';
import { printCommandError } from '../command-error.js';

const USAGE = `usage: ibex-context assemble --org <uuid> --agent <uuid> --model <model> [--query <text>] [options]

      --query <text>            what to search memories for; without one the cold search is skipped (L1)
      --message <role:content>  a recent message (repeatable, in order); split at the first ':'
      --session <id>            session_id
      --skip-hot                options.skip_hot_memories
      --skip-cold               options.skip_cold_memories
      --max-memories <n>        options.max_memories (0..100; 0 = no cap)
      --available-tokens <n>    available_tokens
      --timeout <ms>            gRPC deadline (default 1000)
      --json                    print the response as JSON: assembled_context first, memories_used
                                last, scores to 4 decimals, latencies to 0.01 ms (errors as
                                {"error", "code", "details"[, "deadline": "client"|"server"]})
  -h, --help                    this text
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

const round = (x: number, places: number): number => {
  const f = 10 ** places;
  return Math.round(x * f) / f;
};

/**
 * The response as `--json` prints it: context first, `memories_used` last (not buried under rows), scores
 * rounded to 4 decimals and latencies to 0.01 ms to hide float32 noise.
 */
export function presentResponse(res: AssembleContextResponse): Record<string, unknown> {
  const { assembled_context, memories_used, metrics, degradation, ...rest } = res;
  const ms = (x: number) => round(x, 2);
  return {
    assembled_context,
    ...rest,
    degradation: degradation && {
      ...degradation,
      branches: (degradation.branches ?? []).map((b) => ({ ...b, latency_ms: ms(b.latency_ms) })),
    },
    metrics: metrics && {
      ...metrics,
      budget_calculation_ms: ms(metrics.budget_calculation_ms),
      directive_load_ms: ms(metrics.directive_load_ms),
      hot_memory_retrieval_ms: ms(metrics.hot_memory_retrieval_ms),
      cold_memory_retrieval_ms: ms(metrics.cold_memory_retrieval_ms),
      ranking_ms: ms(metrics.ranking_ms),
      packing_ms: ms(metrics.packing_ms),
      formatting_ms: ms(metrics.formatting_ms),
      total_ms: ms(metrics.total_ms),
    },
    memories_used: (memories_used ?? []).map((u) => ({
      ...u,
      composite_score: round(u.composite_score, 4),
      relevance_score: round(u.relevance_score, 4),
      recency_score: round(u.recency_score, 4),
      usefulness_score: round(u.usefulness_score, 4),
      similarity: round(u.similarity, 4),
      confidence: round(u.confidence, 4),
    })),
  };
}

/** The table printed under the context: token counts, memories, level, branches, metrics. */
export function formatAssembleSummary(res: AssembleContextResponse, levelHeader: string | undefined): string {
  const d = res.degradation;
  const m = res.metrics;
  const r2 = (x: number) => round(x, 2);
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
        `total ${r2(m.total_ms)} · budget ${r2(m.budget_calculation_ms)} · ` +
          `directive ${r2(m.directive_load_ms)} · hot ${r2(m.hot_memory_retrieval_ms)} · ` +
          `cold ${r2(m.cold_memory_retrieval_ms)} · ranking ${r2(m.ranking_ms)} · ` +
          `packing ${r2(m.packing_ms)} · formatting ${r2(m.formatting_ms)}`,
      ],
      ['pool µs', `wait ${m.pool_wait_us} · run ${m.pool_run_us}`],
      ['candidates_evaluated', String(m.candidates_evaluated)],
    );
  }
  rows.push(['score_schema', res.score_schema]);
  if (res.request_id) rows.push(['request_id', res.request_id]);
  return renderTable(rows);
}

/** CLI entry: 0 on an OK answer, 1 on an error status or connection failure, 2 for bad flags. */
export async function run(argv: string[]): Promise<number> {
  const parsed = await commandPrologue(
    argv,
    {
      command: 'assemble',
      usage: USAGE,
      options: {
        ...CONNECTION_FLAGS,
        ...stringFlags('org', 'agent', 'model', 'query'),
        message: { type: 'string', multiple: true },
        ...stringFlags('session', 'max-memories', 'available-tokens', 'timeout'),
        ...booleanFlags('skip-hot', 'skip-cold'),
      },
    },
    (values) => {
      for (const name of ['org', 'agent', 'model'] as const) {
        if (values[name] === undefined) throw new Error(`--${name} is required`);
      }
      const conn = connectionFromFlags(values);
      const timeoutMs = numberFlag('timeout', values.timeout, 1000, { min: 1, max: 3_600_000 });
      // Range checks that the server makes (max_memories 0..100, UUIDs) are left to it, so this tool
      // shows the service's own INVALID_ARGUMENT details.
      const req: AssembleContextRequestInput = {
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
      return { conn, timeoutMs, req };
    },
  );
  if (parsed.exit !== null) return parsed.exit;
  const { json } = parsed;
  const { conn, timeoutMs, req } = parsed.config;
  const client = createContextClient(conn);
  try {
    const started = performance.now();
    const outcome = await client.assemble(req, { deadlineMs: timeoutMs });
    const elapsedMs = performance.now() - started;
    if (outcome.status.code !== status.OK || outcome.response === null) {
      const code = statusName(outcome.status.code);
      const extra: Record<string, unknown> = { code, details: outcome.status.details };
      if (outcome.status.code === status.DEADLINE_EXCEEDED)
        extra.deadline = deadlineSide(elapsedMs, timeoutMs);
      const message = describeStatus(outcome.status, conn.addr, timeoutMs, elapsedMs);
      printCommandError('assemble', message, json, extra);
      return 1;
    }
    const res = outcome.response;
    const note = nothingStoredNote(res, req);
    if (note !== null) process.stderr.write(`ibex-context assemble: ${note}\n`);
    if (json) {
      process.stdout.write(`${JSON.stringify(presentResponse(res), null, 2)}\n`);
    } else {
      const header = outcome.metadata.get(LEVEL_HEADER)[0];
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

/**
 * A note for an undegraded answer that found nothing for the tenant (usually ids other than the ones
 * `ingest` printed); null otherwise.
 */
export function nothingStoredNote(
  res: {
    degradation?: { level?: string } | null;
    metrics?: { candidates_evaluated?: number } | null;
    directive_tokens?: number;
  },
  req: { org_id?: string; agent_id?: string },
): string | null {
  if (res.degradation?.level !== 'L0') return null;
  if ((res.metrics?.candidates_evaluated ?? 0) > 0 || (res.directive_tokens ?? 0) > 0) return null;
  return (
    `note: the service holds no memories and no directive for org ${req.org_id} agent ${req.agent_id} ` +
    "(answer L0, nothing degraded); check --org/--agent against what 'ibex-context ingest' printed"
  );
}
