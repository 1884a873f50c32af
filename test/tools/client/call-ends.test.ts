/**
 * What ended each call, as the load driver's transport reports it, and the bench tally
 * built on it (bench/lib/outcomes.ts): decisions come from codes and facts — our timer fired, the server
 * sent a status, the stream was reset, there was no connection — never from status text. The servers
 * here are bare `node:http2` servers, so each test controls exactly what goes on the wire, including
 * status texts chosen to mislead a text reader.
 */
import http2, { type Http2Server, type ServerHttp2Stream } from 'node:http2';
import { afterEach, describe, expect, it } from 'vitest';
import { deciderOf, outcomeTracker } from '../../../bench/lib/outcomes.js';
import { type LoadCall, runLoad } from '../../../src/tools/client/load-driver.js';
import { cyclingSource } from '../../../src/tools/client/request-source.js';
import { requests } from './fake-context-server.js';

const open: Http2Server[] = [];

afterEach(async () => {
  for (const s of open.splice(0)) await new Promise<void>((resolve) => s.close(() => resolve()));
});

/** A bare HTTP/2 server whose every stream `answer` handles once its request has arrived. */
async function bareServer(answer: (stream: ServerHttp2Stream) => void): Promise<string> {
  const server = http2.createServer();
  server.on('stream', (stream) => {
    stream.on('error', () => {});
    stream.resume();
    stream.on('end', () => answer(stream));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  open.push(server);
  return `127.0.0.1:${(server.address() as { port: number }).port}`;
}

/** A trailers-only gRPC answer (how servers send errors). */
function status(code: number, message: string) {
  return (stream: ServerHttp2Stream) =>
    stream.respond(
      {
        ':status': 200,
        'content-type': 'application/grpc',
        'grpc-status': String(code),
        'grpc-message': message,
      },
      { endStream: true },
    );
}

async function run(addr: string, timeoutMs = 200) {
  const calls: LoadCall[] = [];
  const tracker = outcomeTracker({ deadlineMs: timeoutMs, windowMs: 1000 });
  const report = await runLoad({
    addr,
    connections: 1,
    rate: 40,
    durationS: 0.25,
    timeoutMs,
    source: cyclingSource('ends', requests(2)),
    onCall: (c) => {
      calls.push(c);
      tracker.onCall(c);
    },
  });
  return { calls, report, tally: tracker.total };
}

describe('call ends and deciders', () => {
  it('a server status is the service, even worded like grpc-js client timer', async () => {
    const addr = await bareServer(status(4, 'Deadline exceeded after 0.2s'));
    const { calls, report, tally } = await run(addr);
    expect(calls).toHaveLength(10);
    expect(calls.every((c) => c.end === 'server' && c.code === 4 && c.measured)).toBe(true);
    // Answered at once: well before the caller's deadline, so the service's own cap decided.
    expect(report.requests.errors).toEqual({ 'DEADLINE_EXCEEDED (server cap)': 10 });
    expect(tally.deadline_exceeded).toEqual({
      service_before_deadline: 10,
      service_late: 0,
      server_transport: 0,
      client_timeout: 0,
    });
    expect(tally.answered).toBe(10);
  });

  it('our own timer is the client, whatever the server would have said', async () => {
    const held: ServerHttp2Stream[] = [];
    const addr = await bareServer((s) => held.push(s));
    const { calls, report, tally } = await run(addr, 120);
    expect(calls).toHaveLength(10);
    expect(calls.every((c) => c.end === 'timer' && c.code === 4)).toBe(true);
    expect(report.requests.errors).toEqual({ 'DEADLINE_EXCEEDED (client --timeout)': 10 });
    expect(tally.deadline_exceeded.client_timeout).toBe(10);
    expect(tally.answered).toBe(0);
    expect(held).toHaveLength(10);
  });

  it('a stream the server resets without a status is the server transport', async () => {
    const addr = await bareServer((s) => s.close(http2.constants.NGHTTP2_INTERNAL_ERROR));
    const { calls, tally } = await run(addr);
    expect(calls).toHaveLength(10);
    expect(calls.every((c) => c.end === 'stream' && c.code === 13)).toBe(true);
    expect(tally.errors).toEqual({ INTERNAL: 10 });
    expect(tally.answered).toBe(10);
  });

  it('a refused stream never reached the service: the connection, UNAVAILABLE', async () => {
    const addr = await bareServer((s) => s.close(http2.constants.NGHTTP2_REFUSED_STREAM));
    const { calls, tally } = await run(addr);
    expect(calls.every((c) => c.end === 'connection' && c.code === 14)).toBe(true);
    expect(tally.errors).toEqual({ UNAVAILABLE: 10 });
    expect(tally.answered).toBe(0);
  });

  it("open loop gives every connection the same share when it sends each tick's requests as one block", async () => {
    const perSession = new Map<unknown, number>();
    const addr = await bareServer((s) => {
      perSession.set(s.session, (perSession.get(s.session) ?? 0) + 1);
      status(0, '')(s);
    });
    const source = cyclingSource('spread', requests(2));
    // 2,000 req/s with a 1 ms tick: blocks of 2 consecutive requests per connection.
    const report = await runLoad({ addr, connections: 4, rate: 2000, durationS: 0.5, tickMs: 1, source });
    expect(report.requests.sent).toBe(1000);
    expect([...perSession.values()]).toEqual([250, 250, 250, 250]);
  });

  it('maps codes and ends to deciders', () => {
    expect(deciderOf(0, 'server')).toBe('ok');
    expect(deciderOf(4, 'server')).toBe('service');
    expect(deciderOf(4, 'timer')).toBe('client');
    expect(deciderOf(1, 'cancel')).toBe('client');
    expect(deciderOf(14, 'connection')).toBe('connection');
    expect(deciderOf(13, 'stream')).toBe('server_transport');
  });
});
