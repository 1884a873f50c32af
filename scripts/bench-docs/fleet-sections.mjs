/** Sections of docs/benchmarks.md for a fleet and its dependencies: replicas, pinning, tracing, quality, isolation. */
import { need, pct, round, table } from './format.mjs';

/** A row of the pinned table for one measured step of the service (`offered`: its rate, or how it was driven). */
const serviceRow = (label, offered, x) => [
  label,
  offered,
  x.achieved_rps,
  x.p99_ms,
  x.errors,
  x.degraded,
  x.server?.late_answers ?? '—',
  round(x.cpu_ms_per_call?.server_main + (x.cpu_ms_per_call?.server_other ?? 0), 3),
];

/** A row of the bare grpc-js server: it degrades nothing and has no deadline to be late for. */
const bareRow = (label, offered, x) => [
  label,
  offered,
  x.achieved_rps,
  x.p99_ms,
  x.errors,
  0,
  '—',
  x.cpu_ms_per_call,
];

/** @type {import('./format.mjs').Section[]} */
export const FLEET_SECTIONS = [
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
        ...(r.single_call
          ? [
              `One call at a time (one connection, each call sent when the last is answered): embedded p50 ` +
                `${r.single_call.embedded_one_replica.p50_ms} ms, p99 ${r.single_call.embedded_one_replica.p99_ms} ms; ` +
                `PostgreSQL p50 ${r.single_call.postgres_one_replica.p50_ms} ms, p99 ${r.single_call.postgres_one_replica.p99_ms} ms ` +
                `(database ${r.single_call.postgres_one_replica.database_cpu_ms_per_call} ms CPU per call). ` +
                (r.single_call.embedded_one_replica.below_clean_p99 &&
                r.single_call.postgres_one_replica.below_clean_p99
                  ? 'Both are under the clean p99, so the clean rates above are load, not a floor.'
                  : `A store whose single calls already have a p99 over ${rule.p99_ms_max} ms cannot have a clean rate on this ` +
                    'machine, whatever the load: its clean rate, and the ratio to it, measure the floor, not the store.'),
            ]
          : []),
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
        `Service on one CPU (\`${need(r, 'pinning').service}\`), driver on the other` +
          (r.driver_node_flags?.length
            ? ` (node \`${r.driver_node_flags.join(' ')}\`)`
            : ' (node defaults)') +
          '; a bare grpc-js server answering a canned answer measured the same way in the same run.',
        '',
        table(
          [
            'server',
            'offered/s',
            'achieved/s',
            'p99 ms',
            'errors',
            'degraded',
            'answers after D',
            'CPU ms/call',
          ],
          [
            ...need(r, 'steps').map((x) => serviceRow('ibex-context', x.rate, x)),
            ...(r.single_call
              ? [serviceRow('ibex-context, one call at a time', 'closed loop', r.single_call)]
              : []),
            ...need(r, 'bare_floor').map((x) => bareRow('bare grpc-js', x.rate, x)),
            ...(r.bare_single_call
              ? [bareRow('bare grpc-js, one call at a time', 'closed loop', r.bare_single_call)]
              : []),
          ],
        ),
        '',
        ...(r.single_call
          ? [
              `One call at a time (one connection, the next call sent when the last is answered): p50 ` +
                `${r.single_call.p50_ms} ms, p99 ${r.single_call.p99_ms} ms` +
                (pc.clean_target_below_single_call_floor
                  ? ` — above the clean-rate target of p99 ≤ ${need(r, 'config').p99_target_ms} ms, so no offered ` +
                    'rate can be clean on this core: the calls that never wait for one another already miss it.'
                  : '.'),
              '',
            ]
          : []),
        ...(r.bare_single_call
          ? [
              `The bare grpc-js server one call at a time, same core, same run: p50 ${r.bare_single_call.p50_ms} ms, ` +
                `p99 ${r.bare_single_call.p99_ms} ms` +
                (pc.clean_target_below_bare_floor
                  ? ` — the p99 target of ${need(r, 'config').p99_target_ms} ms sits below what this machine gives a ` +
                    'server that only answers a canned message.'
                  : '.'),
              '',
            ]
          : []),
        ...(pc.clean_rate != null && pc.cpu_ms_per_call_at_clean != null
          ? [
              `Clean rate ${pc.clean_rate}/s (${pct(pc.clean_share_of_saturation)} of saturation), ` +
                `${pc.cpu_ms_per_call_at_clean} ms of server CPU a call there` +
                (pc.cpu_ratio_to_bare_at_clean_rate != null
                  ? `: ${pc.cpu_ratio_to_bare_at_clean_rate}× the bare server's ${pc.bare_cpu_ms_per_call_at_clean_rate} ms at the same rate`
                  : '') +
                (pc.cpu_ratio_to_bare != null
                  ? `, ${pc.cpu_ratio_to_bare}× its cheapest call (${pc.bare_cpu_ms_per_call} ms, at its highest clean rate).`
                  : '.'),
              '',
            ]
          : []),
        `Saturation ${pc.saturation_rate}/s (${pc.saturation_l0_rps} L0 answers/s). Overload at ${o.rate}/s for ` +
          `${o.seconds} s: ${pct(o.l0_share)} L0, ${pct(o.shed_share)} shed, ${o.errors} errors` +
          `${o.late_answers === undefined ? '' : `, ${o.late_answers} answers after D`}, p99 ${o.p99_ms} ms; ` +
          `admission limit ${o.admission_limit_after} after; then ${o.recovery_rate}/s (the clean rate, else the highest ` +
          `step with ≥ 99 % L0 and no error): every answer L0 again ${o.seconds_back_to_l0 === null ? 'not within the 5 s watched' : `after ${o.seconds_back_to_l0} s`}.`,
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
  qualitySection('quality', 'Context quality (LoCoMo evidence recall)'),
  qualitySection(
    'quality-postgres',
    'Context quality on PostgreSQL (LoCoMo evidence recall)',
    'npm run bench:quality -- --pg-url <url> --configs composite --out quality-postgres',
  ),
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
    script: 'bench:pg-search',
    command: 'npm run bench:pg-search -- --pg-url <url>',
    file: 'pg-search',
    title: 'PostgreSQL cold search on the event loop',
    render: (r) =>
      [
        `${r.searches_per_round} LoCoMo questions a round, ${r.rounds} rounds, limit ${r.limit}, neighbours of the ` +
          `${r.neighbours} best; PostgreSQL ${r.postgres}. This process's CPU and wall per search, ms (best / median ` +
          `round)${r.rows.database_cpu_ms_per_search ? ", and the database backends' CPU per search" : "; the database's own CPU is not included"}.`,
        '',
        table(
          [
            'read',
            'hits',
            'CPU best',
            'CPU median',
            'wall best',
            'wall median',
            ...(r.rows.database_cpu_ms_per_search ? ['database CPU best', 'database CPU median'] : []),
          ],
          [
            ['one row per hit, then validated (wire shape)', need(r, 'rows')],
            ['one aggregated row (retrieval branch)', need(r, 'packed')],
          ].map(([label, x]) => [
            label,
            x.hits_per_search,
            x.cpu_ms_per_search.best,
            x.cpu_ms_per_search.median,
            x.wall_ms_per_search.best,
            x.wall_ms_per_search.median,
            ...(x.database_cpu_ms_per_search
              ? [x.database_cpu_ms_per_search.best, x.database_cpu_ms_per_search.median]
              : []),
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
      [
        'The first `replay --limit 300` as soon as `/readyz` answers; "warm L0" is the same replay run again ' +
          "right after on the same process, what this machine gives at the replay's pace once nothing is cold." +
          (r.readme_gap_s !== undefined
            ? ` "embedded, README order" starts on an empty store, runs \`ingest\` once \`/readyz\` answers and the ` +
              `replay ${r.readme_gap_s} s after the import ends, as the README's quick start does.`
            : ''),
        '',
        table(
          ['path', 'start', 'load average', 'calls', 'OK', 'errors', 'L0', 'L1', 'L2', 'p99 ms', 'warm L0'],
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
            x.warm ? `${x.warm.levels.L0} / ${x.warm.calls}` : '—',
          ]),
        ),
      ].join('\n'),
  },
  {
    script: 'bench:replay-busy',
    command: 'bash bench/replay-busy.sh <locomo dir> 5',
    file: 'replay-busy',
    title: "The README's replay beside two busy loops",
    render: (r) =>
      [
        table(
          ['run', 'exit', 'OK', 'errors', 'L0', 'L1', 'L2', 'answers after D', 'p99 ms', 'violations'],
          need(r, 'runs').map((x, i) => [
            i + 1,
            x.exit,
            x.ok,
            Object.values(x.errors ?? {}).reduce((a, n) => a + n, 0),
            x.levels.L0 ?? 0,
            x.levels.L1 ?? 0,
            x.levels.L2 ?? 0,
            x.late_answers ? Object.values(x.late_answers).reduce((a, n) => a + n, 0) : '—',
            x.latency_ms?.p99 ?? '—',
            x.invariant_violations,
          ]),
        ),
        '',
        `Exit 0 in ${r.exit_0} of ${r.of} runs; load average ${r.load_average}. "Answers after D": sent past the deadline because the event loop ran late (contract.md §10, the answer at D).`,
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

/** bench:quality's section for one results file (the embedded store, or PostgreSQL with `--pg-url`). */
function qualitySection(file, title, command = undefined) {
  return {
    script: 'bench:quality',
    ...(command === undefined ? {} : { command }),
    file,
    title,
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
          `${r.every > 1 ? ` (every ${r.every}th)` : ''}, ${r.store === 'postgres' ? "PostgreSQL store (baselines: the embedded store's index)" : 'embedded store'}, L0 answers only; % by memory budget (tokens).`,
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
  };
}
