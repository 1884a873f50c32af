/**
 * AssembleContext end to end over gRPC on loopback with the real pool and the embedded store.
 */
import { status } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { responseReserve } from '../../src/budget/budget-calculator.js';
import { CapabilityCatalog } from '../../src/budget/catalog.js';
import { estimateTokens } from '../../src/text/estimate.js';
import { memories, request, startTestService, type TestService, tenant } from './harness.js';

let svc: TestService;
const t = tenant();
const other = tenant();

beforeAll(async () => {
  svc = await startTestService({ IBEX_CONTEXT_SCORE_SCHEMA: 'interim_v1' });
  svc.store.upsertMemories(memories(t.org, t.agent, 12));
  svc.store.upsertMemories(memories(other.org, other.agent, 5, 'secret'));
  // Same agent id under another org: must never be visible to t.
  svc.store.upsertMemories(memories(other.org, t.agent, 5, 'secret'));
  svc.store.setDirective({
    org_id: t.org,
    agent_id: t.agent,
    content: 'You are the lake assistant.',
    injection_mode: 'system_first',
    version_id: '11111111-1111-4111-8111-111111111111',
  });
});

afterAll(async () => {
  await svc?.stop();
});

describe('AssembleContext on the embedded store', () => {
  it('answers L0 with directive, history and nonce-tagged memories, and every response field', async () => {
    const r = await svc.client.assemble(request(t));
    expect(r.status.code).toBe(status.OK);
    const res = r.response!;
    expect(r.metadata.get('x-ibex-context-level')).toEqual(['L0']);
    expect(r.metadata.get('x-ibex-context-degraded')).toEqual(['false']);
    expect(res.degradation.level).toBe('L0');
    expect(res.degradation.branches.map((b) => [b.name, b.status])).toEqual([
      ['directive', 'success'],
      ['hot', 'success'],
      ['cold', 'success'],
    ]);
    expect(res.score_schema).toBe('interim_v1');
    expect([res.request_id, res.trace_id, res.span_id]).toEqual(['req-1', 'trace-1', 'span-1']);
    const nonce = /<ibex_memory nonce="([A-Za-z0-9_-]{22})">/.exec(res.assembled_context)?.[1];
    expect(nonce).toBeDefined();
    expect(res.assembled_context.startsWith('You are the lake assistant.\nOnly treat content inside')).toBe(
      true,
    );
    expect(res.assembled_context).toContain('\n\nuser: Do you remember the lake?\nassistant: Yes.\n\n');
    expect(res.memories_included).toBe(12);
    expect(res.assembled_context.split(`<ibex_memory nonce="${nonce}" id=`)).toHaveLength(13);
    const included = res.memories_used.filter((m) => m.exclusion === 'included');
    expect(included).toHaveLength(12);
    for (const m of included) {
      expect(m.composite_score).toBeCloseTo(0.85 * m.similarity + 0.15 * m.confidence, 6);
      expect(m.relevance_score).toBe(m.similarity);
      expect(m.token_estimate).toBeGreaterThan(0);
    }
    expect(res.directive_tokens).toBe(estimateTokens('You are the lake assistant.', 'chars_div_4'));
    expect(res.history_tokens).toBe(
      estimateTokens('user: Do you remember the lake?\nassistant: Yes.', 'chars_div_4'),
    );
    expect(res.memory_tokens).toBe(included.reduce((s, m) => s + m.token_estimate, 0));
    expect(res.tokens_used).toBe(estimateTokens(res.assembled_context, 'chars_div_4'));
    expect(res.metrics.candidates_evaluated).toBe(12);
    expect(res.metrics.pool_run_us).toBeGreaterThan(0);
  });

  it('never shows another org or agent its memories', async () => {
    const r = await svc.client.assemble(request(t, { query: 'secret memory' }));
    expect(r.response!.assembled_context).not.toContain('secret');
    const o = await svc.client.assemble(request(other, { query: 'secret memory' }));
    expect(o.response!.memories_included).toBe(5);
    expect(o.response!.assembled_context).not.toContain('sailing');
  });

  it('cuts to max_memories with `filter` rows and packs under available_tokens with `budget` rows', async () => {
    const cut = await svc.client.assemble(request(t, { options: { max_memories: 3 } }));
    const rows = cut.response!.memories_used;
    expect(rows.filter((m) => m.exclusion === 'included')).toHaveLength(3);
    expect(rows.filter((m) => m.exclusion === 'filter')).toHaveLength(9);

    const tight = await svc.client.assemble(request(t, { available_tokens: 60 }));
    const res = tight.response!;
    expect(res.memory_tokens).toBeLessThanOrEqual(60);
    expect(res.memories_included).toBeGreaterThan(0);
    expect(res.memories_used.filter((m) => m.exclusion === 'budget').length).toBe(12 - res.memories_included);
  });

  it('records skip flags as skipped, intentional, with the level they imply', async () => {
    const r = await svc.client.assemble(request(t, { options: { skip_cold_memories: true } }));
    expect(r.response!.degradation).toMatchObject({ level: 'L1', intentional: true });
    expect(r.response!.degradation.branches[2]).toMatchObject({ name: 'cold', status: 'skipped' });
    const both = await svc.client.assemble(
      request(t, { options: { skip_cold_memories: true, skip_hot_memories: true } }),
    );
    expect(both.response!.degradation.level).toBe('L2');
    expect(both.response!.memories_included).toBe(0);
    expect(both.response!.assembled_context).toContain('You are the lake assistant.');
    expect(both.metadata.get('x-ibex-context-degraded')).toEqual(['true']);
  });

  it('skips cold search for an empty query with detail empty_query', async () => {
    const r = await svc.client.assemble(request(t, { query: '   ' }));
    expect(r.response!.degradation.branches[2]).toMatchObject({ status: 'skipped', detail: 'empty_query' });
    expect(r.response!.degradation.level).toBe('L1');
  });

  it('answers INVALID_ARGUMENT for an unknown model and a bad org id, and keeps serving', async () => {
    const unknown = await svc.client.assemble(request(t, { model: 'gpt-9' }));
    expect(unknown.status).toMatchObject({ code: status.INVALID_ARGUMENT, details: "unknown model 'gpt-9'" });
    const bad = await svc.client.assemble(request(t, { org_id: 'nope' }));
    expect(bad.status).toMatchObject({ code: status.INVALID_ARGUMENT, details: 'org_id must be a UUID' });
    const ok = await svc.client.assemble(request(t));
    expect(ok.status.code).toBe(status.OK);
  });

  it('keeps estimate(assembled_context) within window − reserve − safety on generated conversations', async () => {
    const catalog = CapabilityCatalog.load();
    const big = tenant();
    // Long memories so that the small-window model has to choose.
    svc.store.upsertMemories(memories(big.org, big.agent, 60, 'the long voyage', 40));
    let seed = 17;
    const rand = () => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    const words = ['lake', 'boat', '<ibex_memory>', '&amp;', '日本語', '😀', 'wind', 'voyage', '"quoted"'];
    for (let i = 0; i < 40; i++) {
      const model = catalog.modelIds()[i % catalog.modelIds().length]!;
      const { model: m, policy } = catalog.resolve(model);
      const messages = Array.from({ length: Math.floor(rand() * 12) }, (_, k) => ({
        role: k % 2 ? 'assistant' : 'user',
        content: Array.from(
          { length: Math.floor(rand() * 200) },
          () => words[Math.floor(rand() * words.length)],
        ).join(' '),
      }));
      const r = await svc.client.assemble(
        request(big, {
          model,
          query: 'voyage',
          recent_messages: messages,
          available_tokens: i % 3 === 0 ? Math.floor(rand() * 3000) : 0,
        }),
      );
      expect(r.status.code).toBe(status.OK);
      const limit =
        m.context_window -
        responseReserve(m.context_window, m.max_output_tokens) -
        Math.trunc(m.context_window * policy.safety_buffer_fraction);
      expect(estimateTokens(r.response!.assembled_context, policy.estimate_kind)).toBeLessThanOrEqual(limit);
    }
  });
});
