/**
 * The tools' gRPC channels open with a 16 MiB HTTP/2 receive window, per stream and per connection: with
 * grpc-js's 64 KiB, an answer of a few hundred memories waits for window updates and answers in flight
 * share one 64 KiB connection window (docs/deploy.md, "Clients"). Read off the SETTINGS and WINDOW_UPDATE
 * frames a real node:http2 server on loopback receives from the client.
 */
import { once } from 'node:events';
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import { Client, credentials } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createContextClient,
  createRawClient,
  RECEIVE_WINDOW_BYTES,
} from '../../../src/tools/client/context-client.js';

let server: http2.Http2Server;
let addr = '';
const sessions: http2.ServerHttp2Session[] = [];

beforeAll(async () => {
  server = http2.createServer();
  server.on('session', (s) => sessions.push(s));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  addr = `127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  for (const s of sessions) s.destroy();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

/** Connects `client`, then reads what its session told the server: stream window and connection window. */
async function windowsOf(connect: () => Promise<void>, close: () => void) {
  const before = sessions.length;
  await connect();
  const session = sessions[before]!;
  // The connection-level window arrives in a WINDOW_UPDATE right after SETTINGS.
  for (let i = 0; i < 50 && (session.state.remoteWindowSize ?? 0) <= 65_535; i++) {
    await new Promise((r) => setTimeout(r, 10));
  }
  const stream = session.remoteSettings.initialWindowSize;
  const connection = session.state.remoteWindowSize;
  close();
  return { stream, connection };
}

describe('client receive window', () => {
  it('createContextClient announces RECEIVE_WINDOW_BYTES per stream and per connection', async () => {
    const client = createContextClient({ addr });
    const w = await windowsOf(
      () => client.waitForReady(5_000),
      () => client.close(),
    );
    expect(RECEIVE_WINDOW_BYTES).toBe(16 * 1024 * 1024);
    expect(w.stream).toBe(RECEIVE_WINDOW_BYTES);
    expect(w.connection).toBe(RECEIVE_WINDOW_BYTES);
  });

  it("a caller's own channel option still wins", async () => {
    const client = createRawClient({ addr }, { 'grpc-node.flow_control_window': 1 << 20 });
    const w = await windowsOf(
      () =>
        new Promise<void>((res, rej) => client.waitForReady(Date.now() + 5_000, (e) => (e ? rej(e) : res()))),
      () => client.close(),
    );
    expect(w.stream).toBe(1 << 20);
    expect(w.connection).toBe(1 << 20);
  });

  it('a grpc-js client left at its defaults announces 64 KiB (what the tools no longer do)', async () => {
    const client = new Client(addr, credentials.createInsecure());
    const w = await windowsOf(
      () =>
        new Promise<void>((res, rej) => client.waitForReady(Date.now() + 5_000, (e) => (e ? rej(e) : res()))),
      () => client.close(),
    );
    expect(w.stream).toBe(65_535);
    expect(w.connection).toBe(65_535);
  });
});
