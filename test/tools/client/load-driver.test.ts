/**
 * `runLoad` and `ibex-context load` against a real gRPC server on 127.0.0.1 whose pipeline is a test
 * double: the double counts what it did (errors, levels, concurrency), and the report must match it.
 */

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { AssembleResult, GrpcServer } from '../../../src/grpc/grpc-server.js';
import type { CallContext } from '../../../src/request/call-context.js';
import type { ValidatedRequest } from '../../../src/request/validate.js';
import { type LoadReport, runLoad } from '../../../src/tools/client/load-driver.js';
import { driverLimited } from '../../../src/tools/client/load-report.js';
import { locomoSource } from '../../../src/tools/client/locomo-requests.js';
import { cyclingSource } from '../../../src/tools/client/request-source.js';
import { LOCOMO_ORG_ID, locomoAgentId } from '../../../src/tools/locomo/dataset.js';
import { Errors } from '../../../src/wire/errors.js';
import type { DegradationLevel } from '../../../src/wire/proto.js';
import { startAssembleServer } from '../../helpers/assemble-server.js';
import { runCli } from '../../helpers/cli.js';
import { openLoop } from '../../helpers/open-loop.js';
import { stubResponse, ZERO_METRICS } from '../../helpers/stub-response.js';

const ORG = '0b8f8c1e-6a5e-4c3b-9d7e-1f2a3b4c5d6e';
const AGENT = 'a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d';

function answer(req: ValidatedRequest, level: DegradationLevel): AssembleResult {
  const response = stubResponse(req, {
    assembled_context: `user: ${req.query}`,
    tokens_used: 3,
    history_tokens: 3,
    metrics: { ...ZERO_METRICS, total_ms: 1 },
    degradation: { level, intentional: false, reasons: [], branches: [] },
  });
  return { response, level };
}

/** What the double did, call by call (1-based arrival order). */
interface Tally {
  calls: number;
  invalid: number;
  l0: number;
  l1: number;
  inFlight: number;
  maxInFlight: number;
  authorization: Set<string>;
  agents: Set<string>;
  orgs: Set<string>;
  historyLengths: number[];
}

interface Behaviour {
  /** Every n-th call answers INVALID_ARGUMENT (0 = never). */
  invalidEvery?: number;
  /** Every n-th call (not an error) is L1 (0 = never). */
  l1Every?: number;
  /** Async delay of each answer, ms. */
  delayMs?: number;
  /** The n-th call blocks the whole process (event loop) for `stallMs`: a server stall. */
  stallAt?: number;
  stallMs?: number;
}

interface Fake {
  addr: string;
  tally: Tally;
  grpc: GrpcServer;
}

async function startFake(b: Behaviour = {}): Promise<Fake> {
  const tally: Tally = {
    calls: 0,
    invalid: 0,
    l0: 0,
    l1: 0,
    inFlight: 0,
    maxInFlight: 0,
    authorization: new Set(),
    agents: new Set(),
    orgs: new Set(),
    historyLengths: [],
  };
  const assemble = async (req: ValidatedRequest, ctx: CallContext): Promise<AssembleResult> => {
    const n = ++tally.calls;
    tally.inFlight++;
    tally.maxInFlight = Math.max(tally.maxInFlight, tally.inFlight);
    for (const v of ctx.metadata.get('authorization')) tally.authorization.add(String(v));
    tally.agents.add(req.agentId);
    tally.orgs.add(req.orgId);
    tally.historyLengths.push(req.recentMessages.length);
    try {
      if (b.stallAt === n) {
        const until = performance.now() + (b.stallMs ?? 300);
        while (performance.now() < until) {
          // Busy wait on purpose: a blocked event loop is the stall a closed-loop driver would hide.
        }
      }
      if (b.delayMs) await new Promise((r) => setTimeout(r, b.delayMs));
      if (b.invalidEvery && n % b.invalidEvery === 0) {
        tally.invalid++;
        throw Errors.invalidArgument('query', 'test: every n-th call is invalid');
      }
      if (b.l1Every && n % b.l1Every === 0) {
        tally.l1++;
        return answer(req, 'L1');
      }
      tally.l0++;
      return answer(req, 'L0');
    } finally {
      tally.inFlight--;
    }
  };
  const { addr, grpc } = await startAssembleServer(assemble);
  return { addr, tally, grpc };
}

function expectCountsMatch(report: LoadReport, tally: Tally) {
  expect(report.requests.unfinished).toBe(0);
  expect(report.requests.completed).toBe(report.requests.sent);
  expect(report.requests.sent).toBe(tally.calls);
  expect(report.requests.errors).toEqual(tally.invalid > 0 ? { INVALID_ARGUMENT: tally.invalid } : {});
  expect(report.requests.error_total).toBe(tally.invalid);
  expect(report.requests.ok).toBe(tally.l0 + tally.l1);
  expect(report.requests.levels).toEqual({ L0: tally.l0, L1: tally.l1, L2: 0 });
  expect(report.requests.degraded).toEqual({ L1: tally.l1, L2: 0 });
  expect(report.requests.level_missing).toBe(0);
}

describe('runLoad, open loop', () => {
  it('sends rate × duration requests and counts errors by code and levels exactly as the server answered', async () => {
    const fake = await startFake({ invalidEvery: 10, l1Every: 5 });
    const report = await openLoop(fake.addr, 4, 200, 2, { timeoutMs: 1000 });

    // The schedule is t0 + k/rate for every k with an intended time inside the 2 s window: exactly 400,
    // however late the timer fires.
    expect(report.requests.sent).toBe(400);
    expect(report.open_loop).toBe(true);
    expect(report.rate).toBe(200);
    expect(report.stopped_by).toBe('duration');
    expect(report.duration_s).toBeCloseTo(2, 5);
    expectCountsMatch(report, fake.tally);
    expect(fake.tally.invalid).toBe(40);
    expect(fake.tally.l1).toBe(40);
    expect(report.throughput_rps).toBeGreaterThan(120);
    expect(report.throughput_rps).toBeLessThan(260);
    expect(report.rps.samples).toBe(2);
    expect(report.latency_ms.max).toBeGreaterThanOrEqual(report.latency_ms.p99);
    expect(report.latency_ms.p99).toBeGreaterThanOrEqual(report.latency_ms.p50);
    expect(report.latency_ms.p50).toBeGreaterThan(0);
    expect(report.bytes.total).toBeGreaterThan(0);
    expect(report.requests.late).toBe(0);
  });

  it('measures from the intended send time: a 300 ms stall shows in the tail (coordinated omission)', async () => {
    // The stall blocks the whole process, driver included: nothing can be sent during it, and a driver
    // timing from the actual send would see ~1 ms for the requests it sends late.
    const fake = await startFake({ stallAt: 100, stallMs: 300 });
    const report = await runLoad({ addr: fake.addr, connections: 2, rate: 200, durationS: 2 });
    expect(report.requests.sent).toBe(400);
    expect(report.requests.ok).toBe(400);
    expect(report.latency_ms.p99_9).toBeGreaterThanOrEqual(250);
    // ~60 requests were due during the stall, their latencies spread over 0–300 ms: well above 1 %.
    expect(report.latency_ms.p99).toBeGreaterThanOrEqual(150);
    expect(report.latency_ms.max).toBeGreaterThanOrEqual(280);
    expect(report.schedule_lag_ms.max).toBeGreaterThanOrEqual(250);
    expect(report.warnings.some((w) => w.includes('could not keep its own schedule'))).toBe(true);
    expect(driverLimited(report)).toBe(true);
    // The tail names the stall: one incident holding the ~60 calls due during it (all but those due in
    // its last 20 ms are over the 20 ms threshold), whatever else a loaded machine adds around it.
    const t = report.tail;
    expect(t.threshold_ms).toBe(20);
    expect(t.slow_calls).toBeGreaterThanOrEqual(t.largest!.calls);
    expect(t.largest!.calls).toBeGreaterThanOrEqual(40);
    expect(t.largest!.span_ms).toBeGreaterThanOrEqual(200);
    expect(t.largest!.max_ms).toBeGreaterThanOrEqual(250);
    expect(t.large_incidents).toBeGreaterThanOrEqual(1);
    // The stall blocked the driver too: the tail says so.
    expect(t.largest!.max_send_lag_ms).toBeGreaterThanOrEqual(200);
    expect(t.driver_late_large_incidents).toBeGreaterThanOrEqual(1);
  });

  it('counts calls over tailThresholdMs in the tail, and refuses a threshold that is not positive', async () => {
    const fake = await startFake({ delayMs: 30 });
    const report = await openLoop(fake.addr, 2, 50, 1, { tailThresholdMs: 5 });
    // Every answer takes ≥ 30 ms: all 50 are slow at 5 ms, 20 ms apart, so one incident (gap 50 ms).
    expect(report.tail.threshold_ms).toBe(5);
    expect(report.tail.slow_calls).toBe(50);
    expect(report.tail.slow_share).toBe(1);
    expect(report.tail.incidents).toBe(1);
    expect(report.tail.largest!.max_ms).toBeGreaterThanOrEqual(30);
    await expect(runLoad({ addr: fake.addr, rate: 10, durationS: 1, tailThresholdMs: 0 })).rejects.toThrow(
      /tailThresholdMs must be a positive number/,
    );
  });

  it('does not record warmup traffic and stops at max-requests', async () => {
    const fake = await startFake();
    const report = await runLoad({
      addr: fake.addr,
      connections: 2,
      rate: 100,
      warmupS: 0.5,
      durationS: 20,
      maxRequests: 30,
    });
    expect(report.stopped_by).toBe('max_requests');
    expect(report.requests.sent).toBe(30);
    expect(report.requests.ok).toBe(30);
    // Warmup at 100 req/s for 0.5 s: 50 requests that the server saw but the report does not count.
    expect(report.requests.warmup_sent).toBe(50);
    expect(fake.tally.calls).toBe(80);
    expect(report.duration_s).toBeLessThan(5);
  });

  it('lasts its whole duration at a low rate, and ends early on abort', async () => {
    const fake = await startFake();
    const started = performance.now();
    const slow = await runLoad({ addr: fake.addr, connections: 1, rate: 1, durationS: 1.5 });
    expect(performance.now() - started).toBeGreaterThanOrEqual(1400);
    expect(slow.requests.sent).toBe(2);
    expect(slow.duration_s).toBeCloseTo(1.5, 5);

    const aborted = await openLoop(fake.addr, 1, 100, 30, { signal: AbortSignal.timeout(500) });
    expect(aborted.stopped_by).toBe('signal');
    expect(aborted.duration_s).toBeLessThan(5);
    expect(aborted.requests.sent).toBeGreaterThan(0);
    expect(aborted.requests.ok).toBe(aborted.requests.sent);
  });

  it('sends the bearer token on every call and never puts it in the report', async () => {
    const fake = await startFake();
    const report = await openLoop(fake.addr, 1, 50, 0.5, { token: 's3cr3t' });
    expect(report.requests.ok).toBe(25);
    expect([...fake.tally.authorization]).toEqual(['Bearer s3cr3t']);
    expect(JSON.stringify(report)).not.toContain('s3cr3t');
  });
});

describe('runLoad, closed loop', () => {
  it('keeps connections × pipelining calls in flight', async () => {
    const fake = await startFake({ delayMs: 20 });
    const report = await runLoad({ addr: fake.addr, connections: 2, pipelining: 3, durationS: 1 });
    expect(report.open_loop).toBe(false);
    expect(report.rate).toBeNull();
    expect(report.pipelining).toBe(3);
    expect(fake.tally.maxInFlight).toBe(6);
    expectCountsMatch(report, fake.tally);
    // 6 in flight at ~20 ms each: ~300 req/s at best; a loaded machine gets fewer, never more.
    expect(report.requests.sent).toBeGreaterThan(40);
    expect(report.requests.sent).toBeLessThanOrEqual(330);
    expect(report.latency_ms.p50).toBeGreaterThanOrEqual(19);
  });

  it('stops by itself at max-requests, counting errors by code', async () => {
    const fake = await startFake({ invalidEvery: 4 });
    const report = await runLoad({
      addr: fake.addr,
      connections: 3,
      pipelining: 2,
      durationS: 30,
      maxRequests: 50,
    });
    expect(report.stopped_by).toBe('max_requests');
    expect(report.requests.sent).toBe(50);
    expectCountsMatch(report, fake.tally);
    expect(report.requests.errors).toEqual({ INVALID_ARGUMENT: 12 });
  });

  it('counts DEADLINE_EXCEEDED when the server is slower than the per-call timeout', async () => {
    const fake = await startFake({ delayMs: 200 });
    const report = await runLoad({ addr: fake.addr, connections: 1, durationS: 0.5, timeoutMs: 50 });
    expect(report.requests.ok).toBe(0);
    expect(report.requests.errors['DEADLINE_EXCEEDED (client --timeout)']).toBe(report.requests.sent);
    expect(report.requests.sent).toBeGreaterThanOrEqual(3);
    expect(report.requests.unfinished).toBe(0);
  });
});

describe('runLoad request sources', () => {
  it('sends LoCoMo turns as the ingested org/agent with up to 10 previous turns', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'ibex-locomo-'));
    try {
      const turns = (s: number) =>
        Array.from({ length: 6 }, (_, i) => ({
          speaker: i % 2 === 0 ? 'Ann' : 'Bo',
          dia_id: `D${s}:${i + 1}`,
          text: `session ${s} turn ${i + 1}`,
        }));
      const conv = {
        speaker_a: 'Ann',
        speaker_b: 'Bo',
        session_1_date_time: '1:56 pm on 8 May, 2023',
        session_1: turns(1),
        session_2_date_time: '1:14 pm on 25 May, 2023',
        session_2: turns(2),
        session_3_date_time: '7:55 pm on 9 June, 2023',
        session_3: turns(3),
      };
      writeFileSync(path.join(dir, '7.json'), JSON.stringify(conv));
      const source = await locomoSource(dir);
      expect(source.name).toBe('locomo(1 conversations, 12 turns)');
      const fake = await startFake();
      const report = await runLoad({
        addr: fake.addr,
        connections: 1,
        pipelining: 2,
        durationS: 5,
        maxRequests: 12,
        source,
      });
      expect(report.requests.ok).toBe(12);
      expect([...fake.tally.orgs]).toEqual([LOCOMO_ORG_ID]);
      expect([...fake.tally.agents]).toEqual([locomoAgentId('7')]);
      // Later sessions (2 and 3) of 6 turns: history 6, 7, …, 10, then capped at 10.
      expect(Math.min(...fake.tally.historyLengths)).toBe(6);
      expect(Math.max(...fake.tally.historyLengths)).toBe(10);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('rejects invalid options before connecting', async () => {
    await expect(runLoad({ addr: '127.0.0.1:1', connections: 0 })).rejects.toThrow(/connections/);
    await expect(runLoad({ addr: '127.0.0.1:1', rate: -1 })).rejects.toThrow(/rate/);
    await expect(
      runLoad({
        addr: '127.0.0.1:1',
        source: cyclingSource('x', [{ org_id: ORG, agent_id: AGENT }]),
        connectTimeoutMs: 300,
      }),
    ).rejects.toThrow(/cannot connect to 127\.0\.0\.1:1/);
  });
});

describe('ibex-context load (compiled CLI)', () => {
  it('--json prints one object with the documented shape', async () => {
    const fake = await startFake({ invalidEvery: 10, l1Every: 5 });
    const res = await runCli(
      ['load', '--addr', fake.addr, '-c', '2', '-d', '1', '-R', '50', '--tail-ms', '60000', '--json'],
      '',
      { env: { IBEX_CONTEXT_TOKEN: 'tok-123' } },
    );
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    const lines = res.stdout.trim().split('\n');
    expect(lines).toHaveLength(1);
    const report = JSON.parse(lines[0]!) as LoadReport;
    for (const key of ['p50', 'p97_5', 'p99', 'p99_9', 'avg', 'max'] as const) {
      expect(typeof report.latency_ms[key]).toBe('number');
    }
    expect(report.open_loop).toBe(true);
    expect(typeof report.throughput_rps).toBe('number');
    expect(report.duration_s).toBe(1);
    expect(report.requests.sent).toBe(50);
    expect(report.requests.ok).toBe(45);
    expect(report.requests.errors).toEqual({ INVALID_ARGUMENT: 5 });
    expect(report.requests.degraded).toEqual({ L1: 5, L2: 0 });
    // No call of a 1 s run takes a minute: an empty tail at the threshold given.
    expect(report.tail).toMatchObject({ threshold_ms: 60000, slow_calls: 0, incidents: 0, largest: null });
    expect([...fake.tally.authorization]).toEqual(['Bearer tok-123']);
    expect(res.stdout).not.toContain('tok-123');
  });

  it('prints autocannon-style tables without --json, and no progress line when piped', async () => {
    const fake = await startFake();
    const res = await runCli(['load', '--addr', fake.addr, '-c', '1', '-d', '0.5', '-p', '2']);
    expect(res.code).toBe(0);
    expect(res.stderr).toBe('');
    expect(res.stdout).toContain('closed loop, 2 in flight per connection');
    expect(res.stdout).toMatch(/│ Latency │/);
    expect(res.stdout).toMatch(/│ Req\/Sec +│/);
    expect(res.stdout).toMatch(/errors 0 /);
    // One slow call prints "1 call", any other count "N calls".
    expect(res.stdout).toMatch(/^tail \(> 20 ms\): \d+ calls? \(/m);
  });

  it('exits 2 on a bad flag and 1 when nothing listens', async () => {
    const bad = await runCli(['load', '-c', 'zero']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--connections must be an integer');
    const badTail = await runCli(['load', '--tail-ms', '0']);
    expect(badTail.code).toBe(2);
    expect(badTail.stderr).toContain('--tail-ms');
    const down = await runCli(['load', '--addr', '127.0.0.1:1', '-d', '1', '--connect-timeout', '300']);
    expect(down.code).toBe(1);
    expect(down.stderr).toContain('cannot reach the service at 127.0.0.1:1 (connection refused)');
  });
});
