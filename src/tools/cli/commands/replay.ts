// `ibex-context replay --locomo <dir>`: a call per later-session turn, every answer checked, a summary.

import { CapabilityCatalog } from '../../../budget/catalog.js';
import { catalogFileSetting } from '../../../config/settings.js';
import { canonicalUuid } from '../../../util/uuid.js';
import { budgetMix, probeCandidateTokens } from '../../client/budget-mix.js';
import {
  CONNECTION_FLAGS,
  CONNECTION_USAGE,
  connectionFromFlags,
  numberFlag,
} from '../../client/cli-options.js';
import { locomoRequests } from '../../client/locomo-requests.js';
import { type ReplayOptions, type ReplayReport, runReplay } from '../../client/replay.js';
import { renderTable } from '../../client/stats.js';
import { readLocomo } from '../../locomo/dataset.js';
import { commandPrologue, progressLine, stringFlags } from '../command-args.js';
import { printCommandError } from '../command-error.js';
import { unreachableExit } from '../reachability.js';

const USAGE = `usage: ibex-context replay --locomo <dir> [options]

      --locomo <dir>        LoCoMo conversations (the same files given to 'ibex-context ingest')
  -R, --rate <calls/s>      pace the calls from the start, open loop (default 100, about half of what a
                            quiet 2-core machine holds; 0 = unpaced, as fast as --concurrency allows)
      --concurrency <n>     at most n calls in flight (default 16 when paced, 4 unpaced)
      --constrained <share> share of calls (0..1) with an available_tokens that fits 30–80 % of the
                            candidates' tokens, probed per agent first (default 0); memory_tokens over
                            available_tokens is a violation
      --seed <n>            seed of the budget mix (default 1)
      --retries <n>         retry a call answered DEADLINE_EXCEEDED, UNAVAILABLE or RESOURCE_EXHAUSTED up to
                            n times (default 0: every error counts; retries are reported, the last status counts)
      --limit <n>           at most n calls (default: every turn of the later sessions)
      --timeout <ms>        per-call gRPC deadline (default 1000)
      --org <uuid>          org the conversations were ingested under (default: ingest's default)
      --catalog <file>      catalog override for the budget check (default $IBEX_CONTEXT_CATALOG_FILE)
      --json                print one JSON object instead of the summary (errors too: {"error": …})
  -h, --help                this text
${CONNECTION_USAGE}
"latency (client)" runs from each call's start in this process to its answer, so it includes this
process's own decoding and checks; "total_ms (server)" is the service's own time for the call.`;

/**
 * Warning when calls succeeded but none got a memory: if all such answers were degraded, the memory branches
 * did not answer in time; else usually an --org (or store) other than the one ingested into.
 */
export function noMemoryWarning(
  r: Pick<ReplayReport, 'ok' | 'memories_included'> & Partial<Pick<ReplayReport, 'levels'>>,
): string | null {
  if (r.ok === 0 || r.memories_included.max > 0) return null;
  const degraded = r.levels === undefined ? 0 : r.levels.L1 + r.levels.L2;
  if (r.levels !== undefined && degraded === r.ok) {
    return (
      `warning: none of the ${r.ok} OK answers included a memory, and every one was degraded ` +
      `(L1 ${r.levels.L1}, L2 ${r.levels.L2}): the memory branches did not answer in time or failed ` +
      '(memory service or store slow or down, or a saturated machine); see the reasons with ' +
      "'ibex-context assemble --json' and the service's log"
    );
  }
  return (
    `warning: none of the ${r.ok} OK answers included a memory; check that --org is the org ` +
    "'ibex-context ingest' printed and that the service reads the store ingest wrote" +
    (degraded > 0 ? ` (${degraded} of them were degraded)` : '')
  );
}

/** The human summary of a replay. */
export function formatReplayReport(r: ReplayReport): string {
  const errors = Object.entries(r.errors).map(([code, n]) => `${code} ${n}`);
  const rows = [
    ['', 'value'],
    ['calls', `${r.calls} (of ${r.turns_available} turns in ${r.conversations} conversations)`],
    ['pacing', r.rate === null ? 'unpaced' : `${r.rate} calls/s`],
    [
      'constrained',
      `${r.constrained.calls} calls · packer chose in ${r.constrained.budget_choice} · over budget ${r.constrained.over_budget}`,
    ],
    ['ok', String(r.ok)],
    [
      'retried',
      Object.keys(r.retried).length === 0
        ? '0'
        : Object.entries(r.retried)
            .map(([code, n]) => `${code} ${n}`)
            .join(', '),
    ],
    ['errors', errors.length === 0 ? '0' : errors.join(', ')],
    ['levels', `L0 ${r.levels.L0} · L1 ${r.levels.L1} · L2 ${r.levels.L2}`],
    [
      'memories included',
      `min ${r.memories_included.min} · median ${r.memories_included.median} · max ${r.memories_included.max}`,
    ],
    [
      'tokens used',
      `min ${r.tokens_used.min} · median ${r.tokens_used.median} · max ${r.tokens_used.max} · total ${r.tokens_used.total}`,
    ],
    [
      'latency (client)',
      `p50 ${r.latency_ms.p50} ms · p99 ${r.latency_ms.p99} ms · max ${r.latency_ms.max} ms`,
    ],
    ['total_ms (server)', `p50 ${r.server_total_ms.p50} ms · p99 ${r.server_total_ms.p99} ms`],
    ['invariant violations', String(r.invariant_violations)],
    ['budget not applicable', String(r.budget_unchecked)],
    ['duration', `${r.duration_s} s`],
  ];
  const lines = [`replay @ ${r.target}`, renderTable(rows)];
  const kinds = Object.entries(r.violations_by_kind).filter(([, n]) => n > 0);
  if (kinds.length > 0) lines.push(`violations by kind: ${kinds.map(([k, n]) => `${k} ${n}`).join(', ')}`);
  for (const [code, details] of Object.entries(r.error_details)) {
    lines.push(`${code}: ${details.map((d) => `'${d}'`).join(', ')}`);
  }
  for (const s of r.violation_samples) {
    lines.push(`  ${s.request_id} (${s.model}): ${s.details.join('; ')}`);
  }
  return lines.join('\n');
}

/** CLI entry: 0 when all OK without violation; 1 on errors, violations, no calls, unreachable; 2 bad flags. */
export async function run(argv: string[]): Promise<number> {
  const parsed = await commandPrologue(
    argv,
    {
      command: 'replay',
      usage: USAGE,
      options: {
        ...CONNECTION_FLAGS,
        ...stringFlags('locomo', 'concurrency'),
        rate: { type: 'string', short: 'R' },
        ...stringFlags('constrained', 'seed', 'retries', 'limit', 'timeout', 'org', 'catalog'),
      },
    },
    (values) => {
      if (values.locomo === undefined) throw new Error('--locomo <dir> is required');
      const rate = numberFlag('rate', values.rate, 100, { min: 0, max: 100_000 });
      const opts: Omit<ReplayOptions, 'conversations'> = {
        ...connectionFromFlags(values),
        rate,
        timeoutMs: numberFlag('timeout', values.timeout, 1000, { min: 1, max: 3_600_000 }),
        catalog: CapabilityCatalog.load(values.catalog ?? catalogFileSetting()),
        concurrency: numberFlag('concurrency', values.concurrency, rate ? 16 : 4, {
          min: 1,
          max: 1024,
          integer: true,
        }),
        retries: numberFlag('retries', values.retries, 0, { min: 0, max: 10, integer: true }),
      };
      const constrained = numberFlag('constrained', values.constrained, 0, { min: 0, max: 1 });
      const seed = numberFlag('seed', values.seed, 1, { integer: true });
      if (values.limit !== undefined) {
        opts.limit = numberFlag('limit', values.limit, 0, { min: 1, integer: true });
      }
      if (values.org !== undefined) {
        const org = canonicalUuid(values.org);
        if (org === null) throw new Error('--org must be a UUID');
        opts.orgId = org;
      }
      return { opts, dir: values.locomo, constrained, seed };
    },
  );
  if (parsed.exit !== null) return parsed.exit;
  const { json } = parsed;
  const { opts, dir, constrained, seed } = parsed.config;
  const unreachable = await unreachableExit('replay', opts, json);
  if (unreachable !== null) return unreachable;

  const progress = progressLine();
  const controller = new AbortController();
  const onSigint = () => controller.abort();
  process.once('SIGINT', onSigint);
  try {
    const conversations = await readLocomo(dir);
    if (constrained > 0) {
      const requests = locomoRequests(conversations, { orgId: opts.orgId }).map((r) => r.request);
      const tokens = await probeCandidateTokens(opts, requests);
      opts.mix = budgetMix(tokens, { share: constrained, seed });
    }
    let lastDraw = 0;
    const report = await runReplay({
      ...opts,
      conversations,
      signal: controller.signal,
      onProgress: progress.tty
        ? (done, total) => {
            const now = Date.now();
            if (now - lastDraw < 200 && done < total) return;
            lastDraw = now;
            progress.draw(`replay ${done}/${total}`);
          }
        : undefined,
    });
    progress.clear();
    process.stdout.write(json ? `${JSON.stringify(report)}\n` : `${formatReplayReport(report)}\n`);
    const errorCount = Object.values(report.errors).reduce((s, n) => s + n, 0);
    if (report.calls === 0) process.stderr.write('ibex-context replay: no turns to replay\n');
    const warning = noMemoryWarning(report);
    if (warning !== null) process.stderr.write(`ibex-context replay: ${warning}\n`);
    return errorCount === 0 && report.invariant_violations === 0 && report.calls > 0 ? 0 : 1;
  } catch (err) {
    progress.clear();
    printCommandError('replay', (err as Error).message, json);
    return 1;
  } finally {
    process.removeListener('SIGINT', onSigint);
  }
}
