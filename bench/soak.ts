/**
 * `npm run bench:soak [-- --minutes 10 --rate N --connections 8]`: the service as
 * a child process on a generated embedded store, driven open loop at half its saturation rate (`--rate`
 * = the saturation rate when known, else a quick ramp finds it) with the production deadlines and a
 * 45 ms client deadline, for `--minutes`.
 *
 * Every 10 s: the server's RSS (/proc/<pid>/status VmRSS, and `process_resident_memory_bytes`) and heap
 * (`nodejs_heap_size_used_bytes`) from its `/metrics`. Per minute: p99 from the actual send, errors,
 * degraded answers. Verdicts: RSS within ±10 % of its level after warm-up, no p99 drift, no errors.
 * Writes bench/results/soak.json.
 *
 * Warm-up is the first minute (the first 20 s for runs under 3 minutes). The p99 drift is judged on
 * post-warm-up windows of one minute (10 s for runs under 3 minutes): the least-squares trend over the
 * run must stay within max(1 ms, 25 % of the mean p99).
 */

import { runLoad } from '../src/tools/client/load-driver.js';
import { percentilesOf } from '../src/tools/client/stats.js';
import { runBenchMain } from './lib/bench-run.js';
import { latencyOf, outcomeTracker, tallyJson } from './lib/outcomes.js';
import { writeResult } from './lib/paths.js';
import { parsePrometheus, sumOf } from './lib/server-metrics.js';
import {
  BENCH_DEADLINE_MS,
  numberFlags,
  printTable,
  rssBytes,
  saturatedResultHead,
  startSaturatedBench,
} from './lib/service-child.js';

const DEADLINE_MS = BENCH_DEADLINE_MS;
const SAMPLE_MS = 10_000;
const RSS_BAND = 0.1;

const mb = (b: number) => Math.round((b / 2 ** 20) * 10) / 10;
const round3 = (x: number) => Math.round(x * 1000) / 1000;

/** Least-squares slope of y over x. */
function slope(points: readonly { x: number; y: number }[]): number {
  const n = points.length;
  if (n < 2) return 0;
  const mx = points.reduce((s, p) => s + p.x, 0) / n;
  const my = points.reduce((s, p) => s + p.y, 0) / n;
  let num = 0;
  let den = 0;
  for (const p of points) {
    num += (p.x - mx) * (p.y - my);
    den += (p.x - mx) ** 2;
  }
  return den === 0 ? 0 : num / den;
}

/** Median RSS, MB (kept to 0.1 MB as sampled). */
const median = (xs: readonly number[]) => percentilesOf(xs, 10)(50);

async function main(): Promise<void> {
  const flags = numberFlags(process.argv.slice(2), ['minutes', 'rate', 'connections']);
  const minutes = flags.minutes ?? 10;
  const connections = flags.connections ?? 8;
  const warmupS = minutes >= 3 ? 60 : 20;
  const windowMs = minutes >= 3 ? 60_000 : 10_000;
  const bench = await startSaturatedBench('soak', {
    rate: flags.rate,
    connections,
  });
  const { service, data, saturationRate } = bench;
  try {
    const rate = Math.max(1, Math.round(saturationRate / 2));
    console.log(`saturation ${saturationRate} rps → soak at ${rate} rps for ${minutes} min`);

    const tracker = outcomeTracker({ deadlineMs: DEADLINE_MS, windowMs });
    const samples: { t_s: number; rss_mb: number | null; rss_metrics_mb: number; heap_used_mb: number }[] =
      [];
    const t0 = performance.now();
    const sample = async () => {
      const m = parsePrometheus(await service.metricsText());
      const rss = rssBytes(service.pid);
      const s = {
        t_s: Math.round((performance.now() - t0) / 1000),
        rss_mb: rss === null ? null : mb(rss),
        rss_metrics_mb: mb(sumOf(m, 'process_resident_memory_bytes')),
        heap_used_mb: mb(sumOf(m, 'nodejs_heap_size_used_bytes')),
      };
      samples.push(s);
      // The last window is still filling; the one before it is complete.
      const w = tracker.windows.at(-2);
      console.log(
        `  ${String(s.t_s).padStart(4)} s  rss ${s.rss_mb} MB  heap ${s.heap_used_mb} MB` +
          (w && w.answered > 0 ? `  last window p99 ${latencyOf(w).p99} ms, sent ${w.sent}` : ''),
      );
    };
    tracker.reset();
    await sample();
    const sampler = setInterval(() => {
      sample().catch((err: unknown) => console.error(`sample failed: ${(err as Error).message}`));
    }, SAMPLE_MS);
    let report: Awaited<ReturnType<typeof runLoad>>;
    try {
      report = await runLoad({
        addr: service.grpcAddr,
        rate,
        durationS: minutes * 60,
        connections,
        timeoutMs: DEADLINE_MS,
        source: data.source,
        onCall: tracker.onCall,
      });
    } finally {
      clearInterval(sampler);
    }
    tracker.pause();
    await sample();

    // RSS: level after warm-up = median of the first three samples past it; every later sample in ±10 %.
    const post = samples.filter((s) => s.t_s >= warmupS && s.rss_mb !== null);
    const base = median(post.slice(0, 3).map((s) => s.rss_mb!));
    const worst = post.reduce((w, s) => Math.max(w, Math.abs(s.rss_mb! / base - 1)), 0);
    const rssOk = post.length > 0 && worst <= RSS_BAND;
    // p99 drift: trend of the per-window p99 after warm-up.
    const firstWindow = Math.ceil((warmupS * 1000) / windowMs);
    // A window cut short by the end of the run (a few calls) says nothing about p99: only full ones count.
    const full = (rate * windowMs) / 1000 / 2;
    const p99s = tracker.windows
      .map((w, i) => ({ x: i, y: w.answered > 0 ? latencyOf(w).p99 : Number.NaN }))
      .filter((p) => p.x >= firstWindow && Number.isFinite(p.y) && tracker.windows[p.x]!.sent >= full);
    const meanP99 = p99s.reduce((s, p) => s + p.y, 0) / Math.max(1, p99s.length);
    const trend = slope(p99s) * Math.max(0, p99s.length - 1);
    const driftOk = Math.abs(trend) <= Math.max(1, 0.25 * meanP99);
    const t = tracker.total;
    const errors = Object.values(t.errors).reduce((a, b) => a + b, 0);
    const result = {
      ...saturatedResultHead('soak', bench, {
        connections,
        minutes,
        warmup_s: warmupS,
        window_s: windowMs / 1000,
      }),
      rate_rps: rate,
      achieved_rps: report.throughput_rps,
      samples_every_10s: samples,
      windows: tracker.windows.map((w, i) => ({ from_s: (i * windowMs) / 1000, ...tallyJson(w) })),
      totals: {
        ...tallyJson(t),
        latency_from_intended_send_ms: report.latency_ms,
      },
      verdicts: {
        rss_within_10pct_after_warmup: { ok: rssOk, base_mb: base, worst_deviation: round3(worst) },
        no_p99_drift: {
          ok: driftOk,
          mean_p99_ms: round3(meanP99),
          trend_over_run_ms: round3(trend),
          tolerance_ms: round3(Math.max(1, 0.25 * meanP99)),
        },
        no_errors: { ok: errors === 0, errors: t.errors },
      },
      driver: {
        schedule_lag_ms: report.schedule_lag_ms,
        event_loop_utilization: report.driver.event_loop_utilization,
        cpu_s: report.driver.cpu_s,
      },
      warnings: report.warnings,
    };
    const file = writeResult('soak', result);

    console.log(`\nsoak: ${rate} rps (½ × ${saturationRate}) for ${minutes} min`);
    console.log(
      `  ${'window'.padEnd(8)} ${'sent'.padStart(7)} ${'p50'.padStart(8)} ${'p99'.padStart(8)} errors  L1/L2`,
    );
    for (const [i, w] of tracker.windows.entries()) {
      const l = w.answered > 0 ? latencyOf(w) : { p50: 0, p99: 0 };
      const errs = Object.values(w.errors).reduce((a, b) => a + b, 0);
      console.log(
        `  ${`${(i * windowMs) / 1000}s`.padEnd(8)} ${String(w.sent).padStart(7)} ${String(l.p50).padStart(8)} ` +
          `${String(l.p99).padStart(8)} ${String(errs).padStart(6)}  ${w.levels.L1}/${w.levels.L2}`,
      );
    }
    const v = result.verdicts;
    printTable([
      ['sent / achieved rps', `${t.sent} / ${report.throughput_rps}`],
      [
        'RSS after warm-up',
        `${base} MB, worst deviation ${(worst * 100).toFixed(1)} % → ${rssOk ? 'OK' : 'NOT OK'}`,
      ],
      [
        'p99 drift',
        `mean ${v.no_p99_drift.mean_p99_ms} ms, trend ${v.no_p99_drift.trend_over_run_ms} ms over the run ` +
          `(tolerance ${v.no_p99_drift.tolerance_ms}) → ${driftOk ? 'OK' : 'NOT OK'}`,
      ],
      ['errors', `${JSON.stringify(t.errors)} → ${errors === 0 ? 'OK' : 'NOT OK'}`],
      ['heap used first/last', `${samples[0]?.heap_used_mb} / ${samples.at(-1)?.heap_used_mb} MB`],
      ['driver lag avg/max', `${report.schedule_lag_ms.avg} / ${report.schedule_lag_ms.max} ms`],
    ]);
    for (const w of report.warnings) console.log(`  warning: ${w}`);
    console.log(`\nwrote ${file}`);
  } finally {
    await service.stop();
  }
}

runBenchMain(main);
