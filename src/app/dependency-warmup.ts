/**
 * Opens and warms the dependency connections before the service reports ready, with the reads traffic
 * makes, for an empty tenant (docs/deploy.md, "First traffic").
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { isBranchError } from '../retrieval/branch-error.js';
import type { RetrievalSources } from '../retrieval/sources.js';

/** Parallel reads per round against a memory service or PostgreSQL (the replay's default concurrency). */
export const WARM_CONCURRENCY = 16;
/** Parallel reads per round against the embedded store, whose read threads answer `busy` past a queue. */
export const WARM_CONCURRENCY_EMBEDDED = 2;
export const WARM_ROUNDS = 3;
/** Bound of one warm-up read, ms: a slower dependency is reported, not waited for. */
export const WARM_READ_TIMEOUT_MS = 2_000;

/** What {@link warmDependencies} found, per kind of read. */
export interface WarmupReport {
  /** An empty answer counts. */
  ok: number;
  /** Ended past the branch's own timeout: a cold connection or a busy start, not a fault. */
  slow: number;
  failed: number;
  /** First failure per route. */
  errors: Partial<Record<'hot' | 'search' | 'directive', string>>;
  /** Wall time. */
  ms: number;
}

interface Warmable {
  warmConnections?: () => Promise<void>;
}

/**
 * Warms every source (after its own `warmConnections()` hook, if any). Never throws: an unreachable
 * dependency is logged and the service answers degraded, as it would after start.
 */
export async function warmDependencies(sources: RetrievalSources, logger: Logger): Promise<WarmupReport> {
  const started = performance.now();
  const report: WarmupReport = { ok: 0, slow: 0, failed: 0, errors: {}, ms: 0 };
  for (const source of [sources.memory, sources.directive] as Warmable[]) {
    if (typeof source.warmConnections === 'function') {
      await source.warmConnections().catch((err: unknown) => {
        report.failed++;
        report.errors.hot ??= (err as Error).message;
      });
    }
  }
  const concurrency = sources.kind.memory === 'embedded' ? WARM_CONCURRENCY_EMBEDDED : WARM_CONCURRENCY;
  const orgId = randomUUID();
  const agentId = randomUUID();
  const read = async (route: 'hot' | 'search' | 'directive', call: (signal: AbortSignal) => unknown) => {
    try {
      await call(AbortSignal.timeout(WARM_READ_TIMEOUT_MS));
      report.ok++;
    } catch (err) {
      if (isBranchError(err) && err.status === 'timeout') {
        report.slow++;
        return;
      }
      report.failed++;
      report.errors[route] ??= (err as Error).message;
    }
  };
  for (let round = 0; round < WARM_ROUNDS; round++) {
    const failedBefore = report.failed;
    await Promise.all(
      Array.from({ length: concurrency }, () =>
        Promise.all([
          read('hot', (s) => sources.memory.hot(orgId, agentId, s)),
          read('search', (s) => sources.memory.search(orgId, agentId, 'warm up the connections', s)),
          read('directive', (s) => sources.directive.get(orgId, agentId, s)),
        ]),
      ),
    );
    // A dependency that failed a whole round is down: waiting two more rounds would only delay start-up.
    // A round of slow reads goes on: those are cold connections, and warming them is this function's job.
    if (report.failed - failedBefore >= concurrency * 3) break;
  }
  report.ms = Math.round(performance.now() - started);
  const stores = sources.kind;
  // Reads past their branch timeout on fresh connections are expected; only failures, or nothing but
  // timeouts, say a dependency is not there.
  if (report.failed > 0 || (report.ok === 0 && report.slow > 0)) {
    logger.warn(
      {
        stores,
        failed: report.failed,
        slow: report.slow,
        ok: report.ok,
        errors: report.errors,
        ms: report.ms,
      },
      report.failed > 0
        ? 'dependency warm-up: some reads failed; the service starts and answers degraded until they recover'
        : 'dependency warm-up: no read answered within its branch timeout; the service starts and answers degraded while reads stay slow',
    );
  } else {
    logger.debug(
      { stores, reads: report.ok, slow: report.slow, ms: report.ms },
      'dependency connections warm',
    );
  }
  return report;
}
