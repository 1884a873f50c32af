/**
 * The `frames` transport (src/client/frames-*.ts, issue 10) against real servers on 127.0.0.1: the
 * service's own grpc-js transport around a test double, a bare grpc-js server with byte (de)serializers,
 * and bare `node:http2` servers whose settings and misbehaviour each test picks (small windows, few
 * streams, GOAWAY, dropped sessions, PING, header blocks split into CONTINUATION frames).
 */
import { createHash } from 'node:crypto';
import http2, { type Http2Server, type ServerHttp2Stream } from 'node:http2';
import net from 'node:net';
import { Server, ServerCredentials, type ServiceDefinition, status } from '@grpc/grpc-js';
import { afterEach, describe, expect, it } from 'vitest';
import { ASSEMBLE_METHOD, createContextClient } from '../../src/client/context-client.js';
import { FramesChannel } from '../../src/client/frames-channel.js';
import { ASSEMBLE_PATH, encodeRequestFrame, grpcFrame } from '../../src/client/grpc-frames.js';
import { runLoad } from '../../src/client/load-driver.js';
import type { RawCall, RawOutcome } from '../../src/client/raw-grpc.js';
import { cyclingSource } from '../../src/client/request-source.js';
import { Errors } from '../../src/errors.js';
import type { AssembleContextResponse } from '../../src/server/proto.js';
import { LEVEL_HEADER } from '../../src/wire-headers.js';
import { startAssembleServer } from '../helpers/assemble-server.js';
import { answer, requests, startFake } from './fake-context-server.js';

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

function channel(addr: string): FramesChannel {
  const ch = new FramesChannel({ addr });
  cleanup.push(() => ch.close());
  return ch;
}

/** One call; asserts the outcome never arrives inside `call` and comes exactly once. */
function call(ch: FramesChannel, frame: Buffer, timeoutMs = 5000, keepBody = true) {
  let outcomes = 0;
  let inside = true;
  let handle!: RawCall;
  const done = new Promise<RawOutcome>((resolve) => {
    handle = ch.call(
      frame,
      { timeoutMs, keepBody },
      {
        done: (o) => {
          outcomes++;
          expect(inside).toBe(false);
          resolve(o);
        },
      },
    );
  });
  inside = false;
  return { handle, done, outcomes: () => outcomes };
}

/** A grpc-js server whose AssembleContext sees and answers raw bytes. */
async function bytesServer(handle: (req: Buffer) => Buffer | { code: number; details: string }) {
  const id = (b: Buffer) => b;
  const def = {
    AssembleContext: {
      path: ASSEMBLE_PATH,
      requestStream: false,
      responseStream: false,
      requestSerialize: id,
      requestDeserialize: id,
      responseSerialize: id,
      responseDeserialize: id,
    },
  } as unknown as ServiceDefinition;
  const server = new Server({ 'grpc.max_receive_message_length': -1, 'grpc.max_send_message_length': -1 });
  server.addService(def, {
    AssembleContext: (c: { request: Buffer }, cb: (err: object | null, res?: Buffer) => void) => {
      const out = handle(c.request);
      if (Buffer.isBuffer(out)) cb(null, out);
      else cb(out);
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (err, p) =>
      err ? reject(err) : resolve(p),
    ),
  );
  cleanup.push(() => void server.forceShutdown());
  return `127.0.0.1:${port}`;
}

/** A bare HTTP/2 server: `onStream` sees each stream once its request has fully arrived. */
async function bareServer(
  onStream: (stream: ServerHttp2Stream, body: Buffer) => void,
  settings: http2.Settings = {},
): Promise<{ addr: string; server: Http2Server }> {
  const server = http2.createServer({ settings });
  server.on('stream', (stream) => {
    stream.on('error', () => {});
    const parts: Buffer[] = [];
    stream.on('data', (c: Buffer) => parts.push(c));
    stream.on('end', () => onStream(stream, Buffer.concat(parts)));
  });
  // A session that sent GOAWAY stays half open after the client left (node:http2): close it here.
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on('session', (s) => sessions.add(s.on('close', () => sessions.delete(s))));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanup.push(async () => {
    for (const s of sessions) s.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return { addr: `127.0.0.1:${(server.address() as { port: number }).port}`, server };
}

function ok(stream: ServerHttp2Stream, body: Buffer, trailers: http2.OutgoingHttpHeaders = {}) {
  if (stream.destroyed) return;
  stream.respond(
    { ':status': 200, 'content-type': 'application/grpc', [LEVEL_HEADER]: 'L1' },
    {
      waitForTrailers: true,
    },
  );
  stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0', ...trailers }));
  stream.end(grpcFrame(body));
}

const sha = (b: Buffer) => createHash('sha256').update(b).digest();

describe('frames transport against the service transport', () => {
  it('OK answers carry the level header; the kept body decodes equal to the grpc-js client', async () => {
    const { addr } = await startAssembleServer(async (req) => answer(req, 'L1'));
    const req = { ...requests(1)[0]!, request_id: 'frames-1' };
    const ch = channel(addr);
    await ch.ready(addr, 2000);
    const c = call(ch, encodeRequestFrame(req));
    const o = await c.done;
    // grpc-js says 'OK' in grpc-message; the words are handed on as sent.
    expect(o).toMatchObject({ code: 0, end: 'server', level: 'L1', details: 'OK' });
    expect(o.bytes).toBe(o.body!.length + 5);
    const client = createContextClient({ addr });
    cleanup.push(() => client.close());
    const ref = await client.assemble(req);
    expect(ref.status.code).toBe(0);
    const strip = (r: AssembleContextResponse) => ({ ...r, trace_id: '', span_id: '' });
    expect(strip(ASSEMBLE_METHOD.responseDeserialize(o.body!) as AssembleContextResponse)).toEqual(
      strip(ref.response!),
    );
    // Without keepBody the bytes are counted, not kept.
    const bare = await call(ch, encodeRequestFrame(req), 5000, false).done;
    expect(bare).toMatchObject({ code: 0, body: null, bytes: o.bytes });
  });

  it('trailers-only errors and the server deadline end the call with the server status', async () => {
    const { addr } = await startAssembleServer(async (req) => {
      if (req.query === 'q0') throw Errors.invalidArgument('query', 'bad query');
      throw Errors.deadlineExceeded();
    });
    const ch = channel(addr);
    const [bad, late] = await Promise.all(requests(2).map((r) => call(ch, encodeRequestFrame(r)).done));
    expect(bad).toMatchObject({ code: status.INVALID_ARGUMENT, end: 'server', body: null, bytes: 0 });
    expect(bad!.details).toContain('bad query');
    expect(late).toMatchObject({ code: status.DEADLINE_EXCEEDED, end: 'server' });
  });

  it('a 10 MB request and its 10 MB echo, and a 100 KB answer, arrive whole', async () => {
    const addr = await bytesServer((req) => (req.length === 3 ? Buffer.alloc(100_000, 7) : req));
    const ch = channel(addr);
    const big = Buffer.alloc(10 * 1024 * 1024);
    for (let i = 0; i < big.length; i += 4096) big[i] = i % 251;
    const [echo, small] = await Promise.all([
      call(ch, grpcFrame(big), 30_000).done,
      call(ch, grpcFrame(Buffer.from([1, 2, 3]))).done,
    ]);
    expect(echo.code).toBe(0);
    expect(echo.bytes).toBe(big.length + 5);
    expect(sha(echo.body!)).toEqual(sha(big));
    expect(small).toMatchObject({ code: 0, bytes: 100_005 });
    expect(small.body!.equals(Buffer.alloc(100_000, 7))).toBe(true);
  });
});

describe('frames transport flow control and stream limits', () => {
  it("waits for the server's windows: a request 300× its 1 KiB stream window arrives intact", async () => {
    const { addr } = await bareServer((s, body) => ok(s, sha(body)), { initialWindowSize: 1024 });
    const ch = channel(addr);
    const req = grpcFrame(Buffer.alloc(300 * 1024, 3));
    const outs = await Promise.all([call(ch, req).done, call(ch, req).done]);
    for (const o of outs) {
      expect(o).toMatchObject({ code: 0, level: 'L1' });
      expect(o.body!.equals(sha(req))).toBe(true);
    }
  });

  it('a body whose trailers come reads later stays intact while other answers reuse the read buffer', async () => {
    const { addr } = await bareServer((s, body) => {
      const fill = body[5]!;
      s.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
      s.on('wantTrailers', () =>
        setTimeout(() => s.sendTrailers({ 'grpc-status': '0' }), fill === 65 ? 60 : 0),
      );
      s.end(grpcFrame(Buffer.alloc(fill === 65 ? 12_000 : 40_000, fill)));
    });
    const ch = channel(addr);
    await ch.ready(addr, 2000);
    const slow = call(ch, grpcFrame(Buffer.from('A')));
    await new Promise((r) => setTimeout(r, 20));
    const fast = await Promise.all([66, 67, 68, 69].map((b) => call(ch, grpcFrame(Buffer.from([b]))).done));
    for (const [i, o] of fast.entries()) expect(o.body!.equals(Buffer.alloc(40_000, 66 + i))).toBe(true);
    const o = await slow.done;
    expect(o.code).toBe(0);
    expect(o.body!.equals(Buffer.alloc(12_000, 65))).toBe(true);
  });

  it('keeps to MAX_CONCURRENT_STREAMS: 12 calls through 2 streams, none refused', async () => {
    let open = 0;
    let most = 0;
    const { addr } = await bareServer(
      (s) => {
        most = Math.max(most, ++open);
        setTimeout(() => {
          open--;
          ok(s, Buffer.from('x'));
        }, 20);
      },
      { maxConcurrentStreams: 2 },
    );
    const ch = channel(addr);
    await ch.ready(addr, 2000);
    const outs = await Promise.all(
      Array.from({ length: 12 }, () => call(ch, grpcFrame(Buffer.alloc(10))).done),
    );
    expect(outs.map((o) => o.code)).toEqual(Array(12).fill(0));
    expect(most).toBe(2);
  });

  it('reads header blocks split into CONTINUATION frames (a 40 KB grpc-message) and answers PING', async () => {
    const message = `long ${'m'.repeat(40_000)}`;
    let server!: Http2Server;
    ({ server } = await bareServer((s) =>
      s.respond(
        { ':status': 200, 'content-type': 'application/grpc', 'grpc-status': '9', 'grpc-message': message },
        { endStream: true },
      ),
    ));
    const addr = `127.0.0.1:${(server.address() as { port: number }).port}`;
    const pinged = new Promise<Buffer>((resolve, reject) =>
      server.once('session', (session) =>
        session.once('remoteSettings', () =>
          session.ping(Buffer.from('ibexping'), (err, _ms, payload) =>
            err ? reject(err) : resolve(payload),
          ),
        ),
      ),
    );
    const ch = channel(addr);
    const o = await call(ch, grpcFrame(Buffer.alloc(1))).done;
    expect(o).toMatchObject({ code: 9, end: 'server', details: message });
    expect((await pinged).toString()).toBe('ibexping');
  });
});

describe('frames transport ends', () => {
  it('expire resets the stream (CANCEL) and ends DEADLINE_EXCEEDED by the timer; cancel ends CANCELLED', async () => {
    const resets: number[] = [];
    const { addr } = await bareServer((s) => s.on('close', () => resets.push(s.rstCode)));
    const ch = channel(addr);
    const a = call(ch, grpcFrame(Buffer.alloc(4)), 150);
    const b = call(ch, grpcFrame(Buffer.alloc(4)), 150);
    await new Promise((r) => setTimeout(r, 50));
    a.handle.expire();
    b.handle.cancel();
    a.handle.cancel();
    expect(await a.done).toMatchObject({
      code: 4,
      end: 'timer',
      details: 'Deadline exceeded after 150 ms (driver)',
    });
    expect(await b.done).toMatchObject({ code: 1, end: 'cancel' });
    await new Promise((r) => setTimeout(r, 50));
    expect(resets).toEqual([http2.constants.NGHTTP2_CANCEL, http2.constants.NGHTTP2_CANCEL]);
    expect(a.outcomes() + b.outcomes()).toBe(2);
  });

  it('GOAWAY: streams past last-stream-id end by the connection, taken ones finish, then it reconnects', async () => {
    const held: ServerHttp2Stream[] = [];
    const sessions = new Set<unknown>();
    const { addr } = await bareServer((s) => {
      sessions.add(s.session);
      held.push(s);
      if (held.length === 3) {
        s.session!.goaway(http2.constants.NGHTTP2_NO_ERROR, 1);
        ok(held[0]!, Buffer.from('first'));
      }
      if (held.length > 3) ok(s, Buffer.from('again'));
    });
    const ch = channel(addr);
    await ch.ready(addr, 2000);
    const outs = await Promise.all([1, 2, 3].map(() => call(ch, grpcFrame(Buffer.alloc(8))).done));
    expect(outs[0]).toMatchObject({ code: 0, end: 'server' });
    expect(outs[0]!.body!.toString()).toBe('first');
    for (const o of outs.slice(1)) expect(o).toMatchObject({ code: status.UNAVAILABLE, end: 'connection' });
    expect(outs[1]!.details).toMatch(/GOAWAY/);
    await new Promise((r) => setTimeout(r, 120));
    const again = await call(ch, grpcFrame(Buffer.alloc(8))).done;
    expect(again).toMatchObject({ code: 0 });
    expect(sessions.size).toBe(2);
  });

  it('a server dropping the connection mid-run: open calls end by the connection, later ones reconnect', async () => {
    let n = 0;
    const sockets: net.Socket[] = [];
    const { addr, server } = await bareServer((s) => {
      n++;
      // The TCP socket, not the session: no RST_STREAM or GOAWAY first, the connection just ends.
      if (n === 30) sockets.at(-1)!.destroy();
      else if (n % 10 !== 0) ok(s, Buffer.from('y'));
    });
    server.on('connection', (sock: net.Socket) => sockets.push(sock));
    const ends: string[] = [];
    const report = await runLoad({
      addr,
      connections: 1,
      rate: 100,
      durationS: 1,
      timeoutMs: 300,
      transport: 'frames',
      source: cyclingSource('drop', requests(2)),
      onCall: (c) => ends.push(`${c.code}:${c.end}`),
    });
    expect(report.requests.sent).toBe(100);
    expect(report.requests.unfinished).toBe(0);
    // Streams 10 and 20 were held open when the connection went: they and 30 end by the connection (and
    // a call sent while the socket was closing, if any); every 10th stream after is held until the timer.
    const count = (e: string) => ends.filter((x) => x === e).length;
    const lost = count('14:connection');
    expect(lost).toBeGreaterThanOrEqual(3);
    expect(lost).toBeLessThanOrEqual(5);
    expect(count('0:server')).toBe(90);
    expect(count('4:timer')).toBe(10 - lost);
    expect(ends).toHaveLength(100);
  });

  it('a refused connection: ready rejects naming the address, calls end UNAVAILABLE by the connection', async () => {
    const probe = net.createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const port = (probe.address() as { port: number }).port;
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    const addr = `127.0.0.1:${port}`;
    const ch = channel(addr);
    await expect(ch.ready(addr, 2000)).rejects.toThrow(
      new RegExp(`cannot connect to 127\\.0\\.0\\.1:${port} within 2000 ms: .*ECONNREFUSED`),
    );
    const o = await call(ch, grpcFrame(Buffer.alloc(1))).done;
    expect(o).toMatchObject({ code: status.UNAVAILABLE, end: 'connection' });
    await expect(
      runLoad({
        addr,
        connections: 1,
        rate: 10,
        durationS: 0.1,
        transport: 'frames',
        connectTimeoutMs: 1000,
      }),
    ).rejects.toThrow(/cannot connect to/);
  });
});

describe('ibex-context load --transport (compiled CLI)', () => {
  it('runs on frames by default, takes h2 and grpc-js, and refuses other names with exit 2', async () => {
    const { runCli } = await import('../helpers/cli.js');
    const fake = await startFake();
    const base = ['load', '--addr', fake.addr, '-c', '1', '-d', '0.3', '-R', '20', '--json'];
    for (const [flags, name] of [
      [[], 'frames'],
      [['--transport', 'h2'], 'h2'],
      [['--transport', 'grpc-js'], 'grpc-js'],
    ] as const) {
      const res = await runCli([...base, ...flags]);
      expect(res.code).toBe(0);
      const report = JSON.parse(res.stdout) as { transport: string; requests: { ok: number } };
      expect(report).toMatchObject({ transport: name, requests: { ok: 6 } });
    }
    const bad = await runCli(['load', '--addr', fake.addr, '--transport', 'http3']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("--transport must be frames, h2 or grpc-js, got 'http3'");
  });
});
