/**
 * `npm run bench:pack`: packer latency on the five shapes of the core issue (o200k family, contents 40–4000
 * random characters, fixed seed), each timed with and without the branch-and-bound refinement in the same
 * run (p99 may grow by at most 20 %), and packer quality over the shared pack vectors and over 200
 * generated DP-path instances (bench/pack-quality.ts); then text measures (bench/text-measures.ts) and whole
 * CPU tasks over heavy memories (bench/cpu-task-heavy.ts). Figures, not gates. Writes bench/results/pack.json.
 * BENCH_TIME_MS sets the time per task (default 1500); QUALITY_INSTANCES the instance count (default 200).
 */
import { readFileSync } from 'node:fs';
import { Bench } from 'tinybench';
import { DEFAULT_DP_CELL_CEILING, DEFAULT_MAX_CONSECUTIVE_SKIPS } from '../src/config/settings.js';
import { pack } from '../src/pack/packer.js';
import { runJsonCommand } from '../src/tools/cli/json-commands.js';
import { cpuTaskFigures } from './cpu-task-heavy.js';
import { projectPath, writeResult } from './lib/paths.js';
import { packColumns, seededRandom, syntheticCandidates } from './lib/synthetic.js';
import { packQuality } from './pack-quality.js';
import { textMeasureFigures } from './text-measures.js';

interface Shape {
  case: string;
  n: number;
  budget: number;
  note: string;
  allFit?: boolean;
}

const SHAPES: Shape[] = [
  { case: 'a', n: 70, budget: 8000, note: 'n=70, budget 8000' },
  { case: 'b', n: 70, budget: 100_000, note: 'n=70, budget 100000 (70 × 6251 table)' },
  { case: 'c', n: 30, budget: 185_904, note: 'n=30, budget 185904' },
  { case: 'd', n: 30, budget: 185_904, note: 'all fit: n=30, tokens sum below the budget', allFit: true },
  { case: 'e', n: 200, budget: 100_000, note: 'greedy fallback, n=200, budget 100000' },
];

function packerQuality() {
  const file = projectPath('test/vectors/pack.json');
  const { vectors } = JSON.parse(readFileSync(file, 'utf8')) as {
    vectors: { input: unknown; expect: { reference: { path: string }; optimum_score: number } }[];
  };
  const ratios: number[] = [];
  for (const v of vectors) {
    if (v.expect.reference.path !== 'dp' || v.expect.optimum_score <= 0) continue;
    const out = runJsonCommand('pack', v.input) as { total_score: number };
    ratios.push(out.total_score / v.expect.optimum_score);
  }
  const mean = ratios.reduce((a, b) => a + b, 0) / ratios.length;
  return { dp_instances: ratios.length, mean_ratio: mean, min_ratio: Math.min(...ratios) };
}

async function main() {
  const time = Number(process.env.BENCH_TIME_MS ?? 1500);
  const bench = new Bench({ time, warmupTime: 300, retainSamples: false });
  const rows: {
    case: string;
    n: number;
    budget: number;
    note: string;
    token_sum: number;
    path: string;
    source: string;
    cells: number;
  }[] = [];
  for (const shape of SHAPES) {
    // Case d keeps contents short so that the token sum stays below the budget.
    const candidates = syntheticCandidates(0x1bec + shape.n, shape.n, 40, shape.allFit ? 400 : 4000);
    const cols = packColumns(candidates, 'chars_div_4');
    const input = {
      ...cols,
      budget: shape.budget,
      dpCellCeiling: DEFAULT_DP_CELL_CEILING,
      maxConsecutiveSkips: DEFAULT_MAX_CONSECUTIVE_SKIPS,
    };
    const probe = pack(input);
    const sum = cols.tokens.reduce((a, b) => a + b, 0);
    // Interleaved so both variants see the same machine load; `before` is the packer without the
    // branch-and-bound (searchNodeLimit 0), everything else equal.
    const before = { ...input, searchNodeLimit: 0 };
    bench.add(`${shape.case}:before`, () => {
      pack(before);
    });
    bench.add(shape.case, () => {
      pack(input);
    });
    rows.push({
      case: shape.case,
      n: shape.n,
      budget: shape.budget,
      note: shape.note,
      token_sum: sum,
      path: probe.path,
      source: probe.source,
      cells: probe.cells,
    });
  }
  // Case f: the search's worst case, scores proportional to size (strongly correlated, where the
  // branch-and-bound bound is weakest): it stops at its node limit, so this bounds what it can add.
  {
    const rand = seededRandom(7);
    const n = 120;
    const tokens = Int32Array.from({ length: n }, () => 100 + Math.floor(rand() * 900));
    const input = {
      ids: Array.from({ length: n }, (_, i) => `m${String(i).padStart(3, '0')}`),
      scores: Float64Array.from(tokens, (t) => (t + 100) / 1100),
      tokens,
      budget: 20_000,
      dpCellCeiling: DEFAULT_DP_CELL_CEILING,
      maxConsecutiveSkips: DEFAULT_MAX_CONSECUTIVE_SKIPS,
    };
    const before = { ...input, searchNodeLimit: 0 };
    bench.add('f:before', () => {
      pack(before);
    });
    bench.add('f', () => {
      pack(input);
    });
    const probe = pack(input);
    rows.push({
      case: 'f',
      n,
      budget: input.budget,
      note: 'worst case of the search: n=120, scores ∝ tokens, budget 20000',
      token_sum: tokens.reduce((a, b) => a + b, 0),
      path: probe.path,
      source: probe.source,
      cells: probe.cells,
    });
  }
  await bench.run();
  const latency = (name: string) => {
    const task = bench.tasks.find((t) => t.name === name)!;
    return (task.result as { latency: { p50: number; p99: number; samplesCount: number } }).latency;
  };
  const us = (ms: number) => Math.round(ms * 1000 * 10) / 10;
  const cases = rows.map((row) => {
    const lat = latency(row.case);
    const before = latency(`${row.case}:before`);
    return {
      ...row,
      p50_us: us(lat.p50),
      p99_us: us(lat.p99),
      samples: lat.samplesCount,
      before_p50_us: us(before.p50),
      before_p99_us: us(before.p99),
      p50_ratio: Math.round((lat.p50 / before.p50) * 1000) / 1000,
      p99_ratio: Math.round((lat.p99 / before.p99) * 1000) / 1000,
    };
  });
  const quality = packerQuality();
  const generated = packQuality(0x12, Number(process.env.QUALITY_INSTANCES ?? 200), [
    DEFAULT_DP_CELL_CEILING,
    50,
  ]);
  // Text measures (branch wire): a separate block of figures, target ≤ 1 ns per UTF-16 unit.
  const textMeasures = await textMeasureFigures(Math.min(time, 500));
  // Whole CPU tasks over heavy memories: where the text measures add up.
  const cpuTasks = await cpuTaskFigures(Math.min(time, 1000));
  const result = {
    generated_at: new Date().toISOString(),
    node: process.version,
    cases,
    quality,
    generated_quality: generated,
    text_measures: textMeasures,
    cpu_task_heavy: cpuTasks,
  };
  writeResult('pack', result);
  console.table(
    cases.map((c) => ({
      case: c.case,
      n: c.n,
      budget: c.budget,
      path: c.path,
      token_sum: c.token_sum,
      p50_us: c.p50_us,
      p99_us: c.p99_us,
      before_p50_us: c.before_p50_us,
      before_p99_us: c.before_p99_us,
      p50_ratio: c.p50_ratio,
      p99_ratio: c.p99_ratio,
      samples: c.samples,
    })),
  );
  console.table(
    generated.rows.map((r) => ({
      dp_cell_ceiling: r.dp_cell_ceiling,
      algorithm: r.algorithm,
      instances: r.instances,
      mean: r.mean.toFixed(5),
      min: r.min.toFixed(4),
      below_0999: r.below_0999,
    })),
  );
  console.log(`instances where ours < ADR-0069: ${generated.below_reference}`);
  console.log(
    `quality over ${quality.dp_instances} DP-path vectors: mean ${quality.mean_ratio.toFixed(6)}, min ${quality.min_ratio.toFixed(6)} of the optimum`,
  );
  console.table(textMeasures);
  console.table(cpuTasks);
  console.log('wrote bench/results/pack.json');
}

await main();
