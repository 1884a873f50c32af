// The engine of `ibex-context load`, an autocannon-style generator benches also call in-process. A scheduler
// (load-open-loop.ts, load-closed-loop.ts) decides when calls go out, a LoadRun sends and expires them, a
// LoadRecorder counts, and this module wires them up. Transport choice: docs/design/load-driver.md.
import { performance } from 'node:perf_hooks';
import { closedLoop } from './load-closed-loop.js';
import { openLoop } from './load-open-loop.js';
import { LoadRecorder } from './load-recorder.js';
import { warningsOf } from './load-report.js';
import { LoadRun } from './load-run.js';
import { type DriverTransport, openTransport } from './load-transport.js';
import {
  LOAD_DEFAULTS,
  type LoadOptions,
  type LoadPhases,
  type LoadReport,
  type ResolvedLoadOptions,
  resolveLoadOptions,
  type StopReason,
} from './load-types.js';
import { round } from './stats.js';

export { warningsOf } from './load-report.js';
export type {
  LatencyStats,
  LoadCall,
  LoadOptions,
  LoadProgress,
  LoadReport,
  StopReason,
} from './load-types.js';

/**
 * Runs one load test; gRPC statuses are counted, never thrown.
 * @throws RangeError for invalid options; Error when a connection cannot be made within `connectTimeoutMs`.
 */
export async function runLoad(opts: LoadOptions): Promise<LoadReport> {
  const o = resolveLoadOptions(opts);
  const transport = openTransport(o.transportName, opts, o.connections);
  try {
    await transport.ready(opts.connectTimeoutMs ?? LOAD_DEFAULTS.connectTimeoutMs);
    // Encoding thousands of distinct LoCoMo turns inside the run would charge it to the first pass.
    if (o.source.requests) transport.prepare(o.source.requests);
    return await drive(opts, o, transport);
  } finally {
    transport.close();
  }
}

/** The driver's own cost from the start of the measured phase: ELU of this thread, CPU of the process. */
function driverMeter(warmupS: number) {
  let elu = performance.eventLoopUtilization();
  let cpu = process.cpuUsage();
  const atMeasureStart = setTimeout(
    () => {
      elu = performance.eventLoopUtilization();
      cpu = process.cpuUsage();
    },
    Math.max(0, warmupS * 1000),
  );
  return (): LoadReport['driver'] => {
    clearTimeout(atMeasureStart);
    const used = process.cpuUsage(cpu);
    return {
      event_loop_utilization: round(performance.eventLoopUtilization(elu).utilization, 3),
      cpu_s: round((used.user + used.system) / 1e6, 3),
    };
  };
}

/** Calls `opts.onProgress` every `progressMs` while the run goes; the returned function ends it. */
function progressReporter(opts: LoadOptions, o: ResolvedLoadOptions, run: LoadRun, phases: LoadPhases) {
  const onProgress = opts.onProgress;
  if (!onProgress) return () => {};
  let lastAt = phases.t0;
  const report = () => {
    const now = performance.now();
    const rec = run.recorder;
    const phase = run.stopped ? 'drain' : now < phases.measureStart ? 'warmup' : 'measure';
    onProgress({
      phase,
      elapsedS: round((now - phases.t0) / 1000, 1),
      totalS: o.warmupS + o.durationS,
      sent: rec.requests.sent,
      ok: rec.requests.ok,
      errors: rec.requests.error_total,
      inFlight: run.inFlightCount,
      recentRps: Math.round((rec.answeredSinceProgress * 1000) / Math.max(1, now - lastAt)),
    });
    rec.answeredSinceProgress = 0;
    lastAt = now;
  };
  const timer = setInterval(report, o.progressMs);
  return () => {
    clearInterval(timer);
    report();
  };
}

async function drive(
  opts: LoadOptions,
  o: ResolvedLoadOptions,
  transport: DriverTransport,
): Promise<LoadReport> {
  const t0 = performance.now();
  const measureStart = t0 + o.warmupS * 1000;
  const phases: LoadPhases = {
    t0,
    measureStart,
    endAt: measureStart + o.durationS * 1000,
    maxRequests: o.maxRequests,
  };
  const recorder = new LoadRecorder({
    ...phases,
    timeoutMs: o.timeoutMs,
    lateMarginMs: o.lateMarginMs,
    verify: o.verify,
    tailThresholdMs: o.tailThresholdMs,
  });
  const run = new LoadRun(transport, recorder, {
    source: o.source,
    timeoutMs: o.timeoutMs,
    onCall: opts.onCall,
  });
  const meter = driverMeter(o.warmupS);
  const endProgress = progressReporter(opts, o, run, phases);

  const onAbort = () => run.stop('signal');
  let stopScheduler = () => {};
  if (opts.signal?.aborted) run.stop('signal');
  else {
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    stopScheduler = o.openLoop
      ? openLoop(run, { ...phases, rate: o.rate, connections: o.connections, tickMs: o.tickMs })
      : closedLoop(run, { ...phases, connections: o.connections, pipelining: o.pipelining });
  }
  const stoppedBy = await run.whenStopped;
  stopScheduler();
  opts.signal?.removeEventListener('abort', onAbort);
  recorder.stoppedAt(stoppedBy, performance.now());
  await run.drain();
  endProgress();
  return report(opts, o, transport, recorder, stoppedBy, { windowMs: recorder.windowMs(), driver: meter() });
}

function report(
  opts: LoadOptions,
  o: ResolvedLoadOptions,
  transport: DriverTransport,
  recorder: LoadRecorder,
  stoppedBy: StopReason,
  measured: { windowMs: number; driver: LoadReport['driver'] },
): LoadReport {
  const r: LoadReport = {
    target: opts.addr,
    open_loop: o.openLoop,
    connections: o.connections,
    pipelining: o.openLoop ? 1 : o.pipelining,
    rate: o.openLoop ? o.rate : null,
    duration_s: round(measured.windowMs / 1000, 3),
    warmup_s: o.warmupS,
    timeout_ms: o.timeoutMs,
    source: o.source.name,
    transport: transport.name,
    stopped_by: stoppedBy,
    latency_ms: recorder.latency(),
    split_ms: recorder.split(),
    requests: recorder.requests,
    packing: recorder.packing(),
    ...recorder.rates(measured.windowMs),
    tail: recorder.tail(),
    driver: measured.driver,
    warnings: [],
  };
  r.warnings = warningsOf(r);
  return r;
}
