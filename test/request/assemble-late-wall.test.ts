/**
 * contract.md §10 answer guarantee under load: a retrieval that ends past its wall (a busy event loop) leaves
 * the CPU stage less than its measured round-trip. The call is then answered L2 `pool_deadline` at once,
 * from what is at hand, instead of submitting a task whose withdrawal a late timer would report after D
 * (the service's own DEADLINE_EXCEEDED seen by bench:load at 700–1000 rps). A large history whose CPU
 * stage is measured too slow for the time left is answered L2 from the main thread, and one whose degraded
 * answer cannot be ready in time is refused at once, neither for ever.
 */

import { Metadata } from '@grpc/grpc-js';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { loadSettings } from '../../src/config/settings.js';
import { type CpuTaskInput, runCpuTask } from '../../src/cpu-stage/cpu-task.js';
import type { CpuPool, CpuRunOptions, CpuStageResult } from '../../src/pool/pool-client.js';
import type { CallContext } from '../../src/request/call-context.js';
import { REFUSAL_MEMORY_MS, REFUSAL_MIN_SAMPLES } from '../../src/request/stage-reserve.js';
import { validateAssembleRequest } from '../../src/request/validate.js';
import type { RetrievalSources } from '../../src/retrieval/retrieve.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { createMetrics, type Metrics } from '../../src/telemetry/metrics.js';
import { Errors } from '../../src/wire/errors.js';
import { ASSEMBLED_UTF8 } from '../../src/wire/proto.js';
import { catalogAssembler } from '../helpers/assembler.js';
import { logSink } from '../helpers/log-sink.js';

/** The injected monotonic clock: moves only when the test (or a "stalled" source) moves it. */
const fake = vi.hoisted(() => ({ now: 1_000_000 }));
vi.mock('../../src/util/clock.js', async (importOriginal) => {
  const orig = await importOriginal<typeof import('../../src/util/clock.js')>();
  const monotonicNow = () => fake.now;
  return {
    ...orig,
    monotonicNow,
    armAt: (d: number, fn: () => void, o: Parameters<typeof orig.armAt>[2] = {}) =>
      orig.armAt(d, fn, { clock: monotonicNow, ...o }),
  };
});

const ORG = '0b8f8c1e-6a5e-4c3b-9d7e-1f2a3b4c5d6e';
const AGENT = 'a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d';

/**
 * An assembler over sources that answer nothing and a pool that runs the real CPU task but reports a
 * 10 ms round-trip and a run of `runUs` µs (what the reserve learns from).
 */
function setup({
  runUs = 500,
  metrics,
  queueWaitMs = 0,
}: {
  runUs?: number;
  metrics?: Metrics;
  queueWaitMs?: number;
} = {}) {
  const settings = loadSettings({ IBEX_CONTEXT_LOG_LEVEL: 'silent' });
  /** How long the next directive read "stalls" the loop, ms on the fake clock. */
  const stall = { ms: 0 };
  const sources = {
    directive: {
      get: async () => {
        fake.now += stall.ms;
        return null;
      },
      close: async () => {},
    },
    memory: { hot: async () => [], search: async () => [], close: async () => {} },
    close: async () => {},
    kind: { memory: 'embedded', directive: 'embedded' },
  } as unknown as RetrievalSources;
  const runs: number[] = [];
  /** Each submitted task's options, as the pool got them. */
  const runOptions: CpuRunOptions[] = [];
  const log = logSink();
  const pool = {
    // A 10 ms round-trip, as measured by the assembler.
    run: async (input: CpuTaskInput, opts: CpuRunOptions = {}): Promise<CpuStageResult> => {
      runOptions.push(opts);
      // As the real pool does when a queued task reaches a thread `queueWaitMs` later and no longer fits.
      if (queueWaitMs > 0 && opts.fitsAt && !opts.fitsAt(fake.now + queueWaitMs)) {
        opts.onReturned?.(input);
        throw Errors.poolDeadline('withdrawn', new Error('no longer fits'));
      }
      runs.push(fake.now);
      return { output: runCpuTask(input), wait_us: 0, run_us: runUs, round_trip_us: 10_000 };
    },
  } as unknown as CpuPool;
  const assemble = catalogAssembler({
    settings,
    sources,
    pool,
    logger: createLogger({ logLevel: 'info' }, log.stream),
    metrics,
  });
  /**
   * One call with `leftMs` until its deadline and `history` as its recent messages; `copied`: the history's
   * bytes view part of a larger buffer, so the CPU task gets a copy and not the request's own buffer.
   */
  const call = (leftMs = 45, history: string[] = [], { copied = false } = {}) => {
    const ctx: CallContext = {
      signal: new AbortController().signal,
      deadline: fake.now + leftMs,
      arrival: fake.now,
      metadata: new Metadata(),
      gathered: {},
    };
    const req = validateAssembleRequest({
      org_id: ORG,
      agent_id: AGENT,
      model: 'gpt-4o',
      query: 'q',
      recent_messages: history.map((content) => ({ role: 'user', content })),
    });
    if (copied) {
      const { source } = req.history;
      const larger = new Uint8Array(source.byteLength + 4096);
      larger.set(source);
      req.history.source = larger.subarray(0, source.byteLength);
    }
    return assemble(req, ctx);
  };
  return { stall, runs, runOptions, call, logLines: log.lines };
}

describe('assembler: retrieval wall ended late', () => {
  afterEach(() => {
    fake.now = 1_000_000;
  });

  it('answers L2 pool_deadline without submitting a CPU task that cannot fit the time left', async () => {
    const { stall, runs, call, logLines } = setup();
    // On time: the CPU stage runs and teaches its 10 ms round-trip.
    const first = await call();
    expect(first.level).toBe('L0');
    expect(runs).toHaveLength(1);
    // The loop stalls 40 of the 45 ms in retrieval: 5 ms left, the CPU task would get ≤ 2.5 ms.
    stall.ms = 40;
    const late = await call();
    expect(runs).toHaveLength(1);
    expect(late.level).toBe('L2');
    expect(late.response.degradation.reasons).toContain('pool_deadline');
    // contract.md §12: one line per degraded assembly (none for the L0 call), with its level and reasons.
    const degraded = logLines.filter((l) => l.msg === 'degraded assembly');
    expect(degraded).toHaveLength(1);
    expect(degraded[0]).toMatchObject({
      level: 'info',
      component: 'assemble',
      degradation_level: 'L2',
      reasons: late.response.degradation.reasons,
    });
    expect((degraded[0]!.branches as unknown[]).length).toBe(3);
  });

  it('still submits the CPU task when retrieval left it the share it was meant to', async () => {
    const { stall, runs, call } = setup();
    await call();
    stall.ms = 5; // late, but within the wall
    const ok = await call();
    expect(runs).toHaveLength(2);
    expect(ok.level).toBe('L0');
  });
});

describe('assembler: a large history whose CPU stage or degraded answer cannot be ready in time', () => {
  afterEach(() => {
    fake.now = 1_000_000;
  });

  it('is answered L2 pool_deadline without a CPU task once REFUSAL_MIN_SAMPLES runs measured the stage too slow, and the stage is tried again after REFUSAL_MEMORY_MS', async () => {
    const metrics = createMetrics();
    try {
      // 10 × 30,000 ASCII characters: 0.286 MiB. Each CPU-stage run "takes" 290 ms, ~1,014 ms per MiB.
      const history = Array.from({ length: 10 }, (_, i) => String(i).repeat(30_000));
      const { runs, call } = setup({ runUs: 290_000, metrics });
      const refused = async () => (await metrics.refusedTooLate.get()).values[0]?.value ?? 0;
      // Until REFUSAL_MIN_SAMPLES runs, every task is submitted.
      for (let i = 0; i < REFUSAL_MIN_SAMPLES; i++) expect((await call(100, history)).level).toBe('L0');
      expect(runs).toHaveLength(REFUSAL_MIN_SAMPLES);
      // Now a typical run needs ~290 ms: with 100 ms left the task is not submitted, and the call is
      // answered from the main thread — its degraded answer fits (contract.md §10), so it is not refused.
      const degraded = await call(100, history);
      expect(runs).toHaveLength(REFUSAL_MIN_SAMPLES);
      expect(degraded.level).toBe('L2');
      expect(degraded.response.degradation.reasons).toContain('pool_deadline');
      // The degraded answer carries the whole history (300,000 bytes), spliced from the request's bytes.
      expect(degraded.response[ASSEMBLED_UTF8]?.byteLength).toBeGreaterThan(300_000);
      expect(await refused()).toBe(0);
      // With a second left it runs (the history travels in its own buffer: judged until D, 1,000 ms ≥
      // 1.5 × 290 ms); a small history is never judged so.
      expect((await call(1000, history)).level).toBe('L0');
      expect(runs).toHaveLength(REFUSAL_MIN_SAMPLES + 1);
      expect((await call(45, ['hello'])).level).toBe('L0');
      // Skipped tasks teach nothing: past REFUSAL_MEMORY_MS since the newest run, one is submitted again.
      fake.now += REFUSAL_MEMORY_MS;
      expect((await call(100, history)).level).toBe('L2');
      fake.now += 1;
      const runsBefore = runs.length;
      expect((await call(100, history)).level).toBe('L0');
      expect(runs).toHaveLength(runsBefore + 1);
    } finally {
      metrics.stop();
    }
  });

  it('judges a task that takes the request buffer until D, and one that got a copy until its own deadline', async () => {
    // 0.286 MiB; each run "takes" 290 ms: a typical run with headroom needs 1.5 × 290 = 435 ms.
    const history = Array.from({ length: 10 }, (_, i) => String(i).repeat(30_000));
    const { runs, call } = setup({ runUs: 290_000 });
    for (let i = 0; i < REFUSAL_MIN_SAMPLES; i++) expect((await call(1000, history)).level).toBe('L0');
    // 450 ms left. The request's own buffer goes with the task: awaited until D, 450 ≥ 435, submitted.
    expect((await call(450, history)).level).toBe('L0');
    expect(runs).toHaveLength(REFUSAL_MIN_SAMPLES + 1);
    // A copy goes: the task's own deadline keeps max(degraded reserve, 5 % of 450 ms) = 22.5 ms for the
    // degraded answer, so 427.5 ms < 435: not submitted, answered L2 from the request's bytes.
    const copied = await call(450, history, { copied: true });
    expect(runs).toHaveLength(REFUSAL_MIN_SAMPLES + 1);
    expect(copied.level).toBe('L2');
    expect(copied.response.degradation.reasons).toContain('pool_deadline');
    // With room for the copy's deadline too, it is submitted.
    expect((await call(470, history, { copied: true })).level).toBe('L0');
    expect(runs).toHaveLength(REFUSAL_MIN_SAMPLES + 2);
  });

  it('gives the pool a fitsAt that re-judges a large task when it leaves the queue; none for a small history', async () => {
    const history = Array.from({ length: 10 }, (_, i) => String(i).repeat(30_000));
    const { runOptions, call } = setup({ runUs: 290_000 });
    for (let i = 0; i < REFUSAL_MIN_SAMPLES; i++) await call(1000, history);
    const submittedAt = fake.now;
    expect((await call(500, history)).level).toBe('L0');
    const { fitsAt } = runOptions.at(-1)!;
    expect(fitsAt).toBeDefined();
    // Awaited until D (the request's own buffer): fits while 435 ms of the 500 are left, not after.
    expect(fitsAt!(submittedAt)).toBe(true);
    expect(fitsAt!(submittedAt + 60)).toBe(true);
    expect(fitsAt!(submittedAt + 70)).toBe(false);
    await call(45, ['hello']);
    expect(runOptions.at(-1)!.fitsAt).toBeUndefined();
  });

  it('is answered L2 pool_deadline from its own history when the pool withdraws its task as no longer fitting', async () => {
    const history = Array.from({ length: 10 }, (_, i) => String(i).repeat(30_000));
    // Queued 100 ms: of 500 ms left, 400 remain for a run that needs 435.
    const { runs, runOptions, call } = setup({ runUs: 290_000, queueWaitMs: 100 });
    for (let i = 0; i < REFUSAL_MIN_SAMPLES; i++) expect((await call(1000, history)).level).toBe('L0');
    const late = await call(500, history);
    expect(runOptions).toHaveLength(REFUSAL_MIN_SAMPLES + 1);
    expect(runs).toHaveLength(REFUSAL_MIN_SAMPLES);
    expect(late.level).toBe('L2');
    expect(late.response.degradation.reasons).toContain('pool_deadline');
    expect(late.response[ASSEMBLED_UTF8]?.byteLength).toBeGreaterThan(300_000);
  });

  it('is refused at once, counted, when not even its degraded answer can be ready (prior 2 ms per MiB)', async () => {
    const metrics = createMetrics();
    try {
      const history = Array.from({ length: 10 }, (_, i) => String(i).repeat(30_000)); // 0.286 MiB: 0.57 ms
      const { runs, call } = setup({ metrics });
      await expect(call(0.5, history)).rejects.toMatchObject({ code: 'IBEX_ERR_DEADLINE_EXCEEDED' });
      expect(runs).toHaveLength(0);
      expect((await metrics.refusedTooLate.get()).values[0]?.value).toBe(1);
    } finally {
      metrics.stop();
    }
  });
});
