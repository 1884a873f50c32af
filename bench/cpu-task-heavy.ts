/**
 * CPU-stage figures for `npm run bench:pack`: one whole CPU task (`runCpuTask`, as a pool
 * thread runs it: budget, every candidate's wrapped-block cost, pack, format) over 20 memories at the
 * default content cap (`IBEX_CONTEXT_MAX_MEMORY_CHARS`, 65,536 code points: longer ones are dropped
 * `oversize` before the CPU stage, contract.md §4.1) and over a LoCoMo-sized call, ms per task. Figures, not gates. The batch is encoded
 * once per sample outside the timing: in the service the main thread encodes it, and the contents of
 * store and memory-service hits arrive as UTF-8 bytes already. Run alone for an A/B of two builds:
 * `node dist/bench/cpu-task-heavy.js [rounds]` prints the p50 and p99 of each shape per round (default 4).
 */
import { pathToFileURL } from 'node:url';
import { Bench } from 'tinybench';
import { CapabilityCatalog } from '../src/budget/catalog.js';
import { encodeCandidates } from '../src/cpu-stage/cpu-batch-encode.js';
import { type CpuCandidate, type CpuTaskInput, runCpuTask } from '../src/cpu-stage/cpu-task.js';
import { monotonicNow } from '../src/util/clock.js';

/** A figure row: ms per CPU task at p50 and p99. */
export interface CpuTaskRow {
  shape: string;
  candidates: number;
  content_bytes: number;
  selected: number;
  p50_ms: number;
  p99_ms: number;
  samples: number;
}

function candidate(i: number, content: string): CpuCandidate {
  return {
    memory_id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`,
    category: 'factual',
    content,
    score: 1 - i / 100,
    similarity: 0.5,
    confidence: 0.5,
    rank: i + 1,
    tokens: 0,
  };
}

/**
 * The shapes: 20 memories of 65,536 code points each (the default cap) as dense HTML markup, CJK text and
 * emoji (two UTF-16 units and four UTF-8 bytes each), and 30 LoCoMo-sized turns.
 */
function shapes(): { name: string; candidates: CpuCandidate[] }[] {
  const CAP = 65_536;
  const html = '<div class="row"><a href="/x?a=1&b=2">link</a> &amp; <b>bold</b> text</div>\n';
  const cjk = '用户喜欢喝绿茶';
  const turn = 'Caroline: I went to the LGBTQ support group yesterday and it was so powerful';
  const twenty = (content: string) => Array.from({ length: 20 }, (_, i) => candidate(i, content));
  return [
    {
      name: '20 × 65,536 HTML chars',
      candidates: twenty(html.repeat(Math.ceil(CAP / html.length)).slice(0, CAP)),
    },
    {
      name: '20 × 65,536 CJK chars',
      candidates: twenty(cjk.repeat(Math.ceil(CAP / cjk.length)).slice(0, CAP)),
    },
    { name: '20 × 65,536 emoji', candidates: twenty('😀'.repeat(CAP)) },
    {
      name: '30 LoCoMo-sized turns',
      candidates: Array.from({ length: 30 }, (_, i) => candidate(i, `${turn}, ${i}.`)),
    },
  ];
}

/**
 * Times {@link runCpuTask} with a `gpt-4o` budget model (chars_div_4) on each shape.
 * @param timeMs tinybench time per task, ms.
 */
export async function cpuTaskFigures(timeMs: number): Promise<CpuTaskRow[]> {
  const budgetModel = CapabilityCatalog.create().resolve('gpt-4o');
  const bench = new Bench({ time: timeMs, warmupTime: 300, retainSamples: false });
  const list = shapes();
  const selected: number[] = [];
  const encode = (candidates: CpuCandidate[]): CpuTaskInput =>
    encodeCandidates(candidates, {
      budget: 0,
      dpCellCeiling: 437_570,
      maxConsecutiveSkips: 5,
      nonce: 'bench-nonce-0123456789',
      directive: 'Answer briefly.',
      recentMessages: [],
      toolSchemas: [],
      deadline: monotonicNow() + 60_000,
      budgetModel,
      nonceBytes: 16,
    });
  for (const [k, shape] of list.entries()) {
    let input = encode(shape.candidates);
    selected[k] = runCpuTask(encode(shape.candidates)).selected.length;
    bench.add(shape.name, () => void runCpuTask(input), {
      beforeEach: () => {
        input = encode(shape.candidates);
      },
    });
  }
  await bench.run();
  return list.map((shape, k) => {
    const r = bench.tasks[k]!.result as { latency?: { p50: number; p99: number; samplesCount: number } };
    const lat = r.latency!;
    return {
      shape: shape.name,
      candidates: shape.candidates.length,
      content_bytes: shape.candidates.reduce((s, c) => s + Buffer.byteLength(c.content), 0),
      selected: selected[k]!,
      p50_ms: Math.round(lat.p50 * 1000) / 1000,
      p99_ms: Math.round(lat.p99 * 1000) / 1000,
      samples: lat.samplesCount,
    };
  });
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const rounds = Number(process.argv[2] ?? 4);
  for (let r = 0; r < rounds; r++) {
    for (const row of await cpuTaskFigures(Number(process.env.BENCH_TIME_MS ?? 1000))) {
      console.log(`round ${r + 1}  ${row.shape.padEnd(24)} p50 ${row.p50_ms} ms  p99 ${row.p99_ms} ms`);
    }
  }
}
