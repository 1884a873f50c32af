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

/** @param {any} r a result with `machine` (and `generated_at`/`date`/`node`, and `run` from bench/lib/paths.ts) */
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
  const line = parts.length ? `Run: ${parts.join('; ')}.` : 'Run: machine not recorded in the result file.';
  return r.run ? `${line}\nCommit ${r.run.commit}, written ${r.run.date}.` : line;
}

/**
 * A field a renderer needs; a result file of another shape fails loudly, naming the file's field.
 * @param {any} r @param {string} key
 */
function need(r, key) {
  if (r[key] === undefined)
    throw new Error(`bench result has no field ${key}: re-run its bench or update scripts/bench-docs.mjs`);
  return r[key];
}

const round = (v, d = 2) => (typeof v === 'number' ? Math.round(v * 10 ** d) / 10 ** d : v);
const pct = (v) => (typeof v === 'number' ? `${round(v * 100, 1)} %` : v);

/** @type {{ script: string; command?: string; file: string; title: string; render: (r: any) => string }[]} */
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
  {
    script: 'bench:replicas',
    file: 'replicas',
    title: 'Replicas on one PostgreSQL store',
    render: (r) => {
      const rule = need(r, 'clean_rule');
      const setups = [
        ['embedded, one replica', 'embedded_one_replica'],
        ['PostgreSQL, one replica', 'postgres_one_replica'],
        ['PostgreSQL, two replicas (direct)', 'postgres_two_replicas_direct'],
        ['PostgreSQL, two replicas (PgBouncer)', 'postgres_two_replicas_pgbouncer'],
      ];
      const rows = [];
      for (const [label, key] of setups) {
        for (const step of need(r, key).steps) {
          const reps = step.replicas;
          rows.push([
            label,
            step.offered_rps,
            step.total_achieved_rps,
            Math.max(...reps.map((x) => x.p99_ms)),
            reps.reduce((a, x) => a + x.errors, 0),
            reps.reduce((a, x) => a + x.degraded, 0),
            step.database_cpu_ms_per_call,
            step.clean ? 'yes' : 'no',
          ]);
        }
      }
      const rec = need(r, 'recovery');
      const c = need(r, 'clean_rate_rps');
      return [
        `A step is clean with ${rule.errors} errors, p99 ≤ ${rule.p99_ms_max} ms and ≥ ${pct(rule.l0_share_min)} L0 answers.`,
        '',
        table(
          [
            'setup',
            'offered/s',
            'achieved/s',
            'p99 ms (worst replica)',
            'errors',
            'degraded',
            'database CPU ms/call',
            'clean',
          ],
          rows,
        ),
        '',
        `Clean rate: embedded ${c.embedded_one_replica}/s, PostgreSQL one replica ${c.postgres_one_replica}/s ` +
          `(${c.postgres_vs_embedded}× embedded), two replicas direct ${c.postgres_two_replicas_direct}/s, ` +
          `through PgBouncer ${c.postgres_two_replicas_pgbouncer}/s. After ${rec.overload.seconds} s at ` +
          `${rec.overload.offered_rps}/s, back to all L0 at ${rec.rate_rps}/s in ${rec.overload.seconds_to_full_l0} s ` +
          `(${rec.overload.connections_opened_during} connections opened during, ${rec.overload.connections_opened_after} after); ` +
          `after the backends were terminated, back in ${rec.backends_terminated.seconds_to_full_l0} s ` +
          `(${rec.backends_terminated.connections_opened_after} connections opened).`,
        `Cold search against the embedded store: mean top-10 overlap ${r.cold_search_vs_embedded.mean_top10_overlap}, ` +
          `same top-1 ${pct(r.cold_search_vs_embedded.same_top1_share)}. Evidence recall@10: PostgreSQL ` +
          `${r.qa_evidence_recall.postgres_recall_at_10}, embedded ${r.qa_evidence_recall.embedded_recall_at_10}.`,
      ].join('\n');
    },
  },
  {
    script: 'bench:load -- --pinned',
    file: 'load-pinned',
    title: 'Per core (service and driver pinned to different CPUs)',
    render: (r) => {
      const pc = need(r, 'per_core');
      const o = need(r, 'overload');
      return [
        `Service on one CPU (\`${need(r, 'pinning').service}\`), driver on the other; a bare grpc-js server ` +
          'answering a canned answer measured the same way in the same run.',
        '',
        table(
          ['server', 'offered/s', 'achieved/s', 'p99 ms', 'errors', 'degraded', 'CPU ms/call'],
          [
            ...need(r, 'steps').map((x) => [
              'ibex-context',
              x.rate,
              x.achieved_rps,
              x.p99_ms,
              x.errors,
              x.degraded,
              round(x.cpu_ms_per_call?.server_main + (x.cpu_ms_per_call?.server_other ?? 0), 3),
            ]),
            ...need(r, 'bare_floor').map((x) => [
              'bare grpc-js',
              x.rate,
              x.achieved_rps,
              x.p99_ms,
              x.errors,
              0,
              x.cpu_ms_per_call,
            ]),
          ],
        ),
        '',
        `Saturation ${pc.saturation_rate}/s (${pc.saturation_l0_rps} L0 answers/s). Overload at ${o.rate}/s for ` +
          `${o.seconds} s: ${pct(o.l0_share)} L0, ${pct(o.shed_share)} shed, ${o.errors} errors, p99 ${o.p99_ms} ms; ` +
          `admission limit ${o.admission_limit_after} after; back to all L0 at ${o.recovery_rate}/s in ${o.seconds_back_to_l0} s.`,
      ].join('\n');
    },
  },
  {
    script: 'bench:tracing',
    file: 'tracing',
    title: 'Tracing cost (off, 1 % and 100 % sampling)',
    render: (r) =>
      [
        `${need(r, 'config').rate} calls/s, ${r.config.rounds} rounds of ${r.config.step_seconds} s per mode, ` +
          'modes interleaved; server CPU per call (medians over rounds) by thread.',
        '',
        table(
          [
            'mode',
            'main ms/call',
            'pool ms/call',
            'store ms/call',
            'other ms/call',
            'total ms/call',
            'vs off',
            'p99 ms',
          ],
          need(r, 'summary').map((x) => [
            x.mode,
            x.median_ms_per_call.main,
            x.median_ms_per_call.pool,
            x.median_ms_per_call.store,
            x.median_ms_per_call.other,
            x.median_ms_per_call.total,
            `${x.total_vs_off_percent} %`,
            x.p99_ms_median,
          ]),
        ),
        '',
        `Span building and export on the main thread, measured apart: ${need(r, 'micro')
          .map((m) => `${m.mode} ${m.mean_us} µs mean per call (p99 ${m.p99_us} µs)`)
          .join(', ')}.`,
      ].join('\n'),
  },
  {
    script: 'bench:quality',
    file: 'quality',
    title: 'Context quality (LoCoMo evidence recall)',
    render: (r) => {
      const budgets = need(r, 'service')[0].budgets.map((b) => b.budget);
      const label = (b) => (b === 0 ? 'unlimited' : String(b));
      const row = (name, list) => [
        name,
        ...budgets.map((b) => list.find((x) => x.budget === b)?.overall.evidence_recall_pct),
      ];
      const at2000 = (list) => list.find((x) => x.budget === 2000);
      const cats = Object.keys(at2000(r.service[0].budgets).by_category);
      return [
        `Share of evidence turns included in the assembled context, ${r.items} QA items of categories 1–4` +
          `${r.every > 1 ? ` (every ${r.every}th)` : ''}, embedded store, L0 answers only; % by memory budget (tokens).`,
        '',
        table(
          ['ranking', ...budgets.map(label)],
          [
            ...r.service.map((x) => row(x.config, x.budgets)),
            row('baseline: recent turns only', need(r, 'baselines').recent_only),
            row('baseline: bm25 hits, first fit', r.baselines.bm25_first_fit),
          ],
        ),
        '',
        'At 2,000 tokens by category (evidence recall %):',
        '',
        table(
          ['ranking', ...cats],
          [
            ...r.service.map((x) => [
              x.config,
              ...cats.map((c) => at2000(x.budgets)?.by_category[c]?.evidence_recall_pct),
            ]),
            [
              'baseline: bm25 hits, first fit',
              ...cats.map((c) => at2000(r.baselines.bm25_first_fit)?.by_category[c]?.evidence_recall_pct),
            ],
          ],
        ),
      ].join('\n');
    },
  },
  {
    script: 'bench:neighbour-cost',
    file: 'neighbour-cost',
    title: 'Dialogue neighbours: cost per search (embedded store)',
    render: (r) =>
      [
        `Every LoCoMo question searched in-process (as a store-read thread runs it), without and with the` +
          ` neighbours of the ${r.neighbour_hits} best hits; the fastest of 5 alternating rounds; µs per search.`,
        '',
        table(
          [
            'search limit',
            'searches',
            'without: mean',
            'without: p99',
            'with: mean',
            'with: p99',
            'added: mean',
          ],
          need(r, 'rows').map((x) => [
            x.limit,
            x.searches,
            x.without_us.mean,
            x.without_us.p99,
            x.with_us.mean,
            x.with_us.p99,
            x.added_mean_us,
          ]),
        ),
      ].join('\n'),
  },
  {
    script: 'bench:first-traffic',
    command: 'bash bench/first-traffic.sh',
    file: 'first-traffic',
    title: 'First traffic after a fresh start',
    render: (r) =>
      table(
        ['path', 'start', 'load average', 'calls', 'OK', 'errors', 'L0', 'L1', 'L2', 'p99 ms'],
        need(r, 'runs').map((x) => [
          x.path,
          x.start,
          x.load_avg_1m,
          x.calls,
          x.ok,
          Object.values(x.errors ?? {}).reduce((a, n) => a + n, 0),
          x.levels.L0,
          x.levels.L1,
          x.levels.L2,
          x.p99_ms,
        ]),
      ),
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
    out.push(
      `## ${s.title}`,
      '',
      `\`${s.command ?? `npm run ${s.script}`}\` → \`bench/results/${s.file}.json\``,
      '',
    );
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
