/**
 * The body decoder (compiled worker: `npm run build` first). A large body is transferred
 * to the decoder thread (the caller's view is detached), decoded with the same bounds and the same errors
 * as inline, and a branch that gives up gets its signal's reason without waiting for the decode; a body of
 * 1 MiB or more comes back to the process's message buffers once decoded or withdrawn.
 */

import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { isBranchError } from '../../../src/retrieval/branch-error.js';
import { BodyDecoder, INLINE_BODY_BYTES } from '../../../src/retrieval/http/body-decoder.js';
import { HttpMemorySource } from '../../../src/retrieval/http/memory-http.js';
import { decodeMemoryBody } from '../../../src/retrieval/validate.js';
import { MESSAGE_BUFFERS, POOLED_MESSAGE_FROM_BYTES } from '../../../src/util/message-buffers.js';
import { memoryHit } from '../../helpers/memory-hit.js';

const ORG = '11111111-1111-4111-8111-111111111111';
const AGENT = '22222222-2222-4222-8222-222222222222';
const LIMITS = { limit: 20, maxChars: 65_536 };

function body(n: number, content: (i: number) => string): Uint8Array {
  const results = Array.from({ length: n }, (_, i) =>
    memoryHit(content(i), i, {
      org: i % 7 === 3 ? '33333333-3333-4333-8333-333333333333' : ORG,
      agent: AGENT,
      confidence: 0.5,
      similarity: 0.5,
      rank: i + 1,
      source: 'unit',
    }),
  );

  return new TextEncoder().encode(JSON.stringify({ data: { results } }));
}

describe('BodyDecoder', () => {
  const decoder = new BodyDecoder();
  afterAll(() => decoder.close());
  const never = new AbortController().signal;

  it('decodes a large body in the thread exactly as inline, contents as UTF-8 bytes, and takes the buffer (transferred)', async () => {
    const big = body(5000, (i) =>
      i === 1 ? 'x'.repeat(70_000) : `memory ${i} about the lake, 湖 \u{1F30A} <b>&amp;</b>`,
    );
    expect(big.byteLength).toBeGreaterThan(INLINE_BODY_BYTES);
    const expected = decodeMemoryBody(big.slice(), ORG, AGENT, LIMITS);
    expect(expected).toMatchObject({ oversize: 1, foreign: 3, ignored: 4980, invalid: 0 });
    const got = await decoder.decode(big, ORG, AGENT, LIMITS, never);
    // The thread sends each content as its UTF-8 bytes (content-bytes.ts), all views on one buffer.
    const contents = got.hits.map((h) => h.content);
    expect(contents.every((c) => c instanceof Uint8Array)).toBe(true);
    expect(new Set(contents.map((c) => (c as Uint8Array).buffer)).size).toBe(1);
    const decoded = got.hits.map((h) => ({
      ...h,
      content: Buffer.from(h.content as Uint8Array).toString('utf8'),
    }));
    expect({ ...got, hits: decoded }).toEqual(expected);
    expect(decoded[0]!.content).toBe('memory 0 about the lake, 湖 \u{1F30A} <b>&amp;</b>');
    expect(big.byteLength).toBe(0);
  });

  it('decodes a small body inline (buffer untouched) with the same result', async () => {
    const small = body(3, (i) => `m${i}`);
    expect(small.byteLength).toBeLessThanOrEqual(INLINE_BODY_BYTES);
    const got = await decoder.decode(small, ORG, AGENT, LIMITS, never);
    expect(got.hits.map((h) => h.rank)).toEqual([1, 2, 3]);
    expect(small.byteLength).toBeGreaterThan(0);
  });

  it('answers the contract errors from the thread: invalid JSON, bad shape', async () => {
    const bad = new TextEncoder().encode(`{"data": {"results": [${'1,'.repeat(40_000)}`);
    const err = await decoder.decode(bad, ORG, AGENT, LIMITS, never).catch((e: unknown) => e);
    expect(isBranchError(err) && err.detail).toBe('invalid JSON');
    const shape = new TextEncoder().encode(JSON.stringify({ data: { results: 'x'.repeat(100_000) } }));
    const err2 = await decoder.decode(shape, ORG, AGENT, LIMITS, never).catch((e: unknown) => e);
    expect(isBranchError(err2) && err2.detail).toBe('bad shape: data.results is not an array');
  });

  it('serves large bodies round-robin across orgs: a quiet org waits behind one noisy body, not all', async () => {
    const QUIET_ORG = '44444444-4444-4444-8444-444444444444';
    const order: string[] = [];
    const noisy = [0, 1, 2, 3, 4].map((i) =>
      decoder
        .decode(
          body(5000, (j) => `n${j}`),
          ORG,
          AGENT,
          LIMITS,
          never,
        )
        .then(() => order.push(`noisy-${i}`)),
    );
    const quiet = decoder
      .decode(
        body(3000, (j) => `q${j}`),
        QUIET_ORG,
        AGENT,
        LIMITS,
        never,
      )
      .then((v) => {
        order.push('quiet');
        return v;
      });
    await Promise.all([...noisy, quiet]);
    // noisy-0 went to the thread at once; the quiet body joined the rotation after the noisy org's line
    // head, so it is served after one more noisy body (FIFO: last).
    expect(order).toEqual(['noisy-0', 'noisy-1', 'quiet', 'noisy-2', 'noisy-3', 'noisy-4']);
    // Scoped to its own org: every hit of the body is another org's.
    expect((await quiet).foreign).toBe(20);
  });

  it("rejects with the branch signal's reason once it aborts", async () => {
    const ctl = new AbortController();
    const reason = new DOMException('hot_timeout', 'TimeoutError');
    const pending = decoder.decode(
      body(5000, (i) => `m${i}`),
      ORG,
      AGENT,
      LIMITS,
      ctl.signal,
    );
    ctl.abort(reason);
    await expect(pending).rejects.toBe(reason);
    // The thread is still there for the next body.
    const next = await decoder.decode(
      body(3000, (i) => `n${i}`),
      ORG,
      AGENT,
      LIMITS,
      never,
    );
    expect(next.hits).toHaveLength(17);
  });

  it('hands a body of 1 MiB or more back to the message pool: the next large body is assembled in it', async () => {
    const big = body(8000, (i) => `memory ${i} about the lake and the boat on tuesday`);
    expect(big.byteLength).toBeGreaterThanOrEqual(POOLED_MESSAGE_FROM_BYTES);
    const size = big.byteLength;
    const before = { ...MESSAGE_BUFFERS.stats };
    const got = await decoder.decode(big, ORG, AGENT, LIMITS, never);
    // The first 20 items, 3 of them another org's.
    expect(got.hits).toHaveLength(17);
    expect(big.byteLength).toBe(0);
    expect(MESSAGE_BUFFERS.stats.released).toBe(before.released + 1);
    const again = MESSAGE_BUFFERS.acquire(size)!;
    expect(again.buffer.byteLength).toBe(size);
    expect(MESSAGE_BUFFERS.stats.reused).toBe(before.reused + 1);
    // A body withdrawn while queued goes back too (the thread is busy with the first one).
    const ctl = new AbortController();
    const first = decoder.decode(
      body(8000, (i) => `x${i}`),
      ORG,
      AGENT,
      LIMITS,
      never,
    );
    const queued = body(8000, (i) => `y${i}`);
    const withdrawn = decoder.decode(queued, ORG, AGENT, LIMITS, ctl.signal);
    ctl.abort(new DOMException('cold_timeout', 'TimeoutError'));
    await expect(withdrawn).rejects.toMatchObject({ name: 'TimeoutError' });
    expect(queued.byteLength).toBe(0);
    await first;
    expect(MESSAGE_BUFFERS.stats.released).toBe(before.released + 3);
  });
});

describe('memory-service bodies over HTTP', () => {
  it('a large body is read into a recycled buffer: the second answer of 2.7 MB reuses the first one', async () => {
    const answer = Buffer.from(body(9000, (i) => `memory ${i} about the lake and the boat on tuesday`));
    expect(answer.byteLength).toBeGreaterThanOrEqual(POOLED_MESSAGE_FROM_BYTES);
    const server = http.createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': answer.byteLength });
      res.end(answer);
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const memory = new HttpMemorySource({
      baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      token: 'test-token',
      hotTimeoutMs: 10_000,
      coldTimeoutMs: 10_000,
    });
    try {
      const signal = new AbortController().signal;
      const first = await memory.hot(ORG, AGENT, signal);
      const before = { ...MESSAGE_BUFFERS.stats };
      const second = await memory.hot(ORG, AGENT, signal);
      expect(second).toEqual(first);
      expect(first.hits).toHaveLength(17);
      // Read into the buffer the first body handed back, which came back again after decoding.
      expect(MESSAGE_BUFFERS.stats.reused).toBe(before.reused + 1);
      expect(MESSAGE_BUFFERS.stats.released).toBe(before.released + 1);
    } finally {
      await memory.close();
      server.close();
    }
  });
});
