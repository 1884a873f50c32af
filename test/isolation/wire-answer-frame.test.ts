/**
 * Issue 9 (isolation): a large context leaves the CPU stage as a prebuilt gRPC frame that the main thread
 * only completes (src/format/answer-frame.ts) and grpc-js sends as it is (src/server/grpc-internals.ts).
 * The frame's message must be byte-identical to today's spliced serializer, decode to every field of the
 * response, and fall back to the spliced path when the rest does not fit its headroom.
 */
import { randomUUID } from 'node:crypto';
import { status } from '@grpc/grpc-js';
import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { CapabilityCatalog } from '../../src/budget/catalog.js';
import { estimateTokens } from '../../src/budget/estimate.js';
import {
  buildAnswerFrame,
  FRAME_FROM_BYTES,
  fieldOneHeaderBytes,
  finishAnswerFrame,
  GRPC_PREFIX_BYTES,
} from '../../src/format/answer-frame.js';
import { SplicedBuilder } from '../../src/format/spliced.js';
import { encodeCandidates, runCpuTask } from '../../src/pool/cpu-task.js';
import { prebuiltFramesSent } from '../../src/server/grpc-internals.js';
import {
  ASSEMBLED_FRAME,
  ASSEMBLED_UTF8,
  type AssembleContextResponse,
  contextServiceDefinition,
  prebuiltAnswerFrame,
  serializeAssembleResponseBuffer,
} from '../../src/server/proto.js';
import { encodeHistory } from '../../src/server/wire-request.js';
import { monotonicNow } from '../../src/util/clock.js';
import { memories, request, tenant, useTestService } from '../e2e/harness.js';
import { stubResponse, usedRow } from '../helpers/stub-response.js';

const decode = (b: Buffer) =>
  contextServiceDefinition.AssembleContext!.responseDeserialize(b) as AssembleContextResponse;

const word = fc.string({ unit: 'grapheme', maxLength: 40 });

/** A response with every field set from the generators, and its context as a string. */
const responses = fc.record({
  rows: fc.array(
    fc.record({ id: fc.uuid(), category: word, score: fc.float({ noNaN: true }), tokens: fc.nat(5000) }),
    { maxLength: 30 },
  ),
  ints: fc.array(fc.nat(2 ** 31 - 1), { minLength: 7, maxLength: 7 }),
  ids: fc.array(word, { minLength: 3, maxLength: 3 }),
  reasons: fc.array(word, { maxLength: 4 }),
  level: fc.constantFrom('L0', 'L1', 'L2'),
  /** Text the producer wrote, then `pad` bytes of a source span (the history). */
  text: fc.string({ unit: 'grapheme', maxLength: 300 }),
  pad: fc.integer({ min: 1, max: 3 * FRAME_FROM_BYTES }),
  headroom: fc.oneof(fc.nat(64), fc.integer({ min: 64, max: 20_000 })),
});

describe('prebuilt answer frames (issue 9)', () => {
  it('the frame holds the spliced serializer’s bytes; decoded, every field equals the response', () => {
    fc.assert(
      fc.property(responses, (g) => {
        const [a, b, c, d, e, f, h] = g.ints as [number, number, number, number, number, number, number];
        const base = stubResponse(
          { requestId: g.ids[0]!, traceId: g.ids[1]!, spanId: g.ids[2]! },
          {
            tokens_used: a,
            memories_included: b,
            directive_tokens: c,
            history_tokens: d,
            memory_tokens: e,
            memories_used: g.rows.map((r) =>
              usedRow({
                memory_id: r.id,
                category: r.category,
                composite_score: r.score,
                token_estimate: r.tokens,
              }),
            ),
            metrics: { ...stubResponse().metrics, total_ms: f, pool_run_us: h },
            degradation: {
              level: g.level as 'L0',
              intentional: g.pad % 2 === 0,
              reasons: g.reasons,
              branches: [],
            },
          },
        );
        const source = Buffer.from(`head${'绿'.repeat(Math.ceil(g.pad / 3))}`, 'utf8');
        const spliced = new SplicedBuilder(source);
        spliced.text(g.text);
        spliced.bytes(4, source.length);
        const text = spliced.finish();
        const context = g.text + '绿'.repeat(Math.ceil(g.pad / 3));

        const today = serializeAssembleResponseBuffer({ ...base, [ASSEMBLED_UTF8]: text });
        const framed: AssembleContextResponse = {
          ...base,
          [ASSEMBLED_FRAME]: buildAnswerFrame(text, g.headroom),
        };
        // The spliced serializer reads a framed response's context from the frame.
        expect(serializeAssembleResponseBuffer(framed).equals(today)).toBe(true);

        const frame = prebuiltAnswerFrame(framed);
        const restBytes = today.length - fieldOneHeaderBytes(text.byteLength) - text.byteLength;
        expect(frame === null).toBe(restBytes + GRPC_PREFIX_BYTES > Math.max(GRPC_PREFIX_BYTES, g.headroom));
        if (frame === null) {
          // Did not fit: the response now goes the spliced way, with the same bytes.
          expect(framed[ASSEMBLED_FRAME]).toBeUndefined();
          expect(serializeAssembleResponseBuffer(framed).equals(today)).toBe(true);
          return;
        }
        expect(frame[0]).toBe(0);
        expect(frame.readUInt32BE(1)).toBe(frame.length - GRPC_PREFIX_BYTES);
        const message = frame.subarray(GRPC_PREFIX_BYTES);
        expect(message.equals(today)).toBe(true);
        const out = decode(message);
        expect(out).toEqual(decode(serializeAssembleResponseBuffer({ ...base, assembled_context: context })));
        expect(out.assembled_context).toBe(context);
        expect(out.request_id).toBe(g.ids[0]);
        expect(out.trace_id).toBe(g.ids[1]);
        expect(out.span_id).toBe(g.ids[2]);
        expect(out.tokens_used).toBe(a);
        expect(out.memories_used.map((r) => r.memory_id)).toEqual(g.rows.map((r) => r.id));
        expect(out.degradation?.reasons).toEqual(g.reasons);
        expect(out.metrics?.pool_run_us).toBe(h);
      }),
      { numRuns: 60 },
    );
  });

  it('finishAnswerFrame refuses a rest one byte larger than the headroom allows, and takes exactly that much', () => {
    const spliced = new SplicedBuilder(new Uint8Array(0));
    spliced.text('ctx');
    const text = spliced.finish();
    const fits = buildAnswerFrame(text, 105);
    const frame = finishAnswerFrame(fits, new Uint8Array(100).fill(7));
    expect(frame).not.toBeNull();
    expect([...frame!]).toEqual([0, 0, 0, 0, 105, ...new Array(100).fill(7), 0x0a, 3, 0x63, 0x74, 0x78]);
    expect(finishAnswerFrame(buildAnswerFrame(text, 105), new Uint8Array(101))).toBeNull();
  });

  it('any other value goes through grpc-js untouched', () => {
    expect(prebuiltAnswerFrame(null)).toBeNull();
    expect(prebuiltAnswerFrame(Buffer.alloc(3))).toBeNull();
    expect(prebuiltAnswerFrame(stubResponse())).toBeNull();
  });
});

describe('the CPU task frames large contexts only when the copy fits its deadline (issue 9)', () => {
  const resolved = CapabilityCatalog.load(undefined).resolve('gpt-4o');
  const task = (deadline: number) =>
    encodeCandidates(
      [],
      {
        budget: 0,
        dpCellCeiling: 437_570,
        maxConsecutiveSkips: 5,
        nonce: 'n0nce',
        directive: 'Be brief.',
        recentMessages: [],
        toolSchemas: [],
        deadline,
        budgetModel: resolved,
        nonceBytes: 16,
      },
      {
        ...encodeHistory([
          { role: 'user', content: '绿'.repeat(30_000) },
          { role: 'assistant', content: 'ok' },
        ]),
        contentPending: false,
      },
    );

  it('far deadline: a frame whose context is the spliced text, and its copy time reported apart', () => {
    const out = runCpuTask(task(monotonicNow() + 60_000));
    expect(out.assembled_utf8).toBeNull();
    const frame = out.assembled_frame!;
    expect(frame.contextBytes).toBeGreaterThanOrEqual(FRAME_FROM_BYTES);
    const text = Buffer.from(frame.buffer.subarray(frame.contextAt)).toString('utf8');
    expect(text).toContain(`user: ${'绿'.repeat(30_000)}\nassistant: ok`);
    expect(out.frame_us).toBeGreaterThan(0);
    expect(out.frame_us).toBeLessThanOrEqual(out.format_us);
  });

  it('a deadline already passed: no frame, the spliced text as before (the main thread copies it once)', () => {
    const out = runCpuTask(task(monotonicNow() - 1));
    expect(out.assembled_frame).toBeNull();
    expect(out.assembled_utf8!.byteLength).toBeGreaterThanOrEqual(FRAME_FROM_BYTES);
    expect(out.frame_us).toBe(0);
  });
});

describe('prebuilt answer frames over gRPC on loopback (issue 9)', () => {
  const svc = useTestService();
  const who = tenant();
  beforeAll(() => {
    svc().store.upsertMemories(memories(who.org, who.agent, 6));
  });

  it('a 480 KB CJK history is answered through a prebuilt frame with every line and exact tokens_used', async () => {
    const recent = Array.from({ length: 20 }, (_, i) => ({
      role: 'user',
      content: `${i}:${'绿'.repeat(8000)}`,
    }));
    const before = prebuiltFramesSent();
    const out = await svc().client.assemble(request(who, { recent_messages: recent }), {
      deadlineMs: 15_000,
    });
    expect(out.status.code).toBe(status.OK);
    expect(prebuiltFramesSent()).toBe(before + 1);
    const res = out.response!;
    const lines = res.assembled_context.split('\n').filter((l) => l.startsWith('user: '));
    expect(lines).toEqual(recent.map((m) => `user: ${m.content}`));
    expect(res.tokens_used).toBe(estimateTokens(res.assembled_context, 'chars_div_4'));
    expect(res.history_tokens).toBe(
      Math.ceil(recent.reduce((n, m) => n + 6 + [...m.content].length, 19) / 4),
    );
    expect(res.memories_used.length).toBeGreaterThan(0);
    expect(res.degradation?.level).toBe('L0');
  });

  it('a small answer keeps the spliced path', async () => {
    const before = prebuiltFramesSent();
    const out = await svc().client.assemble(request(who), { deadlineMs: 15_000 });
    expect(out.status.code).toBe(status.OK);
    expect(out.response!.assembled_context.length).toBeGreaterThan(0);
    expect(prebuiltFramesSent()).toBe(before);
  });

  it('request ids of different calls never leak between frames', async () => {
    const big = [{ role: 'user', content: '绿'.repeat(30_000) }];
    const ids = [randomUUID(), randomUUID(), randomUUID()];
    const outs = await Promise.all(
      ids.map((id) =>
        svc().client.assemble(request(who, { recent_messages: big, request_id: id }), { deadlineMs: 15_000 }),
      ),
    );
    expect(outs.map((o) => o.status.code)).toEqual([status.OK, status.OK, status.OK]);
    expect(outs.map((o) => o.response!.request_id)).toEqual(ids);
  });
});
