/**
 * Start-up warm-up on the store's own tenants: the serving pipeline answers real-shaped calls (searches
 * that match hundreds of stored rows) before the service reports ready, so the first traffic meets
 * compiled code and measured reserves instead of priors (docs/deploy.md, "First traffic").
 */
import { randomUUID } from 'node:crypto';
import { Metadata } from '@grpc/grpc-js';
import type { Logger } from 'pino';
import type { AssembleFn, AssembleResult } from '../request/assemble-fn.js';
import { monotonicNow } from '../request/call-context.js';
import { withHistoryView } from '../request/validate.js';
import { encodeHistory } from '../request/wire-request.js';
import type { RetrievalSources, WarmTenant } from '../retrieval/ports.js';

/** Agents sampled, queries per agent, calls in all, calls at once, and the wall bound (ms). */
export const TENANT_WARMUP = { agents: 16, queries: 8, calls: 200, concurrency: 4, maxMs: 3_000 } as const;

export type WarmFields = Pick<
  Parameters<typeof withHistoryView>[0],
  'query' | 'model' | 'availableTokens' | 'history' | 'skipHot' | 'skipCold'
>;

/**
 * One warm-up call of `assemble` for a tenant (a fresh random one by default), with the service's own
 * deadline; resolves undefined on any error.
 */
export function warmCall(
  assemble: AssembleFn,
  fields: WarmFields,
  tenant: { orgId: string; agentId: string } = { orgId: randomUUID(), agentId: randomUUID() },
  deadlineMs = 1000,
): Promise<AssembleResult | undefined> {
  const arrival = monotonicNow();
  return assemble(
    withHistoryView({
      ...tenant,
      sessionId: '',
      directiveVersionId: '',
      maxMemories: 0,
      requestId: '',
      traceId: '',
      spanId: '',
      ...fields,
    }),
    {
      signal: new AbortController().signal,
      deadline: arrival + deadlineMs,
      arrival,
      metadata: new Metadata(),
      gathered: {},
    },
  ).catch(() => undefined);
}

/**
 * A warm-up of at least this many calls warmed the pipeline: start-up's, or else the first one
 * {@link watchNewTenants} runs on agents an import adds.
 */
export const WARMED_CALLS = TENANT_WARMUP.calls / 2;

/** What {@link warmOnTenants} did. */
export interface TenantWarmupReport {
  agents: number;
  calls: number;
  /** Answers at L0. */
  l0: number;
  ms: number;
}

/**
 * Runs up to {@link TENANT_WARMUP}.calls calls through `assemble` (the serving pipeline) over the store's
 * recently written agents, a quarter of them budget-constrained, within {@link TENANT_WARMUP}.maxMs. The
 * caller keeps their answers out of inclusion counts and metrics. Never throws; a store without tenants
 * (or a memory service) warms nothing.
 * @param deadlineMs each call's deadline, ms: the service's IBEX_CONTEXT_TIMEOUT, as traffic gets.
 * @param stop checked before each call: true ends the warm-up early (calls in flight finish).
 */
export async function warmOnTenants(
  assemble: AssembleFn,
  sources: Pick<RetrievalSources, 'warmTenants'>,
  models: readonly string[],
  deadlineMs: number,
  logger: Logger,
  stop: () => boolean = () => false,
): Promise<TenantWarmupReport> {
  const started = monotonicNow();
  const report: TenantWarmupReport = { agents: 0, calls: 0, l0: 0, ms: 0 };
  const tenants: WarmTenant[] = sources.warmTenants
    ? await sources.warmTenants(TENANT_WARMUP.agents, TENANT_WARMUP.queries).catch((err: unknown) => {
        logger.warn({ err }, 'start-up warm-up: could not list stored agents; warming synthetic calls only');
        return [];
      })
    : [];
  const calls = tenants.flatMap((t) => t.queries.map((query) => ({ tenant: t, query })));
  report.agents = tenants.length;
  if (calls.length === 0 || models.length === 0) return report;
  const history = encodeHistory([
    { role: 'user', content: 'Hi! How have you been lately?' },
    { role: 'assistant', content: 'Good, thanks. Busy with the kids and the new job.' },
  ]);
  let next = 0;
  const worker = async () => {
    while (next < TENANT_WARMUP.calls && monotonicNow() - started < TENANT_WARMUP.maxMs && !stop()) {
      const i = next++;
      const { tenant, query } = calls[i % calls.length]!;
      const answered = await warmCall(
        assemble,
        {
          query,
          model: models[i % models.length]!,
          availableTokens: i % 4 === 3 ? 2000 : 0,
          history,
          skipHot: false,
          skipCold: false,
        },
        { orgId: tenant.orgId, agentId: tenant.agentId },
        deadlineMs,
      );
      report.calls++;
      if (answered?.level === 'L0') report.l0++;
    }
  };
  await Promise.all(Array.from({ length: TENANT_WARMUP.concurrency }, worker));
  report.ms = Math.round(monotonicNow() - started);
  return report;
}

/** How often {@link watchNewTenants} looks for added rows, ms. */
export const NEW_TENANT_WATCH = { intervalMs: 250 } as const;

export interface NewTenantWatchOptions {
  /** A quiet assembler: no metric, log line or inclusion count (its answers reach no caller). */
  assemble: AssembleFn;
  sources: Pick<RetrievalSources, 'warmTenants'>;
  /** A number that changes when rows are added to the store; cheap (called every interval). */
  rowStamp: () => number;
  /** Real calls the service has taken so far. */
  servedCalls: () => number;
  models: readonly string[];
  deadlineMs: number;
  logger: Logger;
}

export interface NewTenantWatch {
  /** Ends the watch and waits for a warm-up in progress. Idempotent. */
  stop(): Promise<void>;
  /** Resolves when the watch has ended (warmed once, traffic took over, or stopped). */
  readonly ended: Promise<void>;
}

/**
 * For a service that started on an empty store (the README's order: start, then `ingest`, then traffic):
 * once rows have been added and none for one interval (an import has finished), runs {@link warmOnTenants}
 * on the new agents, as the start-up warm-up does on stored ones, so the first traffic on them does not run
 * code that only real-sized searches reach. It is for a service no one has called yet: the first real call
 * ends it (a warm-up in progress stops; traffic warms the code itself, and a warm-up's reads must not queue
 * beside a caller's), as does one warm-up of at least {@link WARMED_CALLS} calls. Never throws.
 */
export function watchNewTenants(opts: NewTenantWatchOptions): NewTenantWatch {
  let stamp = readStamp(opts);
  let seen = stamp;
  let stopped = false;
  let running: Promise<void> | undefined;
  let end!: () => void;
  const ended = new Promise<void>((resolve) => {
    end = resolve;
  });
  const finish = () => {
    stopped = true;
    clearInterval(timer);
    end();
  };
  const tick = () => {
    if (stopped || running) return;
    if (opts.servedCalls() > 0) return finish();
    const next = readStamp(opts);
    if (next === undefined) return;
    // Rows added since the last warm-up, and none in the last interval: an import has finished.
    const settled = next === seen && next !== stamp;
    seen = next;
    if (!settled) return;
    stamp = next;
    running = warmOnTenants(
      opts.assemble,
      opts.sources,
      opts.models,
      opts.deadlineMs,
      opts.logger,
      () => stopped || opts.servedCalls() > 0,
    ).then((report) => {
      running = undefined;
      opts.logger.debug(report, 'pipeline warmed on newly stored agents');
      if (report.calls >= WARMED_CALLS || opts.servedCalls() > 0) finish();
    });
  };
  const timer = setInterval(tick, NEW_TENANT_WATCH.intervalMs);
  timer.unref();
  return {
    ended,
    async stop() {
      stopped = true;
      await running;
      finish();
    },
  };
}

function readStamp(opts: Pick<NewTenantWatchOptions, 'rowStamp' | 'logger'>): number | undefined {
  try {
    return opts.rowStamp();
  } catch (err) {
    opts.logger.debug({ err }, 'new-tenant watch: could not read the store');
    return undefined;
  }
}
