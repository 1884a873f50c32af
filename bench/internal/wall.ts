/**
 * `npm run bench:internal -- wall`: how late the retrieval wall really ends a call on this machine.
 * The tests check the deadline logic on a fake clock; the real overshoot past the wall (timer lateness,
 * event-loop load) is a figure measured here, not a test bound.
 *
 * A dev memory server on loopback that never answers (latency 60 s), the embedded directive, and
 * `retrieve` with a 40 ms wall (hot 15 ms, cold 45 ms, directive 5 ms): BENCH_WALL_SAMPLES calls
 * (default 200), one at a time. Reports p50 / p99 / max of (elapsed − wall) in ms and writes
 * bench/results/wall.json. Run it on a quiet machine for the figure that matters.
 */

import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { HttpMemorySource } from '../../src/retrieval/http/memory-http.js';
import { retrieve } from '../../src/retrieval/retrieve.js';
import { EmbeddedDirectiveSource } from '../../src/retrieval/sources.js';
import { EmbeddedStore } from '../../src/retrieval/sqlite/embedded-store.js';
import { percentilesOf } from '../../src/tools/client/stats.js';
import { startMemoryServer } from '../../src/tools/memory-server/server.js';
import { writeResult } from '../lib/paths.js';

const WALL_MS = 40;
const samples = Number(process.env.BENCH_WALL_SAMPLES ?? 200);

const dir = mkdtempSync(path.join(os.tmpdir(), 'ibex-bench-wall-'));
const store = EmbeddedStore.open(path.join(dir, 'store.db'));
const token = `bench-${randomUUID()}`;
const server = await startMemoryServer({ store, token, port: 0, latencyMs: 60_000 });
const memory = new HttpMemorySource({ baseUrl: server.url, token, hotTimeoutMs: 1000, coldTimeoutMs: 1000 });
const directive = new EmbeddedDirectiveSource(store);
const sources = {
  memory,
  directive,
  kind: { memory: 'http', directive: 'embedded' },
  close: async () => {},
} as const;
const overshoot: number[] = [];
try {
  for (let i = 0; i < samples; i++) {
    const started = performance.now();
    const r = await retrieve(
      sources,
      { orgId: randomUUID(), agentId: randomUUID(), query: 'sailing', skipHot: false, skipCold: false },
      { wallMs: WALL_MS, directiveMs: 5, hotMs: 15, coldMs: 45 },
      new AbortController().signal,
    );
    if (r.branches[2]!.detail !== 'outer_deadline') throw new Error(`cold ended by ${r.branches[2]!.detail}`);
    overshoot.push(performance.now() - started - WALL_MS);
  }
} finally {
  await memory.close();
  await server.close();
  store.close();
  rmSync(dir, { recursive: true, force: true });
}
overshoot.sort((a, b) => a - b);
const overshootAt = percentilesOf(overshoot);
const result = {
  wall_ms: WALL_MS,
  samples,
  overshoot_ms: {
    p50: Number(overshootAt(50).toFixed(3)),
    p99: Number(overshootAt(99).toFixed(3)),
    max: Number(overshoot[overshoot.length - 1]!.toFixed(3)),
  },
  cpus: os.availableParallelism(),
  loadavg_1m: os.loadavg()[0],
};
writeResult('wall', result);
console.log(JSON.stringify(result));
