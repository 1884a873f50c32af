/**
 * The engine of `ibex-context load` (issue 5, issue 10): an autocannon-style AssembleContext load
 * generator that benches can also call in-process.
 *
 * Calls go out as pre-encoded frames over one `node:http2` session per connection (see
 * src/client/load-transport.ts): the driver costs a fraction of what a grpc-js client per call costs, so
 * on a small machine the figures measure the server, not the driver.
 *
 * Open loop (`rate` set): requests are scheduled at fixed intervals whatever the responses do, by one
 * timer that wakes about every millisecond and sends every request whose intended time has come, spread
 * round-robin over the connections. Latency is measured from the *intended* send time, so a server stall
 * shows up in the tail instead of silently slowing the sender (coordinated omission corrected, as wrk2
 * does). Closed loop (no `rate`): each connection keeps `pipelining` calls in flight; latency is measured
 * from the actual send. Latencies go into an HdrHistogram in µs.
 */
import { performance } from 'node:perf_hooks';
import { build } from 'hdr-histogram-js';
import { errorKey } from './cli-options.js';
import { warningsOf } from './load-report.js';
import { type DriverCall, openTransport, readAnswer } from './load-transport.js';
import {
  LOAD_DEFAULTS,
  type LoadOptions,
  type LoadProgress,
  type LoadReport,
  resolveLoadOptions,
  type StopReason,
} from './load-types.js';
import type { RawOutcome } from './raw-grpc.js';
import { round, sampleStats } from './stats.js';

export { warningsOf } from './load-report.js';
export type { LatencyStats, LoadOptions, LoadProgress, LoadReport, StopReason } from './load-types.js';

/** Extra time, beyond the call deadline, that the drain waits for calls to end. */
const DRAIN_GRACE_MS = 250;
/** Period of the sweep that ends calls past their deadline on the driver's side, ms. */
const SWEEP_MS = 25;

/** In-flight bookkeeping of one call; past `expiresAt` (performance.now()) it ends DEADLINE_EXCEEDED. */
interface Pending {
  call: DriverCall;
  expiresAt: number;
  cancelledByUs: boolean;
}

/**
 * Runs one load test and resolves with its report. Never rejects on gRPC statuses (they are counted).
 * @throws RangeError for invalid options; Error when a connection cannot be made within `connectTimeoutMs`.
 */
export async function runLoad(opts: LoadOptions): Promise<LoadReport> {
  const {
    connections,
    durationS,
    pipelining,
    timeoutMs,
    tickMs,
    progressMs,
    warmupS,
    rate,
    openLoop,
    maxRequests,
    lateMarginMs,
    source,
    verify,
    transportName,
  } = resolveLoadOptions(opts);

  const transport = openTransport(transportName, opts, connections);
  try {
    await transport.ready(opts.connectTimeoutMs ?? LOAD_DEFAULTS.connectTimeoutMs);
    // Encoding thousands of distinct LoCoMo turns inside the run would charge it to the first pass.
    if (source.requests) transport.prepare(source.requests);
    return await drive();
  } finally {
    transport.close();
  }

  function drive(): Promise<LoadReport> {
    const t0 = performance.now();
    let eluAtStart = performance.eventLoopUtilization();
    let cpuAtStart = process.cpuUsage();
    const snapshotAtMeasureStart = setTimeout(
      () => {
        eluAtStart = performance.eventLoopUtilization();
        cpuAtStart = process.cpuUsage();
      },
      Math.max(0, warmupS * 1000),
    );
    const measureStart = t0 + warmupS * 1000;
    const endAt = measureStart + durationS * 1000;
    // Answers after windowEnd are still counted and timed, but not in the throughput of the window.
    let windowEnd = endAt;

    let windowBytes = 0;
    const bytesPerSecond: number[] = [];
    const hist = build({ lowestDiscernibleValue: 1, numberOfSignificantValueDigits: 3, autoResize: true });
    const errors: Record<string, number> = {};
    const errorDetails: Record<string, string[]> = {};
    const levels = { L0: 0, L1: 0, L2: 0 };
    let sent = 0;
    let warmupSent = 0;
    let completed = 0;
    let completedInWindow = 0;
    let ok = 0;
    let errorTotal = 0;
    let levelMissing = 0;
    let late = 0;
    let unfinished = 0;
    let answeredSinceProgress = 0;
    let lastMeasuredDoneAt = 0;
    let lagSumMs = 0;
    let lagMaxMs = 0;
    let constrainedSent = 0;
    let budgetChoice = 0;
    let unreadable = 0;
    const answersPerSecond: number[] = [];

    // Insertion order is send order and every call has the same timeout, so expiry is in order too.
    const inFlight = new Map<Pending, true>();
    let stopped = false;
    let stoppedBy: StopReason = 'duration';
    let onIdle: (() => void) | undefined;

    const record = (o: RawOutcome, p: Pending, intendedAt: number, sentAt: number, doneAt: number) => {
      if (p.cancelledByUs) {
        unfinished++;
        return;
      }
      completed++;
      lastMeasuredDoneAt = doneAt;
      const bytes = Math.max(0, o.bytes - 5);
      if (doneAt <= windowEnd) {
        completedInWindow++;
        const s = Math.floor((doneAt - measureStart) / 1000);
        answersPerSecond[s] = (answersPerSecond[s] ?? 0) + 1;
        windowBytes += bytes;
        bytesPerSecond[s] = (bytesPerSecond[s] ?? 0) + bytes;
      }
      hist.recordValue(Math.max(1, Math.round((doneAt - intendedAt) * 1000)));
      if (o.code !== 0) {
        const name = errorKey(o, doneAt - sentAt, timeoutMs);
        errors[name] = (errors[name] ?? 0) + 1;
        errorTotal++;
        const details = errorDetails[name] ?? [];
        errorDetails[name] = details;
        if (details.length < 3 && !details.includes(o.details)) details.push(o.details);
        return;
      }
      ok++;
      if (doneAt - sentAt > timeoutMs + lateMarginMs) late++;
      const answer = readAnswer(o, verify);
      if (answer.budgetChoice) budgetChoice++;
      if (answer.unreadable) unreadable++;
      const level = answer.level;
      if (level === 'L0' || level === 'L1' || level === 'L2') levels[level]++;
      else levelMissing++;
    };

    const send = (conn: number, intendedAt: number, measured: boolean, then?: () => void) => {
      const sentAt = performance.now();
      const req = source.next();
      if (measured) {
        sent++;
        if ((req.available_tokens ?? 0) > 0) constrainedSent++;
        const lag = sentAt - intendedAt;
        lagSumMs += lag;
        if (lag > lagMaxMs) lagMaxMs = lag;
      } else {
        warmupSent++;
      }
      const p: Pending = {
        call: undefined as unknown as DriverCall,
        expiresAt: sentAt + timeoutMs,
        cancelledByUs: false,
      };
      inFlight.set(p, true);
      p.call = transport.call(conn, req, timeoutMs, measured, (o) => {
        const doneAt = performance.now();
        inFlight.delete(p);
        answeredSinceProgress++;
        if (measured) record(o, p, intendedAt, sentAt, doneAt);
        if (then !== undefined && !stopped) then();
        if (stopped && inFlight.size === 0) onIdle?.();
      });
    };

    // Ends calls past their deadline (a server that never answers); the server's own status usually wins.
    const sweeper = setInterval(() => {
      const now = performance.now();
      for (const p of inFlight.keys()) {
        if (p.expiresAt > now) break;
        p.call.expire();
      }
    }, SWEEP_MS);

    return new Promise<LoadReport>((resolve) => {
      let scheduler: NodeJS.Timeout | undefined;
      let endTimer: NodeJS.Timeout | undefined;
      let progressTimer: NodeJS.Timeout | undefined;
      let lastProgressAt = t0;

      const progress = (phase: LoadProgress['phase']) => {
        if (!opts.onProgress) return;
        const now = performance.now();
        const recentRps = (answeredSinceProgress * 1000) / Math.max(1, now - lastProgressAt);
        answeredSinceProgress = 0;
        lastProgressAt = now;
        opts.onProgress({
          phase,
          elapsedS: round((now - t0) / 1000, 1),
          totalS: warmupS + durationS,
          sent,
          ok,
          errors: errorTotal,
          inFlight: inFlight.size,
          recentRps: Math.round(recentRps),
        });
      };
      if (opts.onProgress) {
        progressTimer = setInterval(() => {
          progress(stopped ? 'drain' : performance.now() < measureStart ? 'warmup' : 'measure');
        }, progressMs);
      }

      const onAbort = () => stop('signal');
      const stop = (reason: StopReason) => {
        if (stopped) return;
        stopped = true;
        stoppedBy = reason;
        clearTimeout(scheduler);
        clearTimeout(endTimer);
        opts.signal?.removeEventListener('abort', onAbort);
        const now = performance.now();
        if (reason === 'signal') windowEnd = Math.min(windowEnd, now);
        // A max-requests run lasts until its last request is answered, however long that takes.
        if (reason === 'max_requests') windowEnd = Number.POSITIVE_INFINITY;
        void drain().then(finish);
      };

      /** Resolves when the last call in flight ends, or after `ms`, whichever comes first. */
      const idleOrAfter = (ms: number) =>
        new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, ms);
          onIdle = () => {
            clearTimeout(timer);
            resolve();
          };
        });

      const drain = async () => {
        // The sweep ends every call within timeoutMs (+ one sweep period) of its send.
        if (inFlight.size > 0) await idleOrAfter(timeoutMs + DRAIN_GRACE_MS);
        if (inFlight.size > 0) {
          for (const p of [...inFlight.keys()]) {
            p.cancelledByUs = true;
            p.call.expire(1, 'cancelled by the driver at the end of the run');
          }
        }
        clearInterval(sweeper);
      };

      const finish = () => {
        clearInterval(progressTimer);
        progress('drain');
        if (windowEnd === Number.POSITIVE_INFINITY) windowEnd = Math.max(measureStart, lastMeasuredDoneAt);
        const windowMs = Math.max(0, windowEnd - measureStart);
        const durationSActual = windowMs / 1000;
        // The epsilon absorbs float error: a 2 s window computed as 1999.9999999 ms still has 2 full seconds.
        const fullSeconds = Math.floor(windowMs / 1000 + 1e-6);
        const perSecond = (buckets: number[]): number[] =>
          fullSeconds === 0
            ? durationSActual > 0
              ? [Math.round(buckets.reduce((s, v) => s + (v ?? 0), 0) / durationSActual)]
              : []
            : Array.from({ length: fullSeconds }, (_, i) => buckets[i] ?? 0);
        const rpsSamples = perSecond(answersPerSecond);
        const cpu = process.cpuUsage(cpuAtStart);
        const us = (v: number) => round(v / 1000, 3);
        const empty = hist.totalCount === 0;
        const report: LoadReport = {
          target: opts.addr,
          open_loop: openLoop,
          connections,
          pipelining: openLoop ? 1 : pipelining,
          rate: openLoop ? rate : null,
          duration_s: round(durationSActual, 3),
          warmup_s: warmupS,
          timeout_ms: timeoutMs,
          source: source.name,
          transport: transport.name,
          stopped_by: stoppedBy,
          latency_ms: {
            p2_5: us(hist.getValueAtPercentile(2.5)),
            p50: us(hist.getValueAtPercentile(50)),
            p97_5: us(hist.getValueAtPercentile(97.5)),
            p99: us(hist.getValueAtPercentile(99)),
            p99_9: us(hist.getValueAtPercentile(99.9)),
            avg: empty ? 0 : us(hist.mean),
            stdev: empty ? 0 : us(hist.stdDeviation),
            min: empty ? 0 : us(hist.minNonZeroValue),
            max: us(hist.maxValue),
          },
          requests: {
            sent,
            completed,
            ok,
            errors,
            error_total: errorTotal,
            error_details: errorDetails,
            degraded: { L1: levels.L1, L2: levels.L2 },
            levels,
            level_missing: levelMissing,
            late,
            unfinished,
            warmup_sent: warmupSent,
          },
          packing: {
            constrained_sent: constrainedSent,
            constrained_share: sent > 0 ? round(constrainedSent / sent, 3) : 0,
            budget_choice: budgetChoice,
            budget_choice_share: ok > 0 ? round(budgetChoice / ok, 3) : 0,
            unreadable,
          },
          throughput_rps: durationSActual > 0 ? round(completedInWindow / durationSActual, 1) : 0,
          sent_rps: durationSActual > 0 ? round(sent / durationSActual, 1) : 0,
          schedule_lag_ms: { avg: sent > 0 ? round(lagSumMs / sent, 3) : 0, max: round(lagMaxMs, 3) },
          rps: { ...sampleStats(rpsSamples), samples: rpsSamples.length },
          bytes: { total: windowBytes, per_second: sampleStats(perSecond(bytesPerSecond)) },
          driver: {
            event_loop_utilization: round(performance.eventLoopUtilization(eluAtStart).utilization, 3),
            cpu_s: round((cpu.user + cpu.system) / 1e6, 3),
          },
          warnings: [],
        };
        clearTimeout(snapshotAtMeasureStart);
        hist.destroy();
        report.warnings = warningsOf(report);
        resolve(report);
      };

      if (opts.signal?.aborted) {
        stop('signal');
        return;
      }
      opts.signal?.addEventListener('abort', onAbort, { once: true });

      if (openLoop) {
        const intervalMs = 1000 / rate;
        let k = 0;
        let rr = 0;
        // One timer at a time, armed for the next intended send: per-request timers would cost more than
        // the calls at 4k rps on two cores, and a fixed 1 ms interval wakes the driver 1,000 times a second
        // even at 100 req/s. setTimeout's ~1 ms floor (tickMs) batches what falls due in between.
        const tick = () => {
          const now = performance.now();
          for (;;) {
            const intendedAt = t0 + k * intervalMs;
            if (intendedAt >= endAt || intendedAt > now) break;
            const measured = intendedAt >= measureStart;
            if (measured && sent >= maxRequests) {
              stop('max_requests');
              return;
            }
            k++;
            send(rr++ % connections, intendedAt, measured);
          }
          // The run lasts its duration even when the last request was due long before the end.
          if (now >= endAt) {
            stop('duration');
            return;
          }
          const next = Math.min(t0 + k * intervalMs, endAt);
          scheduler = setTimeout(tick, Math.max(tickMs, next - performance.now()));
        };
        scheduler = setTimeout(tick, 0);
      } else {
        const worker = (conn: number) => {
          if (stopped) return;
          const now = performance.now();
          if (now >= endAt) {
            stop('duration');
            return;
          }
          const measured = now >= measureStart;
          if (measured && sent >= maxRequests) {
            stop('max_requests');
            return;
          }
          send(conn, now, measured, () => worker(conn));
        };
        // Workers only wake on answers; this ends the run on time even if every call hangs.
        endTimer = setTimeout(() => stop('duration'), endAt - performance.now());
        for (let c = 0; c < connections; c++) for (let j = 0; j < pipelining; j++) worker(c);
      }
    });
  }
}
