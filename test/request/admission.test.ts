/**
 * The adaptive admission limit (contract.md §10 amended): its invariants under any sequence of arrivals, ends,
 * latencies and drops (fast-check), and how it follows a simulated process on a fake clock — it shrinks
 * when calls queue or drop, grows back once latency returns to no-load, and never grows on a light load.
 */

import { Metadata } from '@grpc/grpc-js';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { loadSettings } from '../../src/config/settings.js';
import { type CpuTaskInput, runCpuTask } from '../../src/cpu-stage/cpu-task.js';
import type { CpuPool, CpuStageResult } from '../../src/pool/pool-client.js';
import { AdaptiveConcurrencyLimit } from '../../src/request/admission.js';
import { validateAssembleRequest } from '../../src/request/validate.js';
import type { RetrievalSources } from '../../src/retrieval/retrieve.js';
import { createMetrics } from '../../src/telemetry/metrics.js';
import { monotonicNow } from '../../src/util/clock.js';
import { ASSEMBLED_UTF8 } from '../../src/wire/proto.js';
import { splicedText } from '../../src/wire/spliced.js';
import { catalogAssembler } from '../helpers/assembler.js';

type Op =
  | { kind: 'arrive' }
  | { kind: 'end'; latencyMs: number; dropped: boolean }
  | { kind: 'tick'; ms: number };

const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 4, arbitrary: fc.constant({ kind: 'arrive' as const }) },
  {
    weight: 4,
    arbitrary: fc.record({
      kind: fc.constant('end' as const),
      latencyMs: fc.double({ min: 0, max: 500, noNaN: true }),
      dropped: fc.boolean(),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({ kind: fc.constant('tick' as const), ms: fc.integer({ min: 0, max: 200 }) }),
  },
);

describe('AdaptiveConcurrencyLimit invariants', () => {
  it('admits only below the limit, counts every shed, keeps the limit within its bounds', () => {
    fc.assert(
      fc.property(
        fc.array(op, { maxLength: 2000 }),
        fc.integer({ min: 1, max: 10 }),
        fc.integer({ min: 10, max: 200 }),
        (ops, minLimit, maxLimit) => {
          let now = 0;
          const limiter = new AdaptiveConcurrencyLimit({ minLimit, maxLimit, now: () => now });
          let held = 0;
          let sheds = 0;
          for (const o of ops) {
            if (o.kind === 'tick') now += o.ms;
            else if (o.kind === 'arrive') {
              const before = limiter.state();
              const admitted = limiter.tryAcquire();
              expect(admitted).toBe(before.inFlight < Math.floor(before.limit));
              if (admitted) held++;
              else sheds++;
            } else if (held > 0) {
              limiter.release({ latencyMs: o.latencyMs, dropped: o.dropped });
              held--;
            }
            const s = limiter.state();
            expect(s.inFlight).toBe(held);
            expect(s.sheds).toBe(sheds);
            expect(s.limit).toBeGreaterThanOrEqual(minLimit);
            expect(s.limit).toBeLessThanOrEqual(maxLimit);
          }
        },
      ),
      { numRuns: 200 },
    );
  });
});

/**
 * A process that serves `capacity` calls at a time in `serviceMs` each; admitted calls beyond that queue
 * (latency grows with the queue). `rate` arrivals per ms, for `ms` of fake time. @returns sheds and
 * admitted calls in the run.
 */
function drive(
  limiter: AdaptiveConcurrencyLimit,
  clock: { now: number },
  {
    rate,
    ms,
    capacity = 4,
    serviceMs = 2,
    dropAboveMs = Number.POSITIVE_INFINITY,
  }: {
    rate: number;
    ms: number;
    capacity?: number;
    serviceMs?: number;
    dropAboveMs?: number;
  },
): { admitted: number; shed: number } {
  // Each admitted call ends at a time fixed at arrival by the queue ahead of it.
  const ends: { at: number; latency: number }[] = [];
  let admitted = 0;
  let shed = 0;
  let carry = 0;
  const end = clock.now + ms;
  for (; clock.now < end; clock.now += 0.1) {
    ends.sort((a, b) => a.at - b.at);
    while (ends.length > 0 && ends[0]!.at <= clock.now) {
      const e = ends.shift()!;
      limiter.release({ latencyMs: e.latency, dropped: e.latency > dropAboveMs });
    }
    carry += rate * 0.1;
    while (carry >= 1) {
      carry--;
      if (!limiter.tryAcquire()) {
        shed++;
        continue;
      }
      admitted++;
      const queued = Math.max(0, ends.length + 1 - capacity);
      const latency = serviceMs * (1 + queued / capacity);
      ends.push({ at: clock.now + latency, latency });
    }
  }
  // Calls still in flight end (in order) before the next phase.
  ends.sort((a, b) => a.at - b.at);
  for (const e of ends) {
    clock.now = Math.max(clock.now, e.at);
    limiter.release({ latencyMs: e.latency, dropped: e.latency > dropAboveMs });
  }
  return { admitted, shed };
}

describe('AdaptiveConcurrencyLimit following a process', () => {
  it('settles near the concurrency the process serves without queueing, and sheds the rest', () => {
    const clock = { now: 0 };
    const limiter = new AdaptiveConcurrencyLimit({ maxLimit: 128, now: () => clock.now });
    // 4 calls at a time × 2 ms = 2 calls/ms; offered 6 calls/ms (3×).
    drive(limiter, clock, { rate: 6, ms: 2000, dropAboveMs: 20 });
    const { admitted, shed } = drive(limiter, clock, { rate: 6, ms: 1000, dropAboveMs: 20 });
    expect(limiter.state().limit).toBeLessThan(40);
    expect(shed).toBeGreaterThan(0);
    // What it admits it serves: about the process's capacity (2 calls/ms), not the offered 6.
    expect(admitted / 1000).toBeGreaterThan(1.5);
    expect(admitted / 1000).toBeLessThan(4);
  });

  it('grows back within 2 s once the overload ends, and does not grow on a light load', () => {
    const clock = { now: 0 };
    const limiter = new AdaptiveConcurrencyLimit({ maxLimit: 128, now: () => clock.now });
    drive(limiter, clock, { rate: 6, ms: 2000, dropAboveMs: 20 });
    const low = limiter.state().limit;
    // Back to 1.5 calls/ms, under capacity: within 2 s nothing is shed any more.
    drive(limiter, clock, { rate: 1.5, ms: 1000 });
    const after = drive(limiter, clock, { rate: 1.5, ms: 1000 });
    expect(after.shed).toBe(0);
    // A light load never needs more than a few calls in flight: the limit does not run up to the ceiling.
    drive(limiter, clock, { rate: 0.2, ms: 5000 });
    expect(limiter.state().limit).toBeLessThan(128);
    expect(low).toBeLessThan(40);
  });

  it('reads no queue in sub-millisecond jitter below the noise floor (a thread hop, a timer tick)', () => {
    let now = 0;
    const limiter = new AdaptiveConcurrencyLimit({ initialLimit: 20, maxLimit: 128, now: () => now });
    fc.assert(
      fc.property(
        fc.array(fc.double({ min: 0.05, max: 1.99, noNaN: true }), { minLength: 200, maxLength: 400 }),
        (latencies) => {
          const before = limiter.state().limit;
          for (const latencyMs of latencies) {
            // Every call of the window holds the whole limit in flight: full use, so growth is allowed.
            while (limiter.tryAcquire());
            now += 1;
            limiter.release({ latencyMs, dropped: false });
            while (limiter.state().inFlight > 0) limiter.release(null);
          }
          expect(limiter.state().limit).toBeGreaterThanOrEqual(before);
        },
      ),
      { numRuns: 30 },
    );
  });

  it('shrinks on drops alone (calls that lost their CPU stage), whatever their latency', () => {
    let now = 0;
    const limiter = new AdaptiveConcurrencyLimit({ initialLimit: 100, maxLimit: 128, now: () => now });
    for (let w = 0; w < 10; w++) {
      expect(limiter.tryAcquire()).toBe(true);
      now += 60;
      limiter.release({ latencyMs: 1, dropped: true });
    }
    expect(limiter.state().limit).toBeCloseTo(100 * 0.9 ** 10, 5);
  });
});

/** A memory of the test's org and agent, as a source item (`vector`: its similarity is its relevance). */
function hit(source: string) {
  return {
    memory: {
      id: '9d1c2b3a-4e5f-4a6b-8c7d-0e1f2a3b4c5d',
      org_id: '0b8f8c1e-6a5e-4c3b-9d7e-1f2a3b4c5d6e',
      agent_id: 'a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d',
      content: 'Prefers tea & <biscuits>.',
      category: 'preference',
      confidence: 0.9,
    },
    similarity: 0.8,
    rank: 1,
    source,
  };
}

describe('assembler admission', () => {
  it('answers calls past the limit at once, L2 shed with the directive, and reports limit, in-flight and sheds', async () => {
    const settings = loadSettings({ IBEX_CONTEXT_LOG_LEVEL: 'silent', IBEX_CONTEXT_MAX_IN_FLIGHT: '20' });
    const metrics = createMetrics();
    const sources = {
      directive: {
        get: async () => ({ content: 'Be brief.', injection_mode: 'system_first', version_id: 'v1' }),
        close: async () => {},
      },
      // One memory, hot and found by the search: admitted calls carry it, shed ones never read it (no
      // memory branch).
      memory: { hot: async () => [hit('hot')], search: async () => [hit('vector')], close: async () => {} },
      close: async () => {},
      kind: { memory: 'embedded', directive: 'embedded' },
    } as unknown as RetrievalSources;
    // A pool whose tasks wait until the test lets them run: admitted calls stay in flight.
    const held: (() => void)[] = [];
    const pool = {
      run: (input: CpuTaskInput) =>
        new Promise<CpuStageResult>((resolve) => {
          held.push(() =>
            resolve({ output: runCpuTask(input), wait_us: 0, run_us: 100, round_trip_us: 200 }),
          );
        }),
    } as unknown as CpuPool;
    const assemble = catalogAssembler({ settings, sources, pool, metrics });
    const call = () => {
      const now = monotonicNow();
      const req = validateAssembleRequest({
        org_id: '0b8f8c1e-6a5e-4c3b-9d7e-1f2a3b4c5d6e',
        agent_id: 'a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d',
        model: 'gpt-4o',
        query: 'tea',
        recent_messages: [{ role: 'user', content: 'hello' }],
      });
      return assemble(req, {
        signal: new AbortController().signal,
        deadline: now + 10_000,
        arrival: now,
        metadata: new Metadata(),
        gathered: {},
      });
    };
    try {
      // The limit starts at its ceiling, 20 here: 20 calls are admitted and wait for the pool, the next 5 are shed.
      const admitted = Array.from({ length: 20 }, call);
      const shed = await Promise.all(Array.from({ length: 5 }, call));
      for (const s of shed) {
        expect(s.level).toBe('L2');
        expect(s.response.degradation.reasons).toEqual(['hot_skipped', 'cold_skipped', 'shed']);
        expect(s.response.degradation.branches.find((b) => b.name === 'hot')?.detail).toBe('shed');
        expect(splicedText(s.response[ASSEMBLED_UTF8]!)).toContain('Be brief.');
        // Shed stays the cheap answer: no memory, even though the CPU stage was never had.
        expect(s.response.memories_included).toBe(0);
        expect(splicedText(s.response[ASSEMBLED_UTF8]!)).not.toContain('</ibex_memory>');
      }
      const text = await metrics.registry.metrics();
      expect(text).toMatch(/^ibex_context_admission_limit 20$/m);
      expect(text).toMatch(/^ibex_context_admission_in_flight 20$/m);
      expect(text).toMatch(/^ibex_context_admission_shed_total 5$/m);
      while (held.length < 20) await new Promise((r) => setImmediate(r));
      for (const go of held) go();
      for (const a of await Promise.all(admitted)) {
        expect(a.level).toBe('L0');
        expect(a.response.memories_included).toBe(1);
      }
      expect(await metrics.registry.metrics()).toMatch(/^ibex_context_admission_in_flight 0$/m);
    } finally {
      metrics.stop();
    }
  });
});
