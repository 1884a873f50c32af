/**
 * The dependency warm-up's verdict: reads that end past their branch timeout on fresh connections are
 * expected and logged at debug; a read that fails, or a dependency that answers nothing but timeouts,
 * is a warning an operator should see.
 */
import { describe, expect, it } from 'vitest';
import { WARM_CONCURRENCY, WARM_ROUNDS, warmDependencies } from '../../src/app/dependency-warmup.js';
import { BranchErrors } from '../../src/retrieval/branch-error.js';
import type { RetrievalSources } from '../../src/retrieval/sources.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { logSink } from '../helpers/log-sink.js';

const timeout = () => BranchErrors.httpTimeout('hot');

/**
 * Sources whose `read`-th read (1-based, every route counted) throws what `failure` returns; the others
 * answer nothing.
 */
function readsFailing(failure: (read: number) => Error | null): {
  sources: RetrievalSources;
  reads: () => number;
} {
  let reads = 0;
  const read = async () => {
    reads++;
    const err = failure(reads);
    if (err) throw err;
    return [];
  };
  return {
    sources: {
      memory: { hot: read, search: read, close: async () => {} },
      directive: { get: async () => read().then(() => null), close: async () => {} },
      close: async () => {},
      kind: { memory: 'postgres', directive: 'postgres' },
    } as unknown as RetrievalSources,
    reads: () => reads,
  };
}

/** Sources whose every `n`-th read fails with `failure()`; the others answer nothing. */
function sources(failure: () => Error, every: number): RetrievalSources {
  return readsFailing((read) => (read % every === 0 ? failure() : null)).sources;
}

async function warm(s: RetrievalSources) {
  const sink = logSink();
  const report = await warmDependencies(s, createLogger({ logLevel: 'debug' }, sink.stream));
  const warned = sink.lines.filter(
    (l) =>
      l.msg ===
      'dependency warm-up: some reads failed; the service starts and answers degraded until they recover',
  );
  const slow = sink.lines.filter(
    (l) =>
      l.msg ===
      'dependency warm-up: no read answered within its branch timeout; the service starts and answers degraded while reads stay slow',
  );
  return { report, warned, slow };
}

describe('dependency warm-up', () => {
  it('goes on after a round of slow reads (cold connections) and does not warn once later rounds answer', async () => {
    // The first round's reads all end past their branch timeout, as on cold connections.
    const cold = readsFailing((read) => (read <= WARM_CONCURRENCY * 3 ? timeout() : null));
    const { report, warned, slow } = await warm(cold.sources);
    expect(cold.reads()).toBe(WARM_ROUNDS * WARM_CONCURRENCY * 3);
    expect(report.slow).toBe(WARM_CONCURRENCY * 3);
    expect(report.ok).toBe((WARM_ROUNDS - 1) * WARM_CONCURRENCY * 3);
    expect(slow).toHaveLength(0);
    expect(warned).toHaveLength(0);
  });

  it('stops after a round in which every read failed: the dependency is down', async () => {
    const down = readsFailing(() => BranchErrors.unavailable('postgres', 'ECONNREFUSED'));
    const { report, warned } = await warm(down.sources);
    expect(down.reads()).toBe(WARM_CONCURRENCY * 3);
    expect(report.failed).toBe(WARM_CONCURRENCY * 3);
    expect(warned).toHaveLength(1);
  });

  it('counts reads past their branch timeout as slow and does not warn while others answer', async () => {
    const { report, warned } = await warm(sources(timeout, 3));
    expect(report.slow).toBeGreaterThan(0);
    expect(report.failed).toBe(0);
    expect(report.ok).toBeGreaterThan(0);
    expect(warned).toHaveLength(0);
  });

  it('warns when a read fails, naming the route', async () => {
    const { report, warned } = await warm(
      sources(() => BranchErrors.unavailable('postgres', 'ECONNREFUSED'), 3),
    );
    expect(report.failed).toBeGreaterThan(0);
    expect(warned).toHaveLength(1);
    expect(Object.values(report.errors).join(' ')).toContain('postgres unavailable (ECONNREFUSED)');
  });

  it('warns when nothing but timeouts came back, saying they were slow, not failed', async () => {
    const { report, warned, slow } = await warm(sources(timeout, 1));
    expect(report.ok).toBe(0);
    expect(report.failed).toBe(0);
    expect(slow).toHaveLength(1);
    expect(warned).toHaveLength(0);
  });
});
