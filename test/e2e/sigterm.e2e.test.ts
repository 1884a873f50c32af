/**
 * `ibex-context serve` as a real process: SIGTERM with calls in flight ⇒ every call answered, exit 0.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { status } from '@grpc/grpc-js';
import { describe, expect, it } from 'vitest';
import { type MemoryServerHandle, startMemoryServer } from '../../src/memory-server/server.js';
import { EmbeddedStore } from '../../src/retrieval/embedded-store.js';
import { CLI, ROOT } from '../helpers/cli.js';
import { createTestClient } from '../helpers/grpc-client.js';
import { memories, request, tenant } from './harness.js';

describe('serve process', () => {
  it('drains on SIGTERM: in-flight calls are answered and the exit code is 0', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ibex-sigterm-'));
    const t = tenant();
    const store = EmbeddedStore.open(path.join(dir, 'memory.db'));
    store.upsertMemories(memories(t.org, t.agent, 5));
    // Slow memory service: calls stay in flight long enough for the signal to land among them.
    const memory: MemoryServerHandle = await startMemoryServer({
      token: 'tok',
      store,
      port: 0,
      latencyMs: 400,
    });
    const child = spawn(process.execPath, [CLI, 'serve'], {
      cwd: ROOT,
      env: {
        ...process.env,
        IBEX_CONTEXT_GRPC_ADDR: '127.0.0.1:0',
        IBEX_CONTEXT_ADMIN_ADDR: '127.0.0.1:0',
        IBEX_CONTEXT_EMBEDDED_DB: path.join(dir, 'svc.db'),
        IBEX_CONTEXT_MEMORY_BASE_URL: memory.url,
        IBEX_CONTEXT_MEMORY_API_TOKEN: 'tok',
        IBEX_CONTEXT_TIMEOUT: '3000',
        IBEX_CONTEXT_DEADLINE_MS: '1000',
        IBEX_CONTEXT_HOT_TIMEOUT_MS: '1000',
        IBEX_CONTEXT_COLD_TIMEOUT_MS: '1000',
        IBEX_CONTEXT_POOL_MAX_THREADS: '1',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let log = '';
    const [addr, admin] = await new Promise<[string, string]>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`serve did not start:\n${log}`)), 15_000);
      child.stdout.setEncoding('utf8').on('data', (d: string) => {
        log += d;
        const m = /"grpc":"([^"]+)","admin":"([^"]+)".*ibex-context serving/.exec(log);
        if (m) {
          clearTimeout(timer);
          resolve([m[1]!, m[2]!]);
        }
      });
      child.on('exit', (code) => reject(new Error(`serve exited ${code}:\n${log}`)));
    });
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const client = createTestClient(addr);
    try {
      const calls = Array.from({ length: 8 }, () => client.assemble(request(t), { deadlineMs: 5000 }));
      // Signal only once every call is in flight on the server (a loaded machine may be slow to send).
      for (let i = 0; i < 100; i++) {
        const metrics = await fetch(`${admin}/metrics`).then((r) => r.text());
        if (/ibex_context_in_flight_calls 8\b/.test(metrics)) break;
        await new Promise((r) => setTimeout(r, 20));
      }
      child.kill('SIGTERM');
      const results = await Promise.all(calls);
      expect(results.map((r) => r.status.code)).toEqual(Array(8).fill(status.OK));
      for (const r of results) expect(r.response!.memories_included).toBe(5);
      expect(await exited).toBe(0);
      expect(log).toContain('signal received');
      expect(log).toContain('ibex-context stopped');
    } finally {
      client.close();
      child.kill('SIGKILL');
      await memory.close();
      store.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
