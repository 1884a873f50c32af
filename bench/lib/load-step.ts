/**
 * One measured open-loop step against a service child: an unrecorded ramp at the step's rate, a
 * `/metrics` + CPU snapshot, the measured run (`runLoad`), another snapshot. The row joins what the
 * client saw (latency from the intended send time, errors, degraded answers) with what the server did
 * in the same window (pool, retrieval, event loop, CPU) and what the driver itself cost.
 */

import { setTimeout as sleep } from 'node:timers/promises';
import { type LoadReport, runLoad } from '../../src/tools/client/load-driver.js';
import { formatTail } from '../../src/tools/client/load-report.js';
import type { TransportName } from '../../src/tools/client/load-transport.js';
import type { RequestSource } from '../../src/tools/client/request-source.js';
import { parsePrometheus, type ServerStepStats, snapshot, stepStats, sumOf } from './server-metrics.js';
import type { ServiceProcess } from './service-process.js';
import { readThreads, type ThreadCpuStep, threadCpuStep } from './thread-cpu.js';

/** Options of {@link measureStep}. */
export interface StepOptions {
  /** Offered rate, req/s (open loop); null = closed loop, one call in flight per connection. */
  rate: number | null;
  seconds: number;
  /** Unrecorded traffic at the same rate before the snapshot (lets queues and JIT settle), s. */
  rampSeconds: number;
  connections: number;
  /** Per-call gRPC deadline of the client, ms. */
  timeoutMs: number;
  source: RequestSource;
  /** Driver transport (default h2). */
  transport?: TransportName;
}

/** Driver ELU above which the driver, not the server, probably set the pace. */
const DRIVER_ELU_LIMIT = 0.9;
/** Mean send lag above which the driver did not keep its schedule, ms. */
const DRIVER_LAG_LIMIT_MS = 2;

/** One step as written to the results (ms, rps, cores). */
export interface StepRow {
  rate: number;
  /** Answers (any status) per second of the measured window. */
  achieved_rps: number;
  /** OK answers per second of the measured window (achieved_rps × OK share). */
  ok_rps: number;
  sent_rps: number;
  p50_ms: number;
  p97_5_ms: number;
  p99_ms: number;
  p99_9_ms: number;
  avg_ms: number;
  max_ms: number;
  /** Non-OK statuses plus calls cancelled unanswered after the drain. */
  errors: number;
  errors_by_code: Record<string, number>;
  /** OK answers at level L1 or L2. */
  degraded: number;
  degraded_by_level: { L1: number; L2: number };
  server: ServerStepStats;
  driver: {
    schedule_lag_ms: { avg: number; max: number };
    event_loop_utilization: number;
    cpu_cores: number;
    /** True when the driver's own loop was saturated or late: the latencies then include driver time. */
    limited: boolean;
  };
  /**
   * CPU per answered call, ms: the server's main thread, its other threads (pool, GC, libuv), the driver.
   * With the cores the machine has, these bound the rate it can sustain.
   */
  cpu_ms_per_call: { server_main: number; server_other: number; driver: number } | null;
  /**
   * CPU per thread group from `/proc/<pid>/task/<tid>/stat` deltas over the measured run: the
   * server's main thread, pool workers, store readers and the rest, and the driver process (this one).
   * ms per answered call and cores. Null where `/proc` is missing.
   */
  cpu_per_thread: { server: ThreadCpuStep | null; driver: ThreadCpuStep | null };
  /** The budget mix of the step: constrained share sent and share of OK answers where the packer chose. */
  packing: LoadReport['packing'];
  /**
   * The step's slow calls (over the driver's tail threshold: bench:load's p99 target) grouped into
   * incidents by send time (src/tools/client/tail-incidents.ts); optional in results written before it.
   */
  tail?: LoadReport['tail'];
  /** Driver transport. */
  transport: string;
  /** Cores busy on the machine beyond the server and the driver (other processes: noise). */
  other_processes_cores: number | null;
  warnings: string[];
}

const round2 = (x: number) => Math.round(x * 100) / 100;

/**
 * The step's tail line (src/tools/client/load-report.ts `formatTail`) with the main thread's mark-compacts of
 * the same window beside it: at 1,000 req/s their period matched the large incidents'
 * (docs/design/main-thread.md, "Where the tail comes from").
 */
export function tailBesideMarkCompacts(row: StepRow): string {
  const tail = row.tail ? formatTail(row.tail) : 'tail: not recorded';
  const mc = row.server.gc?.by_kind.major;
  if (!mc || mc.count === 0) return `${tail}; main-thread mark-compacts: none`;
  const windowS = row.server.window_s;
  return (
    `${tail}; main-thread mark-compacts: ${mc.count} (every ${(windowS / mc.count).toFixed(1)} s, ` +
    `${(mc.ms / mc.count).toFixed(1)} ms pause each)`
  );
}

/** Builds a {@link StepRow} from the client report and the server stats of the same window. */
export function stepRow(
  report: LoadReport,
  server: ServerStepStats,
  perThread: StepRow['cpu_per_thread'] = { server: null, driver: null },
): StepRow {
  const r = report.requests;
  const driverCores = report.duration_s > 0 ? report.driver.cpu_s / report.duration_s : 0;
  const limited =
    report.driver.event_loop_utilization > DRIVER_ELU_LIMIT ||
    report.schedule_lag_ms.avg > DRIVER_LAG_LIMIT_MS;
  const errorsByCode: Record<string, number> = { ...r.errors };
  if (r.unfinished > 0) errorsByCode.UNFINISHED = r.unfinished;
  return {
    rate: report.rate ?? 0,
    achieved_rps: report.throughput_rps,
    // Same window as achieved_rps: its answers, scaled by the share of them that were OK.
    ok_rps: r.completed > 0 ? Math.round(((report.throughput_rps * r.ok) / r.completed) * 10) / 10 : 0,
    sent_rps: report.sent_rps,
    p50_ms: report.latency_ms.p50,
    p97_5_ms: report.latency_ms.p97_5,
    p99_ms: report.latency_ms.p99,
    p99_9_ms: report.latency_ms.p99_9,
    avg_ms: report.latency_ms.avg,
    max_ms: report.latency_ms.max,
    errors: r.error_total + r.unfinished,
    errors_by_code: errorsByCode,
    degraded: r.degraded.L1 + r.degraded.L2,
    degraded_by_level: r.degraded,
    server,
    driver: {
      schedule_lag_ms: report.schedule_lag_ms,
      event_loop_utilization: report.driver.event_loop_utilization,
      cpu_cores: round2(driverCores),
      limited,
    },
    cpu_ms_per_call:
      server.cpu_cores === null || report.throughput_rps <= 0
        ? null
        : {
            server_main: round2((server.cpu_cores.main_thread * 1000) / report.throughput_rps),
            server_other: round2((server.cpu_cores.other_threads * 1000) / report.throughput_rps),
            driver: round2((driverCores * 1000) / report.throughput_rps),
          },
    cpu_per_thread: perThread,
    packing: report.packing,
    tail: report.tail,
    transport: report.transport,
    other_processes_cores:
      server.machine_busy_cores === null || server.cpu_cores === null
        ? null
        : round2(Math.max(0, server.machine_busy_cores - server.cpu_cores.total - driverCores)),
    warnings: report.warnings,
  };
}

/**
 * Waits until the server has no call in flight (an overloaded step leaves a backlog that would otherwise
 * be charged to the next one), polling `/metrics`; gives up after `timeoutMs`.
 * @returns the calls still in flight (0 when idle).
 */
export async function waitForIdle(service: ServiceProcess, timeoutMs = 5000): Promise<number> {
  const until = performance.now() + timeoutMs;
  for (;;) {
    const inFlight = sumOf(parsePrometheus(await service.metricsText()), 'ibex_context_in_flight_calls');
    if (inFlight === 0 || performance.now() > until) return inFlight;
    await sleep(100);
  }
}

/** Runs one step (see the module comment). */
export async function measureStep(service: ServiceProcess, opts: StepOptions): Promise<StepRow> {
  await waitForIdle(service);
  const common = {
    addr: service.grpcAddr,
    ...(opts.rate === null ? {} : { rate: opts.rate }),
    connections: opts.connections,
    timeoutMs: opts.timeoutMs,
    source: opts.source,
    transport: opts.transport ?? 'h2',
  };
  if (opts.rampSeconds > 0) await runLoad({ ...common, durationS: opts.rampSeconds });
  const before = await snapshot(service);
  const serverBefore = readThreads(service.pid);
  const driverBefore = readThreads(process.pid);
  const startedAt = performance.now();
  const report = await runLoad({ ...common, durationS: opts.seconds });
  const windowS = (performance.now() - startedAt) / 1000;
  const serverAfter = readThreads(service.pid);
  const driverAfter = readThreads(process.pid);
  const after = await snapshot(service);
  // Every answered call (the drain included) was paid for inside the window.
  const calls = report.requests.completed;
  const perThread = {
    server: serverBefore && serverAfter ? threadCpuStep(serverBefore, serverAfter, windowS, calls) : null,
    driver: driverBefore && driverAfter ? threadCpuStep(driverBefore, driverAfter, windowS, calls) : null,
  };
  return stepRow(report, stepStats(before, after), perThread);
}

/** A step is clean when it met the latency target with no error (degraded answers are reported apart). */
export function isClean(row: StepRow, p99TargetMs: number): boolean {
  return row.errors === 0 && row.p99_ms <= p99TargetMs;
}

/** The cells of the summary table both benches print. */
export function tableCells(row: StepRow): Record<string, string | number> {
  const s = row.server;
  const branchMean = (name: string) => s.branches[name]?.mean_ms ?? 0;
  return {
    achieved: Math.round(row.achieved_rps),
    'ok/s': Math.round(row.ok_rps),
    p50: row.p50_ms,
    p99: row.p99_ms,
    'p99.9': row.p99_9_ms,
    err: row.errors,
    degr: row.degraded,
    'srv ms': s.assembly.mean_ms,
    'wait ms': s.pool_wait.mean_ms,
    'run ms': s.pool_run.mean_ms,
    'dir/hot/cold ms': `${branchMean('directive')}/${branchMean('hot')}/${branchMean('cold')}`,
    'eld p99': s.event_loop_delay_ms.p99,
    'runq ms/s': s.main_thread_sched?.runqueue_wait_ms_per_s ?? '-',
    'srv cpu': s.cpu_cores ? `${s.cpu_cores.total} (${s.cpu_cores.main_thread})` : '-',
    'drv cpu': row.driver.cpu_cores,
    'ms/call main/pool/store/other': row.cpu_per_thread.server?.ms_per_call
      ? (['main', 'pool', 'store', 'other'] as const)
          .map((g) => row.cpu_per_thread.server!.ms_per_call![g])
          .join('/')
      : '-',
    'drv ms/call': row.cpu_per_thread.driver?.ms_per_call?.total ?? '-',
    'constr/chose': `${row.packing.constrained_share}/${row.packing.budget_choice_share}`,
    'drv lag': row.driver.schedule_lag_ms.avg,
    other: row.other_processes_cores ?? '-',
  };
}

/** Human text: where the time of an average call goes at one step. */
export function whereTheTimeGoes(row: StepRow): string[] {
  const s = row.server;
  const b = (name: string) => s.branches[name];
  const fmt = (x: number) => x.toFixed(3);
  const lines = [
    `client: p50 ${row.p50_ms} ms, mean ${row.avg_ms} ms, p99 ${row.p99_ms} ms (from the intended send time)`,
    `server handler (arrival → answer), mean ${fmt(s.assembly.mean_ms)} ms, p99 ≈ ${fmt(s.assembly.p99_ms)} ms:`,
    `  retrieval branches (run concurrently under one wall), mean: ` +
      ['directive', 'hot', 'cold']
        .map(
          (n) =>
            `${n} ${fmt(b(n)?.mean_ms ?? 0)} ms${b(n)?.not_success ? ` (${b(n)!.not_success} not ok)` : ''}`,
        )
        .join(', '),
    `  pool wait (queue + dispatch) mean ${fmt(s.pool_wait.mean_ms)} ms (p99 ≈ ${fmt(s.pool_wait.p99_ms)}), ` +
      `pool run (pack + format) mean ${fmt(s.pool_run.mean_ms)} ms (p99 ≈ ${fmt(s.pool_run.p99_ms)}); ` +
      `pool threads busy ${(s.pool_busy_ratio * 100).toFixed(1)} % of ${s.pool_threads}`,
    `outside the handler (HTTP/2 + protobuf on both sides, both event loops, loopback): mean ≈ ` +
      `${fmt(Math.max(0, row.avg_ms - s.assembly.mean_ms))} ms`,
    `server event-loop delay p99 ${s.event_loop_delay_ms.p99} ms (max ${s.event_loop_delay_ms.max} ms)`,
  ];
  if (s.main_thread_sched) {
    lines.push(
      `server main thread runnable without a CPU ${s.main_thread_sched.runqueue_wait_ms_per_s} ms/s, ` +
        `preempted ${s.main_thread_sched.preemptions_per_s} times/s`,
    );
  }
  if (s.cpu_cores) {
    lines.push(
      `CPU (cores): server ${s.cpu_cores.total} (main thread ${s.cpu_cores.main_thread}, pool/GC/other threads ` +
        `${s.cpu_cores.other_threads}), driver ${row.driver.cpu_cores}, other processes ${row.other_processes_cores ?? '?'}`,
    );
  }
  const pt = row.cpu_per_thread;
  if (pt.server?.ms_per_call) {
    const m = pt.server.ms_per_call;
    lines.push(
      `CPU per call from /proc per thread (ms): server ${m.total} = main ${m.main} + pool ${m.pool} ` +
        `(${pt.server.threads.pool} threads) + store ${m.store} (${pt.server.threads.store}) + other ${m.other}; ` +
        `driver (${row.transport}) ${pt.driver?.ms_per_call?.total ?? '?'}`,
    );
  }
  lines.push(
    `budget mix: ${(row.packing.constrained_share * 100).toFixed(1)} % of calls constrained, the packer chose ` +
      `(≥ 1 candidate excluded for budget) in ${(row.packing.budget_choice_share * 100).toFixed(1)} % of OK answers`,
  );
  if (row.cpu_ms_per_call) {
    const c = row.cpu_ms_per_call;
    lines.push(
      `CPU per call (ms): server main thread ${c.server_main}, server other threads ${c.server_other}, ` +
        `driver ${c.driver}`,
    );
  }
  return lines;
}
