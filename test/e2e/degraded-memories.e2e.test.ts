/**
 * Degrade in steps (contract.md §10) over gRPC loopback: the real pipeline on the fault-injecting pool
 * worker, whose task sleeps past D. The CPU stage is lost for time (`pool_deadline`), and the main
 * thread's answer keeps the memories that fit, escaped, within the budget: L1, not L2. A CPU stage that
 * failed stays L2 without memories.
 */
import { randomUUID } from 'node:crypto';
import { status } from '@grpc/grpc-js';
import { describe, expect, it } from 'vitest';
import { calculateBudget } from '../../src/budget/budget-calculator.js';
import { CapabilityCatalog } from '../../src/budget/catalog.js';
import type { MemoryRow } from '../../src/retrieval/store-rows.js';
import { estimateTokens } from '../../src/text/estimate.js';
import { faultedRequest, moved, scrape } from '../faults/helpers.js';
import { poolFaultSuite } from '../helpers/pool-fault-suite.js';
import { tenant } from './harness.js';

const N = 4;
const DEGRADED = 'ibex_context_degraded_total';

/** Memories with markup, so that what the main thread formats is visibly escaped. */
function markupMemories(org: string, agent: string): MemoryRow[] {
  return Array.from({ length: N }, (_, i) => ({
    id: randomUUID(),
    org_id: org,
    agent_id: agent,
    content: `Sailing knot ${i}: <bowline> & "clove hitch" on the lake.`,
    category: ['factual', 'preference', 'episodic', 'procedural'][i]!,
    confidence: 0.9,
    created_at: Date.UTC(2025, 0, 1) + i * 60_000,
  }));
}

describe('degraded answer with memories over gRPC (CPU stage lost for time)', () => {
  const t = tenant();
  const suite = poolFaultSuite(
    'ibex-degraded-memories-',
    (store) => store.upsertMemories(markupMemories(t.org, t.agent)),
    { threads: 2, queue: 3 },
    {
      // D is the server's own: the degraded answer at D is not raced by a client-side deadline. 2 s for a
      // loaded machine (test/telemetry/metrics.test.ts: a late pool miss and a slow degraded answer).
      IBEX_CONTEXT_TIMEOUT: '2000',
    },
  );

  it('answers L1 pool_deadline with included memories, escaped, within the budget', async () => {
    const before = await scrape(suite.svc.adminUrl);
    const r = await suite.svc.client.assemble(faultedRequest(t, 'sleep:2600', 'Which knots do I know?'));
    expect(r.status.code, r.status.details).toBe(status.OK);
    const res = r.response!;
    expect(res.degradation.level).toBe('L1');
    expect(res.degradation.reasons).toEqual(['pool_deadline']);
    expect(res.degradation.branches.map((b) => b.status)).toEqual(['success', 'success', 'success']);
    expect(res.metrics.total_ms).toBeLessThanOrEqual(2000);

    const included = res.memories_used.filter((m) => m.exclusion === 'included');
    expect(included.length).toBeGreaterThanOrEqual(1);
    expect(res.memories_included).toBe(included.length);
    expect(included.every((m) => m.token_estimate > 0)).toBe(true);
    expect(res.memory_tokens).toBe(included.reduce((s, m) => s + m.token_estimate, 0));
    // Every candidate has its row; those not included say why (budget, or failed: not read).
    expect(res.memories_used).toHaveLength(N);

    const context = res.assembled_context;
    expect(context).toContain('user: Which knots do I know?');
    expect(context).toContain('&lt;bowline&gt; &amp; "clove hitch"');
    expect(context).not.toContain('<bowline>');
    const stored = new Map(markupMemories(t.org, t.agent).map((m) => [m.category, m.content]));
    for (const m of included) {
      expect(context).toContain(`id="${m.memory_id}" category="${m.category}">`);
      expect(stored.has(m.category)).toBe(true);
    }
    expect(context.split('</ibex_memory>').length - 1).toBe(included.length);

    // The budget invariant (contract.md §6): tokens_used is the estimate of the context, within the window
    // less the response reserve and the safety buffer.
    const resolved = CapabilityCatalog.load(suite.svc.settings.catalogFile).resolve('gpt-4o');
    const kind = resolved.policy.estimate_kind;
    expect(res.tokens_used).toBe(estimateTokens(context, kind));
    const budget = calculateBudget({
      model: resolved,
      directive: null,
      recentMessages: [],
      toolSchemas: [],
      nonceBytes: suite.svc.settings.nonceBytes,
    });
    expect(res.tokens_used).toBeLessThanOrEqual(
      budget.context_window - budget.response_reserve - budget.safety_buffer,
    );

    const after = await scrape(suite.svc.adminUrl);
    expect(moved(before, after, DEGRADED, { level: 'L1', reason: 'pool_deadline' })).toBe(1);
    expect(moved(before, after, DEGRADED, { level: 'L2', reason: 'pool_deadline' })).toBe(0);
  });

  it('a failed CPU stage stays L2 pool_failed without memories', async () => {
    const r = await suite.svc.client.assemble(faultedRequest(t, 'throw', 'Which knots do I know?'));
    expect(r.status.code, r.status.details).toBe(status.OK);
    const res = r.response!;
    expect(res.degradation.level).toBe('L2');
    expect(res.degradation.reasons).toEqual(['pool_failed']);
    expect(res.memories_included).toBe(0);
    expect(res.memories_used.every((m) => m.exclusion === 'failed' && m.token_estimate === 0)).toBe(true);
    expect(res.assembled_context).not.toContain('bowline');
  });
});
