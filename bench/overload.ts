import { runLoad } from '../src/tools/client/load-driver.js';
import { runBenchMain } from './lib/bench-run.js';
import { latencyOf, outcomeTracker, tallyJson } from './lib/outcomes.js';
import { writeResult } from './lib/paths.js';
import { snapshot, stepStats } from './lib/server-metrics.js';
import {
  BENCH_DEADLINE_MS,
  numberFlags,
  printTable,
  sampleRss,
  saturatedResultHead,
  startSaturatedBench,
} from './lib/service-child.js';

const DEADLINE_MS = BENCH_DEADLINE_MS;
const MARGIN_MS = 2;
const GOAL_WITHIN = 0.999;

async function main(): Promise<void> {
  const flags = numberFlags(process.argv.slice(2), ['seconds', 'rate', 'connections']);
  const seconds = flags.seconds ?? 30;
  const connections = flags.connections ?? 8;
  const bench = await startSaturatedBench('overload', {
    rate: flags.rate,
    connections,
  });
  const { service, data, saturationRate } = bench;
  try {
    const offered = 2 * saturationRate;
    console.log(`saturation ${saturationRate} rps → overload at ${offered} rps for ${seconds} s`);

    const tracker = outcomeTracker({ deadlineMs: DEADLINE_MS, marginMs: MARGIN_MS, windowMs: 5_000 });
    const rss = sampleRss(service.pid);
    const before = await snapshot(service);
    tracker.reset();
    const report = await runLoad({
      addr: service.grpcAddr,
      rate: offered,
      durationS: seconds,
      connections,
      timeoutMs: DEADLINE_MS,
      source: data.source,
      onCall: tracker.onCall,
    });
    tracker.pause();
    const after = await snapshot(service);
    const memory = rss.stop();

    const t = tracker.total;
    const share = t.sent > 0 ? t.within / t.sent : 0;
    const errorsTotal = Object.values(t.errors).reduce((a, b) => a + b, 0);
    const allowed = t.deadline_exceeded.service_before_deadline;
    const server = stepStats(before, after);
    const result = {
      ...saturatedResultHead('overload', bench, { within_margin_ms: MARGIN_MS, connections, seconds }),
      offered_rps: offered,
      achieved_rps: report.throughput_rps,
      figures: {
        sent: t.sent,
        answered: t.answered,
        within_deadline: t.within,
        within_deadline_share: Math.round(share * 1e6) / 1e6,
        full_answers: t.levels.L0,
        degraded_answers: { L1: t.levels.L1, L2: t.levels.L2 },
        errors_by_code: t.errors,
        deadline_exceeded: t.deadline_exceeded,
        errors_besides_early_deadline: errorsTotal - allowed,
        latency_from_send_ms: latencyOf(t),
        latency_from_intended_send_ms: report.latency_ms,
        server_rss_mb: memory,
      },
      goals: {
        within_deadline_share: { goal: GOAL_WITHIN, met: share >= GOAL_WITHIN },
        errors_besides_early_deadline: { goal: 0, met: errorsTotal - allowed === 0 },
      },
      per_5s: tracker.windows.map((w, i) => ({ from_s: i * 5, ...tallyJson(w) })),
      server,
      driver: {
        schedule_lag_ms: report.schedule_lag_ms,
        event_loop_utilization: report.driver.event_loop_utilization,
        cpu_s: report.driver.cpu_s,
      },
      warnings: report.warnings,
    };
    const file = writeResult('overload', result);

    const pct = (x: number) => `${(x * 100).toFixed(3)} %`;
    const lat = result.figures.latency_from_send_ms;
    console.log(`\noverload: ${offered} rps offered (2 × ${saturationRate}) for ${seconds} s`);
    printTable([
      ['sent / achieved rps', `${t.sent} / ${report.throughput_rps}`],
      [
        `answered within ${DEADLINE_MS}+${MARGIN_MS} ms`,
        `${pct(share)} (goal ≥ ${pct(GOAL_WITHIN)}) ${share >= GOAL_WITHIN ? 'MET' : 'NOT MET'}`,
      ],
      ['full (L0) / L1 / L2', `${t.levels.L0} / ${t.levels.L1} / ${t.levels.L2}`],
      ['degradation reasons (server)', JSON.stringify(server.degraded_reasons)],
      ['pool tasks (server)', JSON.stringify(server.pool_tasks)],
      ['errors by code', JSON.stringify(t.errors)],
      ['DEADLINE_EXCEEDED by decider', JSON.stringify(t.deadline_exceeded)],
      [
        'errors besides early deadline',
        `${errorsTotal - allowed} (goal 0) ${errorsTotal === allowed ? 'MET' : 'NOT MET'}`,
      ],
      ['latency from send p50/p99/p99.9/max', `${lat.p50} / ${lat.p99} / ${lat.p99_9} / ${lat.max} ms`],
      ['server RSS start/peak/end', `${memory.start_mb} / ${memory.peak_mb} / ${memory.end_mb} MB`],
      [
        'server CPU cores (main thread)',
        server.cpu_cores ? `${server.cpu_cores.total} (${server.cpu_cores.main_thread})` : '-',
      ],
      [
        'driver lag avg/max, ELU',
        `${report.schedule_lag_ms.avg} / ${report.schedule_lag_ms.max} ms, ${report.driver.event_loop_utilization}`,
      ],
    ]);
    for (const w of report.warnings) console.log(`  warning: ${w}`);
    console.log(`\nwrote ${file}`);
  } finally {
    await service.stop();
  }
}

runBenchMain(main);
