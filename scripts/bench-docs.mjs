#!/usr/bin/env node
/**
 * Writes docs/benchmarks.md from bench/results/*.json: one current figure table per product bench, so the
 * figures a reader sees are the ones the benches stored, never hand-typed. `npm run docs:bench` rewrites
 * the file; test/docs/benchmarks-doc.test.ts fails when the committed file differs from this output.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** @param {string} name @returns {any} the parsed result file, or undefined when none is committed */
function result(name) {
  const file = path.join(ROOT, 'bench', 'results', `${name}.json`);
  return existsSync(file) ? JSON.parse(readFileSync(file, 'utf8')) : undefined;
}

/** @param {unknown} v */
const cell = (v) => (v === undefined || v === null ? '–' : String(v));

/**
 * A Markdown table with its columns padded as the repository's formatter (Biome) pads them, so the
 * generated page passes `npm run lint` unchanged.
 * @param {string[]} head @param {unknown[][]} rows
 */
function table(head, rows) {
  const lines = [head, ...rows.map((r) => r.map(cell))];
  const widths = head.map((_, i) => Math.max(3, ...lines.map((l) => [...l[i]].length)));
  const line = (l) => `| ${l.map((c, i) => c + ' '.repeat(widths[i] - [...c].length)).join(' | ')} |`;
  return [
    line(lines[0]),
    `| ${widths.map((w) => '-'.repeat(w)).join(' | ')} |`,
    ...lines.slice(1).map(line),
  ].join('\n');
}

/** @param {any} r a result with `machine` (and `generated_at`/`date`/`node`) */
function runLine(r) {
  const m = r.machine;
  const when = (r.generated_at ?? r.date ?? '').slice(0, 10);
  const parts = [];
  if (m) parts.push(`${m.cpus} × ${m.cpu_model}, ${m.memory_gb} GiB`);
  else if (r.cpus) parts.push(`${r.cpus} cores`);
  if (m?.loadavg_1m_at_start !== undefined) parts.push(`load average ${m.loadavg_1m_at_start} at start`);
  if (r.load_average_1m !== undefined) parts.push(`load average ${r.load_average_1m}`);
  if (r.node) parts.push(`Node ${r.node}`);
  if (when) parts.push(`run ${when}`);
  return parts.length ? `Run: ${parts.join('; ')}.` : 'Run: machine not recorded in the result file.';
}

const round = (v, d = 2) => (typeof v === 'number' ? Math.round(v * 10 ** d) / 10 ** d : v);
const pct = (v) => (typeof v === 'number' ? `${round(v * 100, 1)} %` : v);

/**
 * bench:replicas as it now writes its result: a rate ramp per setup, the clean rate of each (errors 0,
 * p99 and L0 share within `clean_rule`).
 * @param {any} r
 */
function replicasRamp(r) {
  const setups = Object.keys(r.clean_rate_rps).filter((k) => r[k]?.steps);
  return [
    table(
      ['setup', 'clean rate (req/s)'],
      setups.map((k) => [k.replaceAll('_', ' '), r.clean_rate_rps[k]]),
    ),
    '',
    `Clean = ${r.clean_rule.errors} errors, p99 ≤ ${r.clean_rule.p99_ms_max} ms, L0 share ≥ ` +
      `${r.clean_rule.l0_share_min}. Cold search against the embedded store: mean top-10 overlap ` +
      `${r.cold_search_vs_embedded.mean_top10_overlap}, same top-1 ${pct(r.cold_search_vs_embedded.same_top1_share)}. ` +
      `Evidence recall@10: PostgreSQL ${r.qa_evidence_recall.postgres_recall_at_10}, embedded ` +
      `${r.qa_evidence_recall.embedded_recall_at_10}.`,
  ].join('\n');
}

/** @type {{ script: string; file: string; title: string; render: (r: any) => string }[]} */
const SECTIONS = [
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
    script: 'bench:quality',
    file: 'quality',
    title: 'Evidence recall (LoCoMo)',
    render: (r) => {
      const recall = (f) => `${cell(f.evidence_recall_pct)} (${cell(f.all_evidence_pct)})`;
      const columns = [
        ...r.service.map((s) => ({ name: s.config, budgets: s.budgets })),
        { name: 'recent-only', budgets: r.baselines.recent_only },
        { name: 'bm25 first-fit', budgets: r.baselines.bm25_first_fit },
      ];
      const at2000 = (c) => c.budgets.find((b) => b.budget === 2000);
      const categories = Object.keys(at2000(columns[0])?.by_category ?? {});
      const env = Object.entries(r.service_env ?? {}).map(([k, v]) => `${k}=${v}`);
      return [
        `${r.items} QA items (every ${r.every}), ${r.model}; extra service settings: ` +
          `${env.join(', ') || 'none'}. Not counted (degraded or failed): ` +
          `${r.service.map((s) => s.degraded_not_counted + s.failed_not_counted).join(' / ')}. ` +
          'Evidence recall % (all-evidence %):',
        '',
        table(
          ['memory budget', ...columns.map((c) => c.name)],
          columns[0].budgets.map((b, i) => [
            String(b.budget),
            ...columns.map((c) => recall(c.budgets[i].overall)),
          ]),
        ),
        '',
        'At 2,000 tokens by category:',
        '',
        table(
          ['category', ...columns.map((c) => c.name)],
          categories.map((k) => [k, ...columns.map((c) => recall(at2000(c).by_category[k]))]),
        ),
      ].join('\n');
    },
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
          [
            ['inline (no pool)', r.overhead.inline_p50_us, r.overhead.inline_p99_us],
            ['through the pool', r.overhead.pool_p50_us, r.overhead.pool_p99_us],
            ['added by the pool', r.overhead.added_p50_us, r.overhead.added_p99_us],
            ['cold pool', r.overhead.cold_pool_p50_us, r.overhead.cold_pool_p99_us],
          ],
        ),
        '',
        `Event-loop delay while large tasks (n = ${r.loop_delay.shape.n}) run, ms:`,
        '',
        table(
          ['where the task runs', 'p99', 'max'],
          [
            ['pool', r.loop_delay.pool_p99_ms, r.loop_delay.pool_max_ms],
            ['inline', r.loop_delay.inline_p99_ms, r.loop_delay.inline_max_ms],
            ['idle (no task)', r.loop_delay.idle_p99_ms, r.loop_delay.idle_max_ms],
          ],
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
          ['rate', 'achieved', 'p50', 'p99', 'p99.9', 'errors', 'degraded', 'loop delay p99'],
          r.steps.map((s) => [
            s.rate,
            s.achieved_rps,
            s.p50_ms,
            s.p99_ms,
            s.p99_9_ms,
            s.errors,
            s.degraded,
            s.server?.event_loop_delay_ms?.p99,
          ]),
        ),
      ].join('\n'),
  },
  {
    script: 'bench:internal -- pool-sweep',
    file: 'pool-sweep',
    title: 'Pool sweep (threads × rate)',
    render: (r) =>
      [
        table(
          ['threads', 'rate', 'achieved', 'p50 ms', 'p99 ms', 'errors', 'degraded', 'CPU ms/call'],
          r.grid.map((g) => [
            g.threads,
            g.rate,
            g.achieved_rps,
            g.p50_ms,
            g.p99_ms,
            g.errors,
            g.degraded,
            g.cpu_ms_per_call,
          ]),
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
              r.figures.latency_from_send_ms.p50,
              r.figures.latency_from_send_ms.p99,
              r.figures.latency_from_send_ms.p99_9,
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
              r.totals.latency_ms.p50,
              r.totals.latency_ms.p99,
              r.totals.latency_ms.p99_9,
              r.totals.latency_ms.max,
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
        r.map((x) => [
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
  {
    script: 'bench:replicas',
    file: 'replicas',
    title: 'Replicas on one PostgreSQL store',
    render: (r) =>
      r.one_replica === undefined
        ? replicasRamp(r)
        : [
            table(
              ['replicas', 'replica', 'offered', 'achieved', 'p50 ms', 'p99 ms', 'errors', 'degraded'],
              [
                ...r.one_replica.replicas.map((x) => [
                  1,
                  x.replica,
                  x.offered_rps,
                  x.achieved_rps,
                  x.p50_ms,
                  x.p99_ms,
                  x.errors,
                  x.degraded,
                ]),
                ...r.two_replicas.replicas.map((x) => [
                  2,
                  x.replica,
                  x.offered_rps,
                  x.achieved_rps,
                  x.p50_ms,
                  x.p99_ms,
                  x.errors,
                  x.degraded,
                ]),
              ],
            ),
            '',
            `Database CPU per call: ${r.one_replica.database_cpu_ms_per_call} ms (one replica), ` +
              `${r.two_replicas.database_cpu_ms_per_call} ms (two). Cold search against the embedded store: mean ` +
              `top-10 overlap ${r.cold_search_vs_embedded.mean_top10_overlap}, same top-1 ` +
              `${pct(r.cold_search_vs_embedded.same_top1_share)}. Evidence recall@10: PostgreSQL ` +
              `${r.qa_evidence_recall.postgres_recall_at_10}, embedded ${r.qa_evidence_recall.embedded_recall_at_10}.`,
          ].join('\n'),
  },
  {
    script: 'bench:isolation',
    file: 'isolation',
    title: 'Isolation (a quiet org beside noisy ones)',
    render: (r) => {
      const q = r.quiet;
      const row = (label, x) => [
        label,
        x.sent,
        pct(x.ok_rate),
        pct(x.l0_rate),
        x.p50_ms,
        x.p99_ms,
        x.event_loop_delay_ms?.p99,
      ];
      return [
        table(
          ['quiet org', 'sent', 'OK', 'L0', 'p50 ms', 'p99 ms', 'loop delay p99 ms'],
          [
            row('alone', q.alone),
            row('under memory attack', q.under_memory_attack),
            row('under attack', q.under_attack),
          ],
        ),
        '',
        `p99 ratio (under attack ÷ alone): ${q.p99_ratio} (target ≤ ${r.targets.quiet_p99_ratio_max}).`,
        '',
        table(
          ['noisy kind', 'sent', 'answered', 'codes', 'levels'],
          Object.entries(r.noisy).map(([k, v]) => [
            k,
            v.sent,
            v.answered,
            JSON.stringify(v.codes),
            JSON.stringify(v.levels),
          ]),
        ),
        '',
        `Checks: ${Object.entries(r.checks)
          .map(([k, v]) => `${k} ${v ? 'met' : 'not met'}`)
          .join(', ')}.`,
      ].join('\n');
    },
  },
];

/** The whole docs/benchmarks.md text. */
export function renderBenchmarks() {
  const out = [
    '# Benchmarks',
    '',
    '<!-- Generated by `npm run docs:bench` (scripts/bench-docs.mjs) from bench/results/*.json. Do not edit. -->',
    '',
    'One table per product bench, from the result file its last run wrote. The machines are 2-core VMs',
    'shared with other work, with the load driver on the same cores as the service: read the figures as',
    'orders of magnitude and compare runs of one machine, not across machines. Re-run a bench with its npm',
    'script, then `npm run docs:bench`. Why the service is built the way these figures show is in',
    '[design/](design/).',
    '',
  ];
  for (const s of SECTIONS) {
    out.push(`## ${s.title}`, '', `\`npm run ${s.script}\` → \`bench/results/${s.file}.json\``, '');
    const r = result(s.file);
    if (!r) {
      out.push('No result committed yet.', '');
      continue;
    }
    out.push(
      Array.isArray(r) ? 'Run: machine not recorded in the result file.' : runLine(r),
      '',
      s.render(r),
      '',
    );
  }
  out.push(
    '## Without a committed result',
    '',
    '`npm run bench:store` (embedded store search cost and answer equality against the stored baseline)',
    'prints its figures and writes `bench/results/store.json` when run; none is committed.',
    '',
  );
  return out.join('\n');
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  writeFileSync(path.join(ROOT, 'docs', 'benchmarks.md'), renderBenchmarks());
  console.log('wrote docs/benchmarks.md');
}
