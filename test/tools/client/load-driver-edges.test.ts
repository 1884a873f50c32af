import { readFileSync, rmSync } from 'node:fs';
import path from 'node:path';
import { ServerCredentials } from '@grpc/grpc-js';
import { describe, expect, it } from 'vitest';
import { createGrpcServer } from '../../../src/grpc/grpc-server.js';
import { createLogger } from '../../../src/telemetry/logger.js';
import { runLoad } from '../../../src/tools/client/load-driver.js';
import { type ReplayOptions, runReplay } from '../../../src/tools/client/replay.js';
import { cyclingSource } from '../../../src/tools/client/request-source.js';
import { servers } from '../../helpers/assemble-server.js';
import { openLoop } from '../../helpers/open-loop.js';
import { hasOpenssl, makeServerPki } from '../../helpers/pki.js';
import { AGENTS, answer, requests, startFake } from './fake-context-server.js';

describe('replay pacing', () => {
  const conversation = {
    sampleId: 'x',
    agentId: AGENTS[0]!,
    sessions: [1, 2, 3].map((s) => ({
      dateTime: '1:56 pm on 8 May, 2023',
      turns: Array.from({ length: 10 }, (_, i) => ({
        speaker: 'Ann',
        diaId: `D${s}:${i}`,
        text: `q${s * 100 + i}`,
      })),
    })),
  };
  /** Replays the conversation against `fake` at `rate` calls a second. */
  const replay = (
    fake: { addr: string },
    rate: number,
    more: Omit<ReplayOptions, 'addr' | 'conversations' | 'rate'>,
  ) => runReplay({ addr: fake.addr, conversations: [conversation] as never, rate, ...more });

  it('paces calls at -R, retries overload statuses and exits clean when the retry succeeds', async () => {
    const fake = await startFake({ deadlineFirstOf: 5, bare: true });
    const started = performance.now();
    const report = await replay(fake, 40, {
      concurrency: 8,
      retries: 2,
      limit: 20,
      skipFraction: 1 / 3,
    });
    // 20 calls at 40/s: the last is due at 475 ms.
    expect(performance.now() - started).toBeGreaterThanOrEqual(470);
    expect(report.rate).toBe(40);
    expect(report.calls).toBe(20);
    expect(report.ok).toBe(20);
    expect(report.errors).toEqual({});
    // Queries q200…q209 and q300…q309: q200, q205, q300, q305 miss their first deadline.
    expect(report.retried).toEqual({ DEADLINE_EXCEEDED: 4 });
    expect(report.invariant_violations).toBe(0);
  });

  it('counts the last status when retries run out', async () => {
    const fake = await startFake({ deadlineFirstOf: 5, bare: true });
    const report = await replay(fake, 100, {
      retries: 0,
      limit: 20,
    });
    // The fake answers DEADLINE_EXCEEDED itself, well inside the client's timeout: the server's cap fired.
    expect(report.errors).toEqual({ 'DEADLINE_EXCEEDED (server cap)': 4 });
    expect(report.retried).toEqual({});
  });
});

describe('the driver side of the deadline', () => {
  it('ends calls to a server that never answers as DEADLINE_EXCEEDED, worded like the client timer', async () => {
    // A bare HTTP/2 server that accepts every stream and never answers: only the driver can end them.
    const http2 = await import('node:http2');
    const silent = http2.createServer();
    const held: unknown[] = [];
    silent.on('stream', (stream) => held.push(stream));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const port = (silent.address() as { port: number }).port;
    try {
      const report = await openLoop(`127.0.0.1:${port}`, 1, 20, 0.5, {
        timeoutMs: 150,
        source: cyclingSource('silent', requests(2)),
      });
      expect(report.requests.sent).toBe(10);
      expect(report.requests.errors).toEqual({ 'DEADLINE_EXCEEDED (client --timeout)': 10 });
      expect(report.requests.error_details['DEADLINE_EXCEEDED (client --timeout)']).toEqual([
        'Deadline exceeded after 150 ms (driver)',
      ]);
      expect(report.requests.unfinished).toBe(0);
      expect(held).toHaveLength(10);
      expect(report.latency_ms.min).toBeGreaterThanOrEqual(150);
    } finally {
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });
});

describe('ibex-context load --constrained (compiled CLI)', () => {
  it('probes, mixes and reports the constrained share and packer choices in --json', async () => {
    const { runCli } = await import('../../helpers/cli.js');
    const fake = await startFake();
    // The synthetic source's agents are not the double's two: it gives them 4 candidates × 100 tokens.
    const res = await runCli([
      'load',
      '--addr',
      fake.addr,
      '-c',
      '2',
      '-d',
      '1',
      '-R',
      '100',
      '--constrained',
      '1',
      '--json',
    ]);
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    const report = JSON.parse(res.stdout) as { packing: Record<string, number>; requests: { ok: number } };
    expect(report.requests.ok).toBe(100);
    expect(report.packing.constrained_sent).toBe(100);
    expect(report.packing.budget_choice).toBe(100);
    const bad = await runCli(['load', '--addr', fake.addr, '--constrained', '2']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--constrained must be a number in 0..1');
  });
});

const OPENSSL = hasOpenssl();
if (!OPENSSL)
  console.warn('NOTICE: openssl not found; the load driver TLS test is skipped (install openssl)');

describe.skipIf(!OPENSSL)('the h2 driver over TLS (certificates made with openssl at test time)', () => {
  it('connects with --tls-ca semantics, sends the token, and refuses a server it cannot verify', async () => {
    const pki = makeServerPki('ibex-load-tls-');
    try {
      const seenAuth = new Set<string>();
      const grpc = createGrpcServer({
        assemble: async (req, ctx) => {
          for (const v of ctx.metadata.get('authorization')) seenAuth.add(String(v));
          return answer(req, 'L0');
        },
        logger: createLogger({ logLevel: 'silent' }),
        settings: { timeoutMs: 10_000, maxReceiveMessageBytes: 4 * 1024 * 1024, maxMetadataBytes: 16 * 1024 },
      });
      const creds = ServerCredentials.createSsl(null, [
        {
          private_key: readFileSync(path.join(pki, 'server.key')),
          cert_chain: readFileSync(path.join(pki, 'server.crt')),
        },
      ]);
      const port = await grpc.bind('127.0.0.1:0', creds);
      grpc.markServing();
      servers.push(grpc);
      const addr = `127.0.0.1:${port}`;
      const report = await runLoad({
        addr,
        tls: { ca: readFileSync(path.join(pki, 'ca.crt')) },
        token: 'tls-s3cret',
        connections: 2,
        rate: 50,
        durationS: 0.4,
        source: cyclingSource('tls', requests(4)),
      });
      expect(report.requests.ok).toBe(20);
      expect([...seenAuth]).toEqual(['Bearer tls-s3cret']);
      expect(JSON.stringify(report)).not.toContain('tls-s3cret');
      // The system roots do not know the test CA: the connection is refused before any call.
      await expect(
        runLoad({ addr, tls: true, connections: 1, rate: 10, durationS: 0.2, connectTimeoutMs: 2000 }),
      ).rejects.toThrow(/cannot connect to 127\.0\.0\.1:\d+/);
    } finally {
      rmSync(pki, { recursive: true, force: true });
    }
  });
});

describe('a lost connection', () => {
  it('counts calls after the server stops as UNAVAILABLE (never INTERNAL, never left hanging)', async () => {
    const fake = await startFake();
    const grpc = servers[servers.length - 1]!;
    setTimeout(() => void grpc.drain(0), 400);
    const report = await openLoop(fake.addr, 2, 100, 1, {
      timeoutMs: 500,
      source: cyclingSource('lost', requests(4)),
    });
    expect(report.requests.sent).toBe(100);
    expect(report.requests.unfinished).toBe(0);
    expect(Object.keys(report.requests.errors)).toEqual(['UNAVAILABLE']);
    expect(report.requests.ok).toBe(fake.tally.calls);
    expect(report.requests.ok).toBeGreaterThan(10);
    expect(report.requests.ok + report.requests.errors.UNAVAILABLE!).toBe(100);
  });
});
