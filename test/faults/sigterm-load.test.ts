/**
 * Process: SIGTERM to a real `serve` process in the middle of an open-loop load
 * (`runLoad`, 200 rps for 2 s, memory service on loopback with 100 ms latency so that some 20 calls are
 * in flight at any time). Every call sent before the signal is answered OK and in full; calls sent after
 * it are answered OK (accepted before the drain closed the door) or refused UNAVAILABLE, never anything
 * else; the process exits 0. (test/e2e/sigterm.e2e.test.ts covers 8 calls and no load.)
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { status } from '@grpc/grpc-js';
import { describe, expect, it } from 'vitest';
import { EmbeddedStore } from '../../src/retrieval/sqlite/embedded-store.js';
import { runLoad } from '../../src/tools/client/load-driver.js';
import { cyclingSource } from '../../src/tools/client/request-source.js';
import { type MemoryServerHandle, startMemoryServer } from '../../src/tools/memory-server/server.js';
import { memories, request, tenant } from '../e2e/harness.js';
import { callTracker, type ServeChild, spawnServe } from './helpers.js';

const N = 5;

describe('serve process under load', () => {
  it('SIGTERM mid-load: every call sent before it answered OK and whole, the rest OK or UNAVAILABLE, exit 0', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ibex-faults-sigterm-'));
    const store = EmbeddedStore.open(path.join(dir, 'memory.db'));
    const tenants = Array.from({ length: 4 }, () => tenant());
    for (const t of tenants) store.upsertMemories(memories(t.org, t.agent, N));
    let memory: MemoryServerHandle | undefined;
    let child: ServeChild | undefined;
    try {
      memory = await startMemoryServer({ token: 'tok', store, port: 0, latencyMs: 100 });
      child = await spawnServe({
        IBEX_CONTEXT_EMBEDDED_DB: path.join(dir, 'svc.db'),
        IBEX_CONTEXT_MEMORY_BASE_URL: memory.url,
        IBEX_CONTEXT_MEMORY_API_TOKEN: 'tok',
        IBEX_CONTEXT_TIMEOUT: '5000',
        IBEX_CONTEXT_DEADLINE_MS: '2000',
        IBEX_CONTEXT_HOT_TIMEOUT_MS: '2000',
        IBEX_CONTEXT_COLD_TIMEOUT_MS: '2000',
        IBEX_CONTEXT_POOL_MAX_THREADS: '2',
        // The slow memory service keeps ~20 calls in flight by design; this test is about the drain, not
        // about load shedding.
        IBEX_CONTEXT_MAX_IN_FLIGHT: '1000',
      });
      const tracker = callTracker();
      const requests = tenants.map((t, i) => request(t, { request_id: `load-${i}` }));
      // Calls started before `signalAt` are on the wire before the signal is sent: the client's HTTP/2
      // frames are flushed from a later check phase of its loop, so the kill waits two setImmediate hops.
      // (A call started in the same tick as the kill could otherwise reach the server after its GOAWAY:
      // refused unprocessed, which HTTP/2 marks as safe to retry, but not "sent before the drain".)
      let signalAt = Number.POSITIVE_INFINITY;
      const signal = setTimeout(() => {
        signalAt = performance.now();
        setImmediate(() => setImmediate(() => child!.kill('SIGTERM')));
      }, 1000);
      const report = await runLoad({
        addr: child.grpcAddr,
        rate: 200,
        durationS: 2,
        connections: 4,
        timeoutMs: 5000,
        source: cyclingSource('sigterm', requests),
        channelOptions: tracker.channelOptions,
      });
      clearTimeout(signal);
      const code = await child.exited;

      const calls = tracker.records;
      const before = calls.filter((c) => c.sentAt < signalAt);
      const after = calls.filter((c) => c.sentAt >= signalAt);
      // The signal really landed mid-load: calls before and after it, and a good number in flight.
      expect(before.length).toBeGreaterThan(100);
      expect(after.length).toBeGreaterThan(50);
      expect(before.filter((c) => c.doneAt > signalAt).length).toBeGreaterThanOrEqual(5);
      // Nothing sent before the drain began is lost.
      expect(before.filter((c) => c.code !== status.OK).map((c) => `${c.code} ${c.details}`)).toEqual([]);
      expect(before.filter((c) => c.level !== 'L0')).toEqual([]);
      expect(report.requests.unfinished).toBe(0);
      // Later calls are answered or refused cleanly.
      for (const c of after) {
        if (c.code === status.OK) expect(c.level).toBe('L0');
        else {
          expect(c.code).toBe(status.UNAVAILABLE);
          // Refused at the connection (no call was cut mid-way): the listener is closed or closing.
          expect(c.details).toMatch(/ECONNREFUSED|No connection established|refused|GOAWAY/i);
        }
      }
      expect(report.requests.sent).toBe(calls.length);
      expect(code).toBe(0);
      expect(child.log()).toContain('signal received');
      expect(child.log()).toContain('ibex-context stopped');
      // The drain was not cut short: no accepted call was force-closed.
      expect(child.log()).toMatch(/"forced":false[^\n]*gRPC server stopped/);
    } finally {
      child?.kill('SIGKILL');
      await memory?.close();
      store.close();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
