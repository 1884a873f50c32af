/**
 * Issue 9 item 3: the server advertises HTTP/2 receive windows above the largest request SPEC §11 allows,
 * so a 10 MB upload is not paced by ~150 WINDOW_UPDATE round trips of the protocol's 65,535-byte default.
 */
import http2 from 'node:http2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CONNECTION_WINDOW_BYTES, STREAM_WINDOW_BYTES } from '../../src/server/grpc-internals.js';
import { MAX_ASSEMBLE_REQUEST_BYTES } from '../../src/server/limits.js';
import { startTestService, type TestService } from '../e2e/harness.js';

describe('HTTP/2 flow-control windows (issue 9 item 3)', () => {
  let svc: TestService;
  beforeAll(async () => {
    svc = await startTestService();
  });
  afterAll(async () => {
    await svc?.stop();
  });

  it('stream and connection windows hold the largest request a client may send', async () => {
    expect(STREAM_WINDOW_BYTES).toBeGreaterThan(MAX_ASSEMBLE_REQUEST_BYTES);
    expect(CONNECTION_WINDOW_BYTES).toBeGreaterThanOrEqual(STREAM_WINDOW_BYTES);
    const session = http2.connect(`http://${svc.service.grpcAddr}`);
    try {
      const settings = await new Promise<http2.Settings>((resolve) =>
        session.once('remoteSettings', resolve),
      );
      expect(settings.initialWindowSize).toBe(STREAM_WINDOW_BYTES);
      // The connection window arrives as a WINDOW_UPDATE right after the settings: poll briefly for it.
      const until = Date.now() + 2000;
      while (session.state.remoteWindowSize !== CONNECTION_WINDOW_BYTES && Date.now() < until)
        await new Promise((resolve) => setTimeout(resolve, 10));
      expect(session.state.remoteWindowSize).toBe(CONNECTION_WINDOW_BYTES);
    } finally {
      session.destroy();
    }
  });
});
