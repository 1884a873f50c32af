/**
 * Request-metadata limits at the HTTP/2 boundary: docs/operations.md promises 16 KB of
 * metadata, but Node's HTTP/2 layer refused more than 128 header pairs (~118 entries, ~4.6 KB) with
 * "Bandwidth exhausted or memory limit exceeded". The pair limit is now derived from the byte limit, so
 * 16 KB in many small entries is served and anything over it gets the service's own RESOURCE_EXHAUSTED.
 */
import { Metadata, status } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createGrpcServer, type GrpcServer } from '../../src/grpc/grpc-server.js';
import { metadataSize } from '../../src/grpc/metadata-limit.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { createTestClient, type TestClient } from '../helpers/grpc-client.js';
import { stubResponse } from '../helpers/stub-response.js';

const ORG = '0b8f8c1e-6a5e-4c3b-9d7e-1f2a3b4c5d6e';
const AGENT = 'a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d';
const MAX_METADATA = 16 * 1024;
const SETTINGS = {
  timeoutMs: 10_000,
  maxReceiveMessageBytes: 4 * 1024 * 1024,
  maxMetadataBytes: MAX_METADATA,
};
const request = { org_id: ORG, agent_id: AGENT, model: 'gpt-4o' };

/**
 * `n` entries `x-m-<i>: <value>` (grpc-js adds its own headers to these). Each costs
 * name + value + 32 bytes as HTTP/2 counts a header list (RFC 9113 §6.5.2).
 */
function manyEntries(n: number, value = 'v'): Metadata {
  const md = new Metadata();
  for (let i = 0; i < n; i++) md.set(`x-m-${i}`, value);
  return md;
}

describe('metadata limits', () => {
  let grpc: GrpcServer;
  let client: TestClient;
  let calls = 0;

  beforeAll(async () => {
    grpc = createGrpcServer({
      assemble: async (req) => {
        calls++;
        return { response: stubResponse(req), level: 'L0' };
      },
      logger: createLogger({ logLevel: 'silent' }),
      settings: SETTINGS,
    });
    const port = await grpc.bind('127.0.0.1:0');
    grpc.markServing();
    client = createTestClient(`127.0.0.1:${port}`);
  });
  afterAll(async () => {
    client?.close();
    await grpc?.drain(1000);
  });

  it('130 small entries (~5 KB, over the 128 header pairs HTTP/2 allowed before) are served', async () => {
    const md = manyEntries(130);
    expect(metadataSize(md)).toBeLessThan(5 * 1024);
    const r = await client.assemble(request, { metadata: md });
    expect(r.status.code, r.status.details).toBe(status.OK);
  });

  it('~16 KB of metadata in 380 small entries is served', async () => {
    // 380 × (len("x-m-NNN") + 2 + 32) ≈ 15.5 KB, with the headers grpc-js adds still under 16 KiB.
    const md = manyEntries(380, 'vv');
    const size = metadataSize(md);
    expect(size).toBeGreaterThan(15 * 1024);
    expect(size).toBeLessThan(MAX_METADATA - 512);
    const before = calls;
    const r = await client.assemble(request, { metadata: md });
    expect(r.status.code, r.status.details).toBe(status.OK);
    expect(calls).toBe(before + 1);
  });

  it.each([
    ['many small entries', () => manyEntries(480, 'vv')],
    ['the smallest possible entries', () => manyEntries(520, '')],
    ['a few large entries', () => manyEntries(4, 'x'.repeat(4500))],
  ])('over 16 KB in %s ⇒ RESOURCE_EXHAUSTED with our message; the server keeps serving', async (_w, make) => {
    const md = make();
    expect(metadataSize(md)).toBeGreaterThan(MAX_METADATA);
    const before = calls;
    const r = await client.assemble(request, { metadata: md });
    expect(r.status.code).toBe(status.RESOURCE_EXHAUSTED);
    expect(r.status.details).toMatch(/^request metadata of \d+ bytes exceeds 16384$/);
    expect(calls).toBe(before);
    const next = await client.assemble(request);
    expect(next.status.code, next.status.details).toBe(status.OK);
  });
});
