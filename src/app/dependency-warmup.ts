/**
 * Opens and warms the connections to the service's dependencies before it reports ready, so the first
 * seconds of traffic do not pay for them inside their 45 ms: the memory service's keep-alive sockets (and
 * undici's parser), the PostgreSQL pool's connections, the Redis connection, the embedded store's read
 * threads. Without it, the first `replay --limit 300` against a memory service opened up to 16 sockets per
 * route under the replay's own load and most of its calls ended DEADLINE_EXCEEDED (docs/deploy.md, "First
 * traffic").
 *
 * The reads are the ones traffic makes (hot, search, directive) for a tenant that holds nothing, so they work
 * the same for every store and send a memory service nothing it would not serve anyway.
 */
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import type { RetrievalSources } from '../retrieval/sources.js';

/**
 * Parallel reads per round against a memory service or PostgreSQL: the replay's and load's default
 * concurrency (16 calls in flight), so as many sockets are open as the first second of traffic needs.
 */
export const WARM_CONCURRENCY = 16;
/**
 * Parallel reads per round against the embedded store: its read threads take a bounded queue and answer
 * `busy` past it, by design; two keep each thread fed without filling it.
 */
export const WARM_CONCURRENCY_EMBEDDED = 2;
/** Rounds of parallel reads: the first opens the connections, the later ones run over open sockets. */
export const WARM_ROUNDS = 3;
/** Bound of one warm-up read, ms: a dependency slower than this at start-up is reported, not waited for. */
export const WARM_READ_TIMEOUT_MS = 2_000;

/** What {@link warmDependencies} found, per kind of read. */
export interface WarmupReport {
  /** Reads that answered (an empty answer counts). */
  ok: number;
  /** Reads that failed, with the first failure's message per route. */
  failed: number;
  errors: Partial<Record<'hot' | 'search' | 'directive', string>>;
  /** Wall time of the warm-up, ms. */
  ms: number;
}

/** Optional warm-up hook a source may offer (e.g. a store that opens its pool's connections itself). */
interface Warmable {
  warmConnections?: () => Promise<void>;
}

/**
 * Runs {@link WARM_ROUNDS} rounds of {@link WARM_CONCURRENCY} (embedded store:
 * {@link WARM_CONCURRENCY_EMBEDDED}) parallel hot, search and directive reads for a fresh random tenant, after any source's own `warmConnections()` hook. Never throws: a dependency that
 * cannot be reached leaves the service to answer degraded (contract.md §10), as it would after start; the failure
 * is logged with the store kind, so a start against a missing dependency is visible.
 * @param sources the service's retrieval sources.
 * @param logger where a failed warm-up is reported (warn) and a clean one noted (debug).
 */
export async function warmDependencies(sources: RetrievalSources, logger: Logger): Promise<WarmupReport> {
  const started = performance.now();
  const report: WarmupReport = { ok: 0, failed: 0, errors: {}, ms: 0 };
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
      report.failed++;
      report.errors[route] ??= (err as Error).message;
    }
  };
  for (let round = 0; round < WARM_ROUNDS; round++) {
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
    if (report.failed >= concurrency * 3) break;
  }
  report.ms = Math.round(performance.now() - started);
  const stores = sources.kind;
  if (report.failed > 0) {
    logger.warn(
      { stores, failed: report.failed, ok: report.ok, errors: report.errors, ms: report.ms },
      'dependency warm-up: some reads failed; the service starts and answers degraded until they recover',
    );
  } else {
    logger.debug({ stores, reads: report.ok, ms: report.ms }, 'dependency connections warm');
  }
  return report;
}
