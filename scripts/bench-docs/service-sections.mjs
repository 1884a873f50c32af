/** Sections of docs/benchmarks.md for one service: packing, the worker pool, load, overload, soak, tokens. */
import { fields, keyedRows, need, pct, round, table } from './format.mjs';

/** @type {import('./format.mjs').Section[]} */
export const SERVICE_SECTIONS = [
  {
    script: 'bench:pack',
    file: 'pack',
    title: 'Packer',
    render: (r) =>
      [
        'Packer time per call (µs), o200k, fixed seed, one thread:',
        '',
        table(
          ['case', 'shape', 'path', 'cells', 'p50 µs', 'p99 µs'],
          r.cases.map((c) => [c.case, c.note, c.path, c.cells, c.p50_us, c.p99_us]),
        ),
        '',
        `Quality on the vectors' DP instances: ${r.quality.dp_instances} instances, mean score ratio ` +
          `${round(r.quality.mean_ratio, 4)}, min ${round(r.quality.min_ratio, 4)} (1 = the optimum).`,
        '',
        'Quality on generated instances (score ÷ optimum):',
        '',
        table(
          ['dp_cell_ceiling', 'algorithm', 'instances', 'mean', 'min', 'below 0.999'],
          r.generated_quality.rows.map((q) => [
            q.dp_cell_ceiling,
            q.algorithm,
            q.instances,
            round(q.mean, 4),
            round(q.min, 4),
            q.below_0999,
          ]),
        ),
        '',
        'Whole CPU tasks (pack + format) as a pool thread runs them:',
        '',
        table(
          ['shape', 'selected', 'p50 ms', 'p99 ms'],
          r.cpu_task_heavy.map((c) => [c.shape, c.selected, c.p50_ms, c.p99_ms]),
        ),
      ].join('\n'),
  },
  {
    script: 'bench:pool',
    file: 'pool',
    title: 'Worker pool',
    render: (r) =>
      [
        `Pool of ${r.pool_threads} thread; typical assembly (n = ${r.overhead.shape.n}), µs:`,
        '',
        table(
          ['figure', 'p50', 'p99'],
          keyedRows(
            r.overhead,
            [
              ['inline (no pool)', 'inline'],
              ['through the pool', 'pool'],
              ['added by the pool', 'added'],
              ['cold pool', 'cold_pool'],
            ],
            ['p50_us', 'p99_us'],
          ),
        ),
        '',
        `Event-loop delay while large tasks (n = ${r.loop_delay.shape.n}) run, ms:`,
        '',
        table(
          ['where the task runs', 'p99', 'max'],
          keyedRows(
            r.loop_delay,
            [
              ['pool', 'pool'],
              ['inline', 'inline'],
              ['idle (no task)', 'idle'],
            ],
            ['p99_ms', 'max_ms'],
          ),
        ),
      ].join('\n'),
  },
  {
    script: 'bench:load',
    file: 'load',
    title: 'Load (embedded store, LoCoMo)',
    render: (r) =>
      [
        `${r.data?.kind ?? ''}: ${r.data?.agents} agents, ${r.data?.memories} memories; ` +
          `${pct(r.config.constrained_share)} of calls constrained; ${r.config.connections} connections, ` +
          `${r.config.pool_threads} pool threads, driver ${r.config.driver}. Latency from send, ms.`,
        '',
        table(
          [
            'rate',
            'achieved',
            'p50',
            'p99',
            'p99.9',
            'errors',
            'degraded',
            'answers after D',
            'loop delay p99',
            'server CPU ms/call',
          ],
          r.steps.map((s) => [
            ...fields(s, ['rate', 'achieved_rps', 'p50_ms', 'p99_ms', 'p99_9_ms', 'errors', 'degraded']),
            s.server?.late_answers ?? '—',
            s.server?.event_loop_delay_ms?.p99,
            s.cpu_ms_per_call
              ? round(s.cpu_ms_per_call.server_main + s.cpu_ms_per_call.server_other, 1)
              : '—',
          ]),
        ),
        ...(r.overload
          ? [
              '',
              `At 1.5× the saturation rate (${r.overload.rate} req/s for ${r.overload.seconds} s): ` +
                `${r.overload.errors} errors, ${pct(r.overload.l0_share)} L0, ${pct(r.overload.shed_share)} shed, ` +
                `p99 ${round(r.overload.p99_ms, 1)} ms, ${r.overload.late_answers} answers after D; every answer L0 ` +
                `again ${r.overload.seconds_back_to_l0 === null ? 'not within the 5 s watched' : `after ${r.overload.seconds_back_to_l0} s`} at ${r.overload.recovery_rate} req/s.`,
            ]
          : []),
      ].join('\n'),
  },
  {
    script: 'bench:store',
    file: 'store',
    title: 'Embedded store reads',
    render: (r) => {
      const b = need(r, 'branch_search_600');
      return [
        `${r.dataset.memories} LoCoMo memories, ${r.dataset.agents} agents, ${r.dataset.queries} QA questions; ` +
          `SQLite ${r.sqlite}. µs per call (tinybench p50 / p99).`,
        '',
        table(
          ['read', 'p50 µs', 'p99 µs'],
          need(r, 'tasks').map((t) => [t.task, t.p50_us, t.p99_us]),
        ),
        '',
        `The retrieval branch's search for an unlimited call (600 candidates, neighbours of the 5 best; ` +
          `${b.hits_per_search} hits a search on average), interleaved over ${b.passes} passes: ` +
          `wire-shaped hits then validation ${b.wire_then_validate.median_us} µs median, ` +
          `hits built directly ${b.search_hits.median_us} µs.`,
      ].join('\n');
    },
  },
  {
    script: 'bench:internal -- pool-sweep',
    file: 'pool-sweep',
    title: 'Pool sweep (threads × rate)',
    render: (r) =>
      [
        table(
          ['threads', 'rate', 'achieved', 'p50 ms', 'p99 ms', 'errors', 'degraded', 'CPU ms/call'],
          // A grid row's fields are its columns, in order (pool-sweep-grid.test.ts pins them).
          r.grid.map((g) => Object.values(g)),
        ),
        '',
        `Recommendation: ${r.recommendation.threads} thread(s); highest rate with p99 ≤ 20 ms: ` +
          `${r.recommendation.max_rate_p99_20ms} req/s.`,
      ].join('\n'),
  },
  {
    script: 'bench:overload',
    file: 'overload',
    title: 'Overload (twice the saturation rate)',
    render: (r) =>
      [
        `Saturation ${r.saturation.rate} req/s; offered ${r.offered_rps}, achieved ${r.achieved_rps}; ` +
          `${r.settings.data}.`,
        '',
        table(
          ['sent', 'answered', 'within deadline', 'full answers', 'L1', 'L2', 'p50 ms', 'p99 ms', 'p99.9 ms'],
          [
            [
              r.figures.sent,
              r.figures.answered,
              pct(r.figures.within_deadline_share),
              r.figures.full_answers,
              r.figures.degraded_answers.L1,
              r.figures.degraded_answers.L2,
              ...fields(r.figures.latency_from_send_ms, ['p50', 'p99', 'p99_9']),
            ],
          ],
        ),
        '',
        `Errors by code: ${JSON.stringify(r.figures.errors_by_code)}.`,
      ].join('\n'),
  },
  {
    script: 'bench:soak',
    file: 'soak',
    title: 'Soak',
    render: (r) => {
      const last = r.samples_every_10s.at(-1);
      return [
        `${r.settings.minutes} minutes at ${r.rate_rps} req/s (half the saturation rate); ${r.settings.data}.`,
        '',
        table(
          ['sent', 'OK', 'L1', 'L2', 'p50 ms', 'p99 ms', 'p99.9 ms', 'max ms', 'RSS at end MB'],
          [
            [
              r.totals.sent,
              r.totals.ok,
              r.totals.levels.L1,
              r.totals.levels.L2,
              ...fields(r.totals.latency_ms, ['p50', 'p99', 'p99_9', 'max']),
              last?.rss_mb,
            ],
          ],
        ),
        '',
        `Errors by code: ${JSON.stringify(r.totals.errors)}.`,
      ].join('\n');
    },
  },
  {
    script: 'bench:exact-tokens',
    file: 'exact-tokens',
    title: 'Exact token counts against estimates',
    render: (r) =>
      table(
        ['tokens', 'calls', 'OK', 'L0', 'L1', 'L2', 'server CPU ms/call', 'p50 ms', 'p99 ms'],
        (Array.isArray(r) ? r : r.runs).map((x) => [
          x.label,
          x.calls,
          x.ok,
          x.levels.L0,
          x.levels.L1,
          x.levels.L2,
          x.server_cpu_ms_per_call,
          x.client_latency_ms.p50,
          x.client_latency_ms.p99,
        ]),
      ),
  },
];
