/**
 * `ibex-context serve` as a real process: SIGTERM with calls in flight ⇒ every call answered, exit 0; the
 * same for Ctrl-C under `npm start`, which delivers SIGINT twice (the terminal's and npm's forwarded copy).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { status } from '@grpc/grpc-js';
import { describe, expect, it, vi } from 'vitest';
import { spawnServe } from '../faults/helpers.js';
import { createTestClient } from '../helpers/grpc-client.js';
import { startMemoryFixture } from '../helpers/memory-fixture.js';
import { memories, request, tenant } from './harness.js';

/** Starts serve with 8 calls in flight, sends it `first`, then `more` once that one is handled, and checks the drain. */
async function drainsOn(first: NodeJS.Signals, ...more: NodeJS.Signals[]): Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ibex-sigterm-'));
  const t = tenant();
  // Slow memory service: calls stay in flight long enough for the signal to land among them.
  const fixture = await startMemoryFixture(memories(t.org, t.agent, 5), { token: 'tok', latencyMs: 400 });
  const serve = await spawnServe(
    {
      IBEX_CONTEXT_EMBEDDED_DB: path.join(dir, 'svc.db'),
      ...fixture.env,
      IBEX_CONTEXT_TIMEOUT: '3000',
      IBEX_CONTEXT_DEADLINE_MS: '1000',
      IBEX_CONTEXT_HOT_TIMEOUT_MS: '1000',
      IBEX_CONTEXT_COLD_TIMEOUT_MS: '1000',
      IBEX_CONTEXT_POOL_MAX_THREADS: '1',
    },
    15_000,
  );
  const client = createTestClient(serve.grpcAddr);
  try {
    const calls = Array.from({ length: 8 }, () => client.assemble(request(t), { deadlineMs: 5000 }));
    // Signal only once every call is in flight on the server (a loaded machine may be slow to send).
    for (let i = 0; i < 100; i++) {
      const metrics = await fetch(`${serve.adminUrl}/metrics`).then((r) => r.text());
      if (/ibex_context_in_flight_calls 8\b/.test(metrics)) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    // Each signal after the first once the first is handled: two signals sent back to back may reach the
    // process as one (the kernel keeps one pending signal of a kind).
    serve.kill(first);
    if (more.length > 0) {
      await vi.waitFor(() => expect(serve.log()).toContain('signal received'), {
        timeout: 5_000,
        interval: 5,
      });
      for (const signal of more) serve.kill(signal);
    }
    const results = await Promise.all(calls);
    expect(results.map((r) => r.status.code)).toEqual(Array(8).fill(status.OK));
    for (const r of results) expect(r.response!.memories_included).toBe(5);
    expect(await serve.exited).toBe(0);
    expect(serve.log()).toContain('signal received');
    expect(serve.log()).toContain('ibex-context stopped');
    if (more.length > 0) expect(serve.log()).toContain('still draining');
  } finally {
    client.close();
    serve.kill('SIGKILL');
    await fixture.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

describe('serve process', () => {
  it('drains on SIGTERM: in-flight calls are answered and the exit code is 0', async () => {
    await drainsOn('SIGTERM');
  });

  it('drains on a doubled SIGINT (Ctrl-C under npm start): in-flight calls answered, exit 0', async () => {
    await drainsOn('SIGINT', 'SIGINT');
  });
});
