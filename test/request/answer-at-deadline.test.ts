/**
 * The answer at D (contract.md §10): a call still unanswered when its deadline timer fires, because the
 * machine did not run the event loop in time, is answered with what is at hand (directive when read,
 * history, no memories, L2 reason `deadline`) instead of DEADLINE_EXCEEDED; calls given under 10 ms and
 * large histories are not.
 */

import { Metadata } from '@grpc/grpc-js';
import { describe, expect, it } from 'vitest';
import { loadSettings } from '../../src/config/settings.js';
import type { CpuTaskInput } from '../../src/cpu-stage/cpu-task.js';
import type { CpuPool, CpuStageResult } from '../../src/pool/pool-client.js';
import type { AssembleFn } from '../../src/request/assemble-fn.js';
import { type CallContext, monotonicNow } from '../../src/request/call-context.js';
import { validateAssembleRequest } from '../../src/request/validate.js';
import type { RetrievalSources } from '../../src/retrieval/retrieve.js';
import { createMetrics } from '../../src/telemetry/metrics.js';
import { ASSEMBLED_UTF8 } from '../../src/wire/proto.js';
import { splicedText } from '../../src/wire/spliced.js';
import { catalogAssembler } from '../helpers/assembler.js';
import { memoryHit } from '../helpers/memory-hit.js';

const ORG = '0b8f8c1e-6a5e-4c3b-9d7e-1f2a3b4c5d6e';
const AGENT = 'a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d';

const hit = (content: string, i: number) =>
  memoryHit(content, i, { org: ORG, agent: AGENT, confidence: 0.9, similarity: 0.8, source: 'vector' });

/** An assembler whose memory branches answer when `memoriesAnswer` says and whose CPU stage never returns. */
function setup({ memoriesAnswer }: { memoriesAnswer: boolean }) {
  const settings = loadSettings({ IBEX_CONTEXT_LOG_LEVEL: 'silent' });
  const metrics = createMetrics();
  const never = (signal: AbortSignal) =>
    new Promise<never>((_, reject) => signal.addEventListener('abort', () => reject(signal.reason)));
  const sources = {
    directive: {
      get: async () => ({ content: 'Be brief.', injection_mode: 'system_first', version_id: 'v1' }),
      close: async () => {},
    },
    memory: {
      hot: async (_o: string, _a: string, s: AbortSignal) =>
        memoriesAnswer ? [hit('memory h1 about tea', 1)] : never(s),
      search: async (_o: string, _a: string, _q: string, s: AbortSignal) =>
        memoriesAnswer ? [hit('memory c1 about tea', 2)] : never(s),
      close: async () => {},
    },
    close: async () => {},
    kind: { memory: 'embedded', directive: 'embedded' },
  } as unknown as RetrievalSources;
  const submitted: CpuTaskInput[] = [];
  const pool = {
    run: (input: CpuTaskInput) => {
      submitted.push(input);
      return new Promise<CpuStageResult>(() => {});
    },
  } as unknown as CpuPool;
  const assemble = catalogAssembler({ settings, sources, pool, metrics });
  return { assemble, submitted, metrics };
}

function call(assemble: AssembleFn, leftMs: number, history: string[] = ['hello there']) {
  const now = monotonicNow();
  const ctx: CallContext = {
    signal: new AbortController().signal,
    deadline: now + leftMs,
    arrival: now,
    metadata: new Metadata(),
    gathered: {},
  };
  const req = validateAssembleRequest({
    org_id: ORG,
    agent_id: AGENT,
    model: 'gpt-4o',
    query: 'tea',
    recent_messages: history.map((content) => ({ role: 'user', content })),
  });
  void assemble(req, ctx).catch(() => {});
  return { req, ctx };
}

const settled = () => new Promise((r) => setTimeout(r, 20));

describe('the answer at D', () => {
  it('keeps the directive read and the history when retrieval ended and the CPU stage did not come back', async () => {
    const { assemble, submitted, metrics } = setup({ memoriesAnswer: true });
    const { req, ctx } = call(assemble, 10_000);
    while (submitted.length === 0) await settled();
    const out = assemble.atDeadline?.(req, ctx);
    expect(out?.level).toBe('L2');
    expect(out?.response.degradation.reasons).toEqual(['deadline']);
    expect(out?.response.memories_included).toBe(0);
    const text = splicedText(out!.response[ASSEMBLED_UTF8]!);
    expect(text).toContain('Be brief.');
    expect(text).toContain('hello there');
    expect(text).not.toContain('memory c1');
    expect(await metrics.registry.metrics()).toMatch(
      /^ibex_context_degraded_total\{level="L2",reason="deadline"\} 1$/m,
    );
  });

  it('keeps the directive read while the memory branches still run, and names those as timed out at the deadline', async () => {
    const { assemble } = setup({ memoriesAnswer: false });
    const { req, ctx } = call(assemble, 10_000);
    await settled();
    const out = assemble.atDeadline?.(req, ctx);
    expect(out?.level).toBe('L2');
    expect(out?.response.degradation.reasons).toEqual([
      'hot_timeout:deadline',
      'cold_timeout:deadline',
      'deadline',
    ]);
    expect(out?.response.degradation.branches[0]).toMatchObject({ name: 'directive', status: 'success' });
    expect(splicedText(out!.response[ASSEMBLED_UTF8]!)).toContain('Be brief.');
    expect(splicedText(out!.response[ASSEMBLED_UTF8]!)).toContain('hello there');
  });

  it('builds none for a call given under 10 ms, or for a history of 256 KiB or more', async () => {
    const { assemble } = setup({ memoriesAnswer: true });
    const short = call(assemble, 9);
    expect(assemble.atDeadline?.(short.req, short.ctx)).toBeNull();
    const large = call(
      assemble,
      10_000,
      Array.from({ length: 9 }, () => 'x'.repeat(30_000)),
    );
    expect(assemble.atDeadline?.(large.req, large.ctx)).toBeNull();
  });
});
