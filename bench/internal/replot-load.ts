/**
 * `npm run bench:internal -- replot-load [-- <load.json>]`: redraws load.svg and load-errors.svg next to a
 * bench:load result without measuring again (the plots changed, the measurements did not).
 */

import { readFileSync } from 'node:fs';
import path from 'node:path';
import { runBenchMain } from '../lib/bench-run.js';
import type { StepRow } from '../lib/load-step.js';
import { projectPath } from '../lib/paths.js';
import { writeLoadCharts } from '../lib/plot.js';

interface LoadResult {
  machine: { cpus: number };
  config: { step_seconds: number; timeout_ms: number; p99_target_ms: number; pool_threads: number | null };
  data: { kind: string };
  steps: StepRow[];
}

async function main(argv: string[]): Promise<number> {
  const file = path.resolve(argv[0] ?? projectPath('bench/results/load.json'));
  const r = JSON.parse(readFileSync(file, 'utf8')) as LoadResult;
  const { svgFile, errorsSvgFile } = await writeLoadCharts(path.dirname(file), {
    rows: r.steps,
    stepSeconds: r.config.step_seconds,
    timeoutMs: r.config.timeout_ms,
    p99TargetMs: r.config.p99_target_ms,
    subtitle:
      `${r.data.kind.split('(')[0]} data, ${r.machine.cpus} CPUs shared by server and driver, ` +
      `pool ${r.config.pool_threads} threads, ${r.config.step_seconds} s per step`,
  });
  console.log(
    `wrote ${path.relative(process.cwd(), svgFile)} and ${path.relative(process.cwd(), errorsSvgFile)}`,
  );
  return 0;
}

runBenchMain(() => main(process.argv.slice(2)));
