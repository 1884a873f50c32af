/**
 * A large context goes out as gathered chunks (src/grpc/patches/gathered-send.ts,
 * `sendGatheredMessages`): the rest of the message and field 1's header, then the spliced spans of the
 * CPU stage's bytes and the request's history bytes as they are — no thread copies them into a frame. The
 * chunks must hold exactly the bytes of the spliced serializer, decode to every field of the response,
 * and give a recycled request buffer back only once they are written.
 */
import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
import { status } from '@grpc/grpc-js';
import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import { CapabilityCatalog } from '../../../src/budget/catalog.js';
import { encodeCandidates } from '../../../src/cpu-stage/cpu-batch-encode.js';
import { runCpuTask } from '../../../src/cpu-stage/cpu-task.js';
import { gatheredMessagesSent, sendGatheredMessages } from '../../../src/grpc/patches/gathered-send.js';
import { encodeHistory } from '../../../src/request/wire-request.js';
import { estimateTokens } from '../../../src/text/estimate.js';
import { monotonicNow } from '../../../src/util/clock.js';
import {
  ASSEMBLED_UTF8,
  type AssembleContextResponse,
  contextServiceDefinition,
  GATHER_FROM_BYTES,
  gatheredAnswer,
  SplicedMessage,
  serializeAssembleResponse,
  serializeAssembleResponseBuffer,
} from '../../../src/wire/proto.js';
import { FROM_SOURCE, SplicedBuilder } from '../../../src/wire/spliced.js';
import { memories, request, tenant, useTestService } from '../../e2e/harness.js';
import { stubResponse, usedRow } from '../../helpers/stub-response.js';

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
  /** Text the producer wrote before and after `pad` bytes of a source span (the history). */
  before: fc.string({ unit: 'grapheme', maxLength: 300 }),
  after: fc.string({ unit: 'grapheme', maxLength: 50 }),
  pad: fc.integer({ min: 1, max: 3 * GATHER_FROM_BYTES }),
});

describe('gathered answers', () => {
  it('the chunks hold the spliced serializer’s bytes; decoded, every field equals the response', () => {
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
        const history = '绿'.repeat(Math.ceil(g.pad / 3));
        const source = Buffer.from(`head${history}`, 'utf8');
        const spliced = new SplicedBuilder(source);
        spliced.text(g.before);
        spliced.bytes(4, source.length);
        spliced.text(g.after);
        const text = spliced.finish();
        const context = g.before + history + g.after;
        const response = { ...base, [ASSEMBLED_UTF8]: text };

        const copied = serializeAssembleResponseBuffer(response);
        const message = gatheredAnswer(response, (v) =>
          serializeAssembleResponse(v as AssembleContextResponse),
        );
        expect(message === null).toBe(text.byteLength < GATHER_FROM_BYTES);
        if (message === null) return;
        const chunks = message.chunks();
        const gathered = Buffer.concat(chunks);
        expect(message.byteLength).toBe(gathered.length);
        expect(gathered.equals(copied)).toBe(true);
        // The history span is a view on the request's bytes, not a copy of them.
        expect(chunks.some((k) => k.buffer === source.buffer && k.byteLength === source.length - 4)).toBe(
          true,
        );
        const out = decode(gathered);
        expect(out).toEqual(decode(serializeAssembleResponseBuffer({ ...base, assembled_context: context })));
        expect(out.assembled_context).toBe(context);
        expect(out.request_id).toBe(g.ids[0]);
        expect(out.tokens_used).toBe(a);
        expect(out.memories_used.map((r) => r.memory_id)).toEqual(g.rows.map((r) => r.id));
        expect(out.degradation?.reasons).toEqual(g.reasons);
        expect(out.metrics?.pool_run_us).toBe(h);
      }),
      { numRuns: 60 },
    );
  });

  it('the source goes back to its pool after a successful write only, and once', () => {
    const source = Buffer.from('绿'.repeat(GATHER_FROM_BYTES), 'utf8');
    const spliced = new SplicedBuilder(source);
    spliced.bytes(0, source.length);
    const released: Uint8Array[] = [];
    const release = (s: Uint8Array) => void released.push(s);
    const response = { ...stubResponse(), [ASSEMBLED_UTF8]: spliced.finish() };
    const ok = gatheredAnswer(response, (v) =>
      serializeAssembleResponse(v as AssembleContextResponse, release),
    )!;
    expect(released).toEqual([]);
    ok.chunks();
    expect(released).toEqual([]);
    ok.written(true);
    expect(released).toHaveLength(1);
    expect(released[0]).toBe(source);
    const failed = gatheredAnswer(response, (v) =>
      serializeAssembleResponse(v as AssembleContextResponse, release),
    )!;
    failed.written(false);
    expect(released).toHaveLength(1);
  });

  it('a released (detached) source fails loudly instead of sending a gap', () => {
    const source = new Uint8Array(new ArrayBuffer(GATHER_FROM_BYTES)).fill(0x61);
    const spliced = new SplicedBuilder(source);
    spliced.bytes(0, source.length);
    const message = new SplicedMessage([Buffer.from([0x10, 1])], spliced.finish());
    structuredClone(source.buffer, { transfer: [source.buffer] });
    expect(() => message.chunks()).toThrow(/past its 0 bytes/);
  });

  it('any other value goes through grpc-js untouched, unserialized', () => {
    const never = () => {
      throw new Error('serialized');
    };
    expect(gatheredAnswer(null, never)).toBeNull();
    expect(gatheredAnswer(Buffer.alloc(3), never)).toBeNull();
    expect(gatheredAnswer(stubResponse(), never)).toBeNull();
    const small = new SplicedBuilder(new Uint8Array(0));
    small.text('x'.repeat(GATHER_FROM_BYTES - 1));
    expect(gatheredAnswer({ ...stubResponse(), [ASSEMBLED_UTF8]: small.finish() }, never)).toBeNull();
  });
});

describe('the CPU task leaves a large context spliced on the history’s own bytes', () => {
  const resolved = CapabilityCatalog.load(undefined).resolve('gpt-4o');

  it('far deadline or none left: the history span points into the task’s history buffer', () => {
    for (const deadline of [monotonicNow() + 60_000, monotonicNow() + 5]) {
      const history = encodeHistory([
        { role: 'user', content: '绿'.repeat(30_000) },
        { role: 'assistant', content: 'ok' },
      ]);
      const input = encodeCandidates(
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
        { ...history, contentPending: false },
      );
      const out = runCpuTask(input);
      const text = out.assembled_utf8!;
      expect(text.byteLength).toBeGreaterThanOrEqual(GATHER_FROM_BYTES);
      expect(text.source).toBe(input.history);
      const fromSource = [];
      for (let j = 0; j < text.spans.length; j += 3)
        if (text.spans[j] === FROM_SOURCE) fromSource.push(text.spans[j + 2]! - text.spans[j + 1]!);
      expect(fromSource).toEqual([90_000, 2]);
      // What the task wrote itself is small: directive, role prefixes, separators.
      expect(text.own.byteLength).toBeLessThan(200);
    }
  });
});

describe('gathered answers over gRPC on loopback', () => {
  const svc = useTestService();
  const who = tenant();
  beforeAll(() => {
    svc().store.upsertMemories(memories(who.org, who.agent, 6));
  });

  it('a 480 KB CJK history is answered in gathered chunks with every line and exact tokens_used', async () => {
    const recent = Array.from({ length: 20 }, (_, i) => ({
      role: 'user',
      content: `${i}:${'绿'.repeat(8000)}`,
    }));
    const before = gatheredMessagesSent();
    const out = await svc().client.assemble(request(who, { recent_messages: recent }), {
      deadlineMs: 15_000,
    });
    expect(out.status.code).toBe(status.OK);
    expect(gatheredMessagesSent()).toBe(before + 1);
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

  it('a small answer keeps grpc-js’s own send', async () => {
    const before = gatheredMessagesSent();
    const out = await svc().client.assemble(request(who), { deadlineMs: 15_000 });
    expect(out.status.code).toBe(status.OK);
    expect(out.response!.assembled_context.length).toBeGreaterThan(0);
    expect(gatheredMessagesSent()).toBe(before);
  });

  it('concurrent large answers, and the next ones on recycled request buffers, each carry their own history', async () => {
    for (let round = 0; round < 3; round++) {
      const chars = ['绿', '茶', '水', '山'];
      const ids = chars.map(() => randomUUID());
      const outs = await Promise.all(
        chars.map((ch, i) =>
          svc().client.assemble(
            request(who, {
              recent_messages: [{ role: 'user', content: `${round}${ch.repeat(30_000)}` }],
              request_id: ids[i],
            }),
            { deadlineMs: 15_000 },
          ),
        ),
      );
      expect(outs.map((o) => o.status.code)).toEqual(chars.map(() => status.OK));
      expect(outs.map((o) => o.response!.request_id)).toEqual(ids);
      outs.forEach((o, i) => {
        const line = o.response!.assembled_context.split('\n').find((l) => l.startsWith('user: '));
        expect(line).toBe(`user: ${round}${chars[i]!.repeat(30_000)}`);
      });
    }
  });
});

describe('the gathered send, on a stand-in for grpc-js’s server call', () => {
  const requireCjs = createRequire(import.meta.url);
  const { BaseServerInterceptingCall } = requireCjs('@grpc/grpc-js/build/src/server-interceptors.js') as {
    BaseServerInterceptingCall: { prototype: { sendMessage(message: unknown, callback: () => void): void } };
  };
  sendGatheredMessages(gatheredAnswer);

  /** A large spliced answer on `source`, a call that records what grpc-js would have done with it. */
  function setup(opts: { max?: number; writeError?: Error } = {}) {
    const source = Buffer.from(`${'绿'.repeat(GATHER_FROM_BYTES)}tail`, 'utf8');
    const spliced = new SplicedBuilder(source);
    spliced.text('user: ');
    spliced.bytes(0, source.length);
    const response = { ...stubResponse(), [ASSEMBLED_UTF8]: spliced.finish() };
    const released: Uint8Array[] = [];
    const writes: Buffer[] = [];
    const statuses: { code: number; details: string }[] = [];
    const events: string[] = [];
    const call = {
      checkCancelled: () => false,
      handler: {
        serialize: (v: unknown) =>
          serializeAssembleResponse(v as AssembleContextResponse, (s) => void released.push(s)),
      },
      maxSendMessageSize: opts.max ?? -1,
      maybeSendMetadata: () => void events.push('metadata'),
      sendStatus: (s: { code: number; details: string }) => void statuses.push(s),
      stream: {
        cork: () => void events.push('cork'),
        uncork: () => void events.push('uncork'),
        write: (chunk: Uint8Array, cb?: (err?: Error | null) => void) => {
          writes.push(Buffer.from(chunk));
          if (cb) setImmediate(() => cb(opts.writeError ?? null));
          return true;
        },
      },
    };
    let called = 0;
    const send = () =>
      BaseServerInterceptingCall.prototype.sendMessage.call(call, response, () => void called++);
    return { source, response, released, writes, statuses, events, send, called: () => called };
  }
  const tick = () => new Promise((resolve) => setImmediate(resolve));

  it('writes the prefix and every chunk corked, then answers and gives the source back once', async () => {
    const s = setup();
    const before = gatheredMessagesSent();
    s.send();
    expect(gatheredMessagesSent()).toBe(before + 1);
    expect(s.events).toEqual(['metadata', 'cork', 'uncork']);
    const message = serializeAssembleResponseBuffer(s.response);
    expect(s.writes[0]!.length).toBe(5);
    expect(s.writes[0]![0]).toBe(0);
    expect(s.writes[0]!.readUInt32BE(1)).toBe(message.length);
    expect(Buffer.concat(s.writes.slice(1)).equals(message)).toBe(true);
    expect(s.called()).toBe(0);
    expect(s.released).toEqual([]);
    await tick();
    expect(s.called()).toBe(1);
    expect(s.released).toEqual([s.source]);
    expect(s.statuses).toEqual([]);
  });

  it('a failed write ends the call INTERNAL and keeps the source out of the pool', async () => {
    const s = setup({ writeError: new Error('stream reset') });
    s.send();
    await tick();
    expect(s.statuses.map((x) => [x.code, x.details])).toEqual([[status.INTERNAL, 'Internal server error']]);
    expect(s.called()).toBe(0);
    expect(s.released).toEqual([]);
  });

  it('over the send cap: RESOURCE_EXHAUSTED, nothing written', () => {
    const s = setup({ max: 1000 });
    s.send();
    expect(s.statuses.map((x) => x.code)).toEqual([status.RESOURCE_EXHAUSTED]);
    expect(s.statuses[0]!.details).toMatch(/^Sent message larger than max \(\d+ vs\. 1000\)$/);
    expect(s.writes).toEqual([]);
    expect(s.released).toEqual([]);
  });

  it('a source released before the send: INTERNAL, nothing written, nothing read from it', () => {
    const s = setup();
    structuredClone(s.source.buffer, { transfer: [s.source.buffer as ArrayBuffer] });
    s.send();
    expect(s.statuses.map((x) => [x.code, x.details])).toEqual([
      [status.INTERNAL, 'Error serializing response'],
    ]);
    expect(s.writes).toEqual([]);
    expect(s.events).toEqual([]);
  });
});
