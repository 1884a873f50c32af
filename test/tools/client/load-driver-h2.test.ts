/**
 * The raw HTTP/2 side of `ibex-context load` against a real gRPC server on 127.0.0.1 whose
 * pipeline is a test double (test/client/fake-context-server.ts): the response-byte walker, the budget
 * mix (probe, seeded twins, counts of constrained calls and packer choices), `--verify`, and the grpc-js
 * transport counting the same.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { ValidatedRequest } from '../../../src/request/validate.js';
import {
  agentKey,
  budgetMix,
  FIT_HIGH,
  FIT_LOW,
  mixedSource,
  probeCandidateTokens,
} from '../../../src/tools/client/budget-mix.js';
import { ASSEMBLE_METHOD } from '../../../src/tools/client/context-client.js';
import { summarizeResponse } from '../../../src/tools/client/grpc-frames.js';
import { runLoad } from '../../../src/tools/client/load-driver.js';
import { formatLoadReport } from '../../../src/tools/client/load-report.js';
import { cyclingSource } from '../../../src/tools/client/request-source.js';
import { openLoop } from '../../helpers/open-loop.js';
import { AGENTS, answer, requests, startFake } from './fake-context-server.js';

describe('summarizeResponse', () => {
  it('reads memory_tokens, candidates, budget exclusions and level exactly as protobuf wrote them', () => {
    const exclusion = fc.constantFrom('included', 'budget', 'filter', 'truncated', 'budgets', '');
    fc.assert(
      fc.property(
        fc.array(fc.record({ exclusion, tokens: fc.nat(5000) }), { maxLength: 40 }),
        fc.nat(100_000),
        fc.constantFrom('L0', 'L1', 'L2', ''),
        fc.string(),
        fc.option(fc.nat(60_000)),
        (rows, memoryTokens, level, text, totalMs) => {
          const res = answer(
            { agentId: AGENTS[0], availableTokens: 0, query: text } as unknown as ValidatedRequest,
            'L0',
          ).response;
          res.memories_used = rows.map((r, i) => ({
            ...res.memories_used[0]!,
            memory_id: `budget${i}`,
            // Wire strings, including ones the server never sends ('budgets', ''): the walker must not
            // mistake them for `budget`.
            exclusion: r.exclusion as never,
            token_estimate: r.tokens,
          }));
          res.memory_tokens = memoryTokens;
          res.metrics = (totalMs === null ? null : { ...res.metrics!, total_ms: totalMs }) as never;
          res.degradation = (
            level === '' ? null : { level, intentional: false, reasons: ['budget'], branches: [] }
          ) as never;
          const bytes = ASSEMBLE_METHOD.responseSerialize(res) as Buffer;
          expect(summarizeResponse(bytes)).toEqual({
            memoryTokens,
            candidateTokens: rows.reduce((s, r) => s + r.tokens, 0),
            candidates: rows.length,
            budgetExcluded: rows.filter((r) => r.exclusion === 'budget').length,
            level,
            totalMs,
          });
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe('the latency split at the service clock', () => {
  it("splits each OK answer's latency into the service's total_ms and the rest, and prints both", async () => {
    const fake = await startFake({ serviceMs: 20 });
    const report = await openLoop(fake.addr, 2, 50, 1, { source: cyclingSource('split', requests(8)) });
    expect(report.requests.ok).toBe(50);
    expect(report.split_ms.answers).toBe(50);
    expect(report.split_ms.service).toEqual({ p50: 20, p99: 20 });
    // Per call, outside = done − sent − 20 ≤ done − intended − 20 = latency − 20, so also at the p50
    // (HdrHistogram buckets: 3 significant digits).
    // A gRPC round trip over loopback takes well over 50 µs outside any handler.
    expect(report.split_ms.outside.p50).toBeGreaterThan(0.05);
    expect(report.split_ms.outside.p50).toBeLessThanOrEqual(report.latency_ms.p50 - 20 + 0.05);
    expect(report.split_ms.outside.p99).toBeGreaterThanOrEqual(report.split_ms.outside.p50);
    expect(report.split_ms.outside.p99).toBeLessThanOrEqual(report.latency_ms.p99 - 20 + 0.05);
    expect(formatLoadReport(report)).toContain(
      `the service's own total_ms p50 20 ms p99 20 ms; outside it (transport, receive, driver) p50 ${report.split_ms.outside.p50} ms`,
    );
  });
});

describe('the budget mix against a real server', () => {
  it('probes candidates per agent, constrains the seeded share to 30–80 % of them, and counts packer choices exactly', async () => {
    const fake = await startFake({ l1Every: 7 });
    const list = requests(64);
    const tokens = await probeCandidateTokens({ addr: fake.addr }, list);
    expect(Object.fromEntries(tokens)).toEqual({
      [agentKey(list[0]!)]: 400,
      [agentKey(list[1]!)]: 1000,
    });
    expect(fake.tally.calls).toBe(6); // 3 probes per agent
    const probeCalls = fake.tally.calls;
    const source = mixedSource(cyclingSource('mix', list), budgetMix(tokens, { share: 0.5, seed: 7 }), 0.5);
    const report = await runLoad({ addr: fake.addr, connections: 2, rate: 200, durationS: 1.5, source });
    expect(report.requests.sent).toBe(300);
    expect(report.requests.ok).toBe(300);
    expect(fake.tally.calls - probeCalls).toBe(300);
    expect(report.packing.constrained_sent).toBe(fake.tally.constrained);
    expect(report.packing.constrained_share).toBeGreaterThan(0.38);
    expect(report.packing.constrained_share).toBeLessThan(0.62);
    // Any fit in [0.3, 0.8) of 4 equal candidates excludes at least one of them.
    expect(report.packing.budget_choice).toBe(fake.tally.constrained);
    expect(report.packing.budget_choice).toBe(fake.tally.budgetAnswers);
    expect(report.packing.unreadable).toBe(0);
    expect(report.requests.levels.L1).toBeGreaterThan(0);
    for (const a of fake.tally.available) {
      const all = a.agent === AGENTS[0] ? 400 : 1000;
      expect(a.tokens).toBeGreaterThanOrEqual(Math.floor(all * FIT_LOW));
      expect(a.tokens).toBeLessThan(all * FIT_HIGH);
    }
  });

  it('the same seed draws the same twins; no candidates at all is an error, not a silent 0 % mix', () => {
    const list = requests(10);
    const tokens = new Map([[agentKey(list[0]!), 400]]);
    const draw = () => {
      const mix = budgetMix(tokens, { share: 1, seed: 3 });
      return list.map((r) => mix.apply(r).available_tokens);
    };
    expect(draw()).toEqual(draw());
    expect(() => budgetMix(new Map(), { share: 0.5 })).toThrow(/no agent has candidates/);
    expect(() => budgetMix(tokens, { share: 1.5 })).toThrow(RangeError);
  });
});

describe('transports and --verify', () => {
  it('h2 and grpc-js transports count levels and packer choices the same against the same server', async () => {
    const fake = await startFake({ l1Every: 5 });
    const list = requests(20).map((r, i) => (i % 2 === 0 ? { ...r, available_tokens: 150 } : r));
    for (const transport of ['h2', 'grpc-js'] as const) {
      const before = fake.tally.calls;
      const report = await openLoop(fake.addr, 2, 100, 1, {
        transport,
        verify: true,
        source: cyclingSource('t', list),
      });
      expect(report.transport).toBe(transport);
      expect(report.requests.ok).toBe(100);
      expect(report.requests.levels.L1).toBe(Math.floor(fake.tally.calls / 5) - Math.floor(before / 5));
      expect(report.packing.constrained_sent).toBe(50);
      expect(report.packing.budget_choice).toBe(50);
      expect(report.packing.unreadable).toBe(0);
    }
  });

  it('--verify flags answers whose body level disagrees with the level header', async () => {
    const fake = await startFake({ lieEvery: 4 });
    const source = cyclingSource('v', requests(8));
    const plain = await runLoad({ addr: fake.addr, connections: 1, rate: 100, durationS: 0.4, source });
    expect(plain.requests.ok).toBe(40);
    expect(plain.packing.unreadable).toBe(0);
    const verified = await openLoop(fake.addr, 1, 100, 0.4, { source, verify: true });
    expect(verified.requests.ok).toBe(40);
    expect(verified.packing.unreadable).toBe(10);
    expect(verified.warnings.some((w) => w.includes('failed --verify'))).toBe(true);
  });
});
