/**
 * What the dialogue neighbours (src/retrieval/neighbours.ts) add to one cold search of the embedded store:
 * every LoCoMo question (categories 1–4) searched on a store holding the ingested conversations, in-process
 * and synchronously as a store-read thread runs it, at the limits the service asks for at memory budgets
 * of 500, 2,000 and 4,000 tokens (candidate-limit.ts: 25, 100, 200), with 0 and with the default count of
 * hits whose neighbours are read. Alternating rounds, the fastest of 5 rounds per setting; mean and p99 per
 * search, µs.
 *
 * Usage: node dist/bench/neighbour-cost.js [--dataset DIR] [--out neighbour-cost]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { DEFAULT_NEIGHBOUR_HITS } from '../src/config/ranking-settings.js';
import { EmbeddedStore } from '../src/retrieval/sqlite/embedded-store.js';
import { LOCOMO_ORG_ID, readLocomo } from '../src/tools/locomo/dataset.js';
import { ingestLocomo } from '../src/tools/locomo/ingest.js';
import { machineInfo } from './lib/bench-run.js';
import { writeResult } from './lib/paths.js';

const LIMITS = [25, 100, 200];
const ROUNDS = 5;

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const flag = (name: string, fallback: string) => {
    const at = argv.indexOf(name);
    return at >= 0 && argv[at + 1] !== undefined ? argv[at + 1]! : fallback;
  };
  const convs = await readLocomo(flag('--dataset', '/work/shared/datasets/locomo10'));
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ibex-neighbours-'));
  const store = EmbeddedStore.open(path.join(dir, 'n.db'));
  try {
    await ingestLocomo(store, convs, LOCOMO_ORG_ID, { db: store.path });
    store.optimize();
    const questions = convs.flatMap((c) =>
      c.qa
        .filter((q) => (q.category ?? 0) >= 1 && (q.category ?? 0) <= 4)
        .map((q) => [c.agentId, q.question] as const),
    );
    const rows: unknown[] = [];
    for (const limit of LIMITS) {
      const best = new Map<number, { mean: number; p99: number }>();
      for (let round = 0; round < ROUNDS; round++) {
        for (const neighbours of [0, DEFAULT_NEIGHBOUR_HITS]) {
          const times: number[] = [];
          for (const [agent, q] of questions) {
            const t0 = performance.now();
            store.search(LOCOMO_ORG_ID, agent, q, { limit, neighbours });
            times.push((performance.now() - t0) * 1000);
          }
          times.sort((a, b) => a - b);
          const mean = times.reduce((a, b) => a + b, 0) / times.length;
          const p99 = times[Math.floor(0.99 * (times.length - 1))]!;
          const was = best.get(neighbours);
          if (was === undefined || mean < was.mean) best.set(neighbours, { mean, p99 });
        }
      }
      const off = best.get(0)!;
      const on = best.get(DEFAULT_NEIGHBOUR_HITS)!;
      const row = {
        limit,
        searches: questions.length,
        without_us: { mean: Math.round(off.mean), p99: Math.round(off.p99) },
        with_us: { mean: Math.round(on.mean), p99: Math.round(on.p99) },
        added_mean_us: Math.round(on.mean - off.mean),
      };
      rows.push(row);
      console.log(JSON.stringify(row));
    }
    const file = writeResult(flag('--out', 'neighbour-cost'), {
      note: 'Embedded-store search with and without dialogue neighbours, in-process, LoCoMo questions; µs per search.',
      generated_at: new Date().toISOString(),
      node: process.version,
      machine: machineInfo(),
      neighbour_hits: DEFAULT_NEIGHBOUR_HITS,
      rows,
    });
    console.log(`wrote ${file}`);
  } finally {
    store.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
