/**
 * `npm run bench:pack`: packer latency on the five shapes of the core issue (o200k family, contents 40–4000
 * random characters, fixed seed) and packer quality over the shared pack vectors. Figures, not gates.
 * Writes bench/results/pack.json.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { Bench } from 'tinybench';
import { runJsonCommand } from '../src/cli/json-commands.js';
import { DEFAULT_DP_CELL_CEILING, DEFAULT_MAX_CONSECUTIVE_SKIPS } from '../src/config/settings.js';
import { pack } from '../src/pack/packer.js';
import { projectPath } from './lib/paths.js';
import { packColumns, syntheticCandidates } from './lib/synthetic.js';
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
  await bench.run();
  const cases = rows.map((row, i) => {
    const task = bench.tasks[i]!;
    const r = task.result as { latency?: { p50: number; p99: number; samplesCount: number } };
    const lat = r.latency!;
    return {
      ...row,
      p50_us: Math.round(lat.p50 * 1000 * 10) / 10,
      p99_us: Math.round(lat.p99 * 1000 * 10) / 10,
      samples: lat.samplesCount,
    };
  });
  const quality = packerQuality();
  // Text measures (issue 9 item 5, branch wire): a separate block of figures, target ≤ 1 ns per UTF-16 unit.
  const textMeasures = await textMeasureFigures(Math.min(time, 500));
  const result = {
    generated_at: new Date().toISOString(),
    node: process.version,
    cases,
    quality,
    text_measures: textMeasures,
  };
  mkdirSync(projectPath('bench/results'), { recursive: true });
  writeFileSync(projectPath('bench/results/pack.json'), `${JSON.stringify(result, null, 2)}\n`);
  console.table(
    cases.map((c) => ({
      case: c.case,
      n: c.n,
      budget: c.budget,
      path: c.path,
      token_sum: c.token_sum,
      p50_us: c.p50_us,
      p99_us: c.p99_us,
      samples: c.samples,
    })),
  );
  console.log(
    `quality over ${quality.dp_instances} DP-path vectors: mean ${quality.mean_ratio.toFixed(6)}, min ${quality.min_ratio.toFixed(6)} of the optimum`,
  );
  console.table(textMeasures);
  console.log('wrote bench/results/pack.json');
}

await main();
