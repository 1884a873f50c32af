/**
 * The engine of `ibex-context load` (issue 5): an autocannon-style AssembleContext load generator that
 * benches can also call in-process.
 *
 * Open loop (`rate` set): requests are scheduled at fixed intervals whatever the responses do, by one
 * timer that wakes about every millisecond and sends every request whose intended time has come, spread
 * round-robin over the connections. Latency is measured from the *intended* send time, so a server stall
 * shows up in the tail instead of silently slowing the sender (coordinated omission corrected, as wrk2
 * does). Closed loop (no `rate`): each connection keeps `pipelining` calls in flight; latency is measured
 * from the actual send.
 */
import { performance } from 'node:perf_hooks';
import { type Client, type ClientUnaryCall, Metadata, status } from '@grpc/grpc-js';
import { build } from 'hdr-histogram-js';
import type { AssembleContextResponse } from '../server/proto.js';
import { errorKey } from './cli-options.js';
import {
  ASSEMBLE_METHOD,
  type CallOutcome,
  type ConnectionOptions,
  connectionMetadata,
  createRawClient,
  LEVEL_METADATA_KEY,
  startUnary,
  type UnaryMethod,
  waitForReady,
} from './context-client.js';
import { type RequestSource, syntheticSource } from './request-source.js';
import { round, type SampleStats, sampleStats } from './stats.js';

/** Options of {@link runLoad}. Durations in seconds, timeouts in milliseconds, rates in requests/s. */
export interface LoadOptions extends ConnectionOptions {
  /** Separate gRPC channels, each with a connection of its own (default 10). */
  connections?: number;
  /** Length of the measured phase, s (default 10). */
  durationS?: number;
  /** Total requests/s over all connections: open loop. Absent or 0 = closed loop. */
  rate?: number;
  /** Closed loop only: calls in flight per connection (default 1). */
  pipelining?: number;
  /** Unrecorded traffic before the measured phase, s (default 0). Same pattern as the measured phase. */
  warmupS?: number;
  /** Per-call gRPC deadline, ms (default 1000). */
  timeoutMs?: number;
  /** Hard bound on measured requests sent (default: none). The run ends once they are all answered. */
  maxRequests?: number;
  /** Where requests come from (default {@link syntheticSource} with seed 1). */
  source?: RequestSource;
  /** How long to wait for every channel to connect before the run, ms (default 5000). */
  connectTimeoutMs?: number;
  /** An OK answer later than deadline + this many ms is counted as `late` (default 2). */
  lateMarginMs?: number;
  /** Open-loop scheduler period, ms (default 1). */
  tickMs?: number;
  /** Period of {@link LoadOptions.onProgress}, ms (default 1000). */
  progressIntervalMs?: number;
  /** Called periodically while the run is going (the CLI draws its progress line with it). */
  onProgress?: (progress: LoadProgress) => void;
  /** Aborting it ends the run early; the report covers what was measured until then. */
  signal?: AbortSignal;
}

/** A snapshot while the run is going. */
export interface LoadProgress {
  phase: 'warmup' | 'measure' | 'drain';
  /** Seconds since the run started (warmup included). */
  elapsedS: number;
  /** Seconds the run is planned to take (warmup + duration). */
  totalS: number;
  /** Measured requests sent so far. */
  sent: number;
  ok: number;
  errors: number;
  inFlight: number;
  /** Answers per second over the last progress interval (warmup included). */
  recentRps: number;
}

/** Latency summary in ms (µs precision: 3 decimals). */
export interface LatencyStats {
  p2_5: number;
  p50: number;
  p97_5: number;
  p99: number;
  p99_9: number;
  avg: number;
  stdev: number;
  min: number;
  max: number;
}

/** Why the measured phase ended. */
export type StopReason = 'duration' | 'max_requests' | 'signal';

/**
 * Result of {@link runLoad}, also what `ibex-context load --json` prints (snake_case on purpose).
 * Counts cover measured requests only (warmup traffic is reported as `requests.warmup_sent`).
 */
export interface LoadReport {
  target: string;
  /** True when `rate` drove the run (latency from the intended send time). */
  open_loop: boolean;
  connections: number;
  /** Calls in flight per connection (closed loop); 1 in open loop. */
  pipelining: number;
  /** Requested total rate, req/s; null in closed loop. */
  rate: number | null;
  /** Seconds of the measured phase actually run. */
  duration_s: number;
  warmup_s: number;
  timeout_ms: number;
  /** The request source's name. */
  source: string;
  stopped_by: StopReason;
  /**
   * Latency of every answered measured call (any status), ms, from an HdrHistogram recorded in µs.
   * Cancelled stragglers (`requests.unfinished`) are not in it.
   */
  latency_ms: LatencyStats;
  requests: {
    /** Measured requests sent. */
    sent: number;
    /** Of those, answered with any status (ok + errors). */
    completed: number;
    ok: number;
    /** Non-OK statuses by gRPC code name (`UNAVAILABLE`); DEADLINE_EXCEEDED split by whose deadline (cli-options `errorKey`). */
    errors: Record<string, number>;
    /** Sum of `errors`. */
    error_total: number;
    /** Up to 3 distinct status details per code name, for a first look. */
    error_details: Record<string, string[]>;
    /** OK answers at a degraded level (from `x-ibex-context-level`, else `degradation.level`). */
    degraded: { L1: number; L2: number };
    /** OK answers by level. */
    levels: { L0: number; L1: number; L2: number };
    /** OK answers with no recognisable level. */
    level_missing: number;
    /** OK answers later than timeout + `lateMarginMs` after their actual send. */
    late: number;
    /** Calls still unanswered when the drain wait ended; cancelled, not counted as errors. */
    unfinished: number;
    /** Unrecorded warmup requests sent. */
    warmup_sent: number;
  };
  /** Measured answers (any status) within the measured phase, per second of it. */
  throughput_rps: number;
  /** Measured requests sent per second of the measured phase (the offered load actually achieved). */
  sent_rps: number;
  /**
   * How late the driver itself sent measured requests after their intended time, ms (open loop: timer
   * granularity and event-loop stalls of the driver; 0 in closed loop). Part of the open-loop latency.
   */
  schedule_lag_ms: { avg: number; max: number };
  /**
   * The driver's own cost over the measured phase: event-loop utilization of this thread (0..1) and CPU
   * seconds of the whole process. A utilization near 1 means the driver, not the server, set the pace.
   */
  driver: { event_loop_utilization: number; cpu_s: number };
  /** Conditions that make the numbers doubtful (driver saturated, unfinished calls, …). */
  warnings: string[];
  /** Answers per full second of the measured phase (autocannon's Req/Sec row). */
  rps: SampleStats & { samples: number };
  /** Response bytes received during the measured phase (message bodies, after framing). */
  bytes: { total: number; per_second: SampleStats };
}

const DEFAULTS = {
  connections: 10,
  durationS: 10,
  pipelining: 1,
  warmupS: 0,
  timeoutMs: 1000,
  connectTimeoutMs: 5000,
  lateMarginMs: 2,
  tickMs: 1,
  progressIntervalMs: 1000,
} as const;

/** Extra time, beyond the call deadline, that the drain waits for grpc-js to report a status. */
const DRAIN_GRACE_MS = 250;

function positive(name: string, value: number, integer: boolean): number {
  if (!Number.isFinite(value) || value <= 0 || (integer && !Number.isInteger(value))) {
    throw new RangeError(
      `runLoad: ${name} must be a positive ${integer ? 'integer' : 'number'}, got ${value}`,
    );
  }
  return value;
}

function levelOf(outcome: CallOutcome<AssembleContextResponse>): string | undefined {
  const header = outcome.metadata.get(LEVEL_METADATA_KEY)[0];
  if (typeof header === 'string' && header !== '') return header;
  return outcome.response?.degradation?.level || undefined;
}

/** Average send lag above which the open-loop schedule is not being kept, ms. */
const LAG_WARNING_MS = 2;

/** The conditions of a finished run that make its numbers doubtful. */
export function warningsOf(r: LoadReport): string[] {
  const out: string[] = [];
  if (r.open_loop && r.schedule_lag_ms.avg > LAG_WARNING_MS) {
    out.push(
      `the driver sent ${r.schedule_lag_ms.avg} ms late on average (max ${r.schedule_lag_ms.max} ms): it could ` +
        'not keep its own schedule, and that lag is inside the latencies; lower -c/-R or give the driver its own cores',
    );
  }
  if (r.requests.unfinished > 0) {
    out.push(`${r.requests.unfinished} call(s) were still unanswered after the deadline and were cancelled`);
  }
  if (r.requests.level_missing > 0) {
    out.push(`${r.requests.level_missing} OK answer(s) carried no degradation level`);
  }
  return out;
}

/**
 * Runs one load test and resolves with its report. Never rejects on gRPC statuses (they are counted).
 * @throws RangeError for invalid options; Error when a channel cannot connect within `connectTimeoutMs`.
 */
export async function runLoad(opts: LoadOptions): Promise<LoadReport> {
  const connections = positive('connections', opts.connections ?? DEFAULTS.connections, true);
  const durationS = positive('durationS', opts.durationS ?? DEFAULTS.durationS, false);
  const pipelining = positive('pipelining', opts.pipelining ?? DEFAULTS.pipelining, true);
  const timeoutMs = positive('timeoutMs', opts.timeoutMs ?? DEFAULTS.timeoutMs, false);
  const tickMs = positive('tickMs', opts.tickMs ?? DEFAULTS.tickMs, false);
  const progressMs = positive(
    'progressIntervalMs',
    opts.progressIntervalMs ?? DEFAULTS.progressIntervalMs,
    false,
  );
  const warmupS = opts.warmupS ?? DEFAULTS.warmupS;
  if (!Number.isFinite(warmupS) || warmupS < 0)
    throw new RangeError(`runLoad: warmupS must be ≥ 0, got ${warmupS}`);
  const rate = opts.rate ?? 0;
  if (!Number.isFinite(rate) || rate < 0) throw new RangeError(`runLoad: rate must be ≥ 0, got ${rate}`);
  const openLoop = rate > 0;
  const maxRequests = opts.maxRequests ?? Number.POSITIVE_INFINITY;
  if (!(maxRequests >= 1)) throw new RangeError(`runLoad: maxRequests must be ≥ 1, got ${maxRequests}`);
  const lateMarginMs = opts.lateMarginMs ?? DEFAULTS.lateMarginMs;
  const source = opts.source ?? syntheticSource();

  const clients: Client[] = [];
  try {
    for (let i = 0; i < connections; i++) {
      // A local subchannel pool gives each channel its own TCP connection; with the global pool all
      // channels to one address would share one HTTP/2 connection and `-c` would mean nothing.
      clients.push(createRawClient(opts, { 'grpc.use_local_subchannel_pool': 1 }));
    }
    const connectTimeoutMs = opts.connectTimeoutMs ?? DEFAULTS.connectTimeoutMs;
    await Promise.all(clients.map((c) => waitForReady(c, opts.addr, connectTimeoutMs)));
    return await drive();
  } finally {
    for (const c of clients) c.close();
  }

  function drive(): Promise<LoadReport> {
    const base = connectionMetadata(opts);
    const hasBaseMetadata = Boolean(opts.token);

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

    // Response bytes, counted where grpc-js hands the message body to the decoder.
    let windowBytes = 0;
    const bytesPerSecond: number[] = [];
    const method: UnaryMethod = {
      ...ASSEMBLE_METHOD,
      responseDeserialize: (buf: Buffer) => {
        const now = performance.now();
        if (now >= measureStart && now <= windowEnd) {
          windowBytes += buf.length;
          const s = Math.floor((now - measureStart) / 1000);
          bytesPerSecond[s] = (bytesPerSecond[s] ?? 0) + buf.length;
        }
        return ASSEMBLE_METHOD.responseDeserialize(buf);
      },
    };

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
    const answersPerSecond: number[] = [];

    const inFlight = new Set<ClientUnaryCall>();
    const cancelledByUs = new WeakSet<ClientUnaryCall>();
    let stopped = false;
    let stoppedBy: StopReason = 'duration';
    let onIdle: (() => void) | undefined;

    const record = (
      outcome: CallOutcome<AssembleContextResponse>,
      call: ClientUnaryCall,
      intendedAt: number,
      sentAt: number,
      doneAt: number,
    ) => {
      if (cancelledByUs.has(call)) {
        unfinished++;
        return;
      }
      completed++;
      lastMeasuredDoneAt = doneAt;
      if (doneAt <= windowEnd) {
        completedInWindow++;
        const s = Math.floor((doneAt - measureStart) / 1000);
        answersPerSecond[s] = (answersPerSecond[s] ?? 0) + 1;
      }
      hist.recordValue(Math.max(1, Math.round((doneAt - intendedAt) * 1000)));
      const code = outcome.status.code;
      if (code !== status.OK) {
        const name = errorKey(outcome.status, doneAt - sentAt, timeoutMs);
        errors[name] = (errors[name] ?? 0) + 1;
        errorTotal++;
        const details = errorDetails[name] ?? [];
        errorDetails[name] = details;
        if (details.length < 3 && !details.includes(outcome.status.details))
          details.push(outcome.status.details);
        return;
      }
      ok++;
      if (doneAt - sentAt > timeoutMs + lateMarginMs) late++;
      const level = levelOf(outcome);
      if (level === 'L0' || level === 'L1' || level === 'L2') levels[level]++;
      else levelMissing++;
    };

    const send = (client: Client, intendedAt: number, measured: boolean, then?: () => void) => {
      const sentAt = performance.now();
      if (measured) {
        sent++;
        const lag = sentAt - intendedAt;
        lagSumMs += lag;
        if (lag > lagMaxMs) lagMaxMs = lag;
      } else {
        warmupSent++;
      }
      const md = hasBaseMetadata ? base.clone() : new Metadata();
      const call: ClientUnaryCall = startUnary<AssembleContextResponse>(
        client,
        method,
        source.next(),
        md,
        Date.now() + timeoutMs,
        (outcome) => {
          const doneAt = performance.now();
          inFlight.delete(call);
          answeredSinceProgress++;
          if (measured) record(outcome, call, intendedAt, sentAt, doneAt);
          if (then !== undefined && !stopped) then();
          if (stopped && inFlight.size === 0) onIdle?.();
        },
      );
      inFlight.add(call);
    };

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
        clearInterval(scheduler);
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
        // Every call carries the deadline, so grpc-js ends each within timeoutMs of its send.
        if (inFlight.size > 0) await idleOrAfter(timeoutMs + DRAIN_GRACE_MS);
        if (inFlight.size > 0) {
          for (const call of inFlight) {
            cancelledByUs.add(call);
            call.cancel();
          }
          await idleOrAfter(DRAIN_GRACE_MS);
          // Anything grpc-js still has not closed is abandoned (the channels close next).
          unfinished += inFlight.size;
        }
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
        // One timer for the whole run: per-request timers would cost more than the calls at 4k rps on
        // two cores, and setTimeout's ~1 ms floor makes finer scheduling pointless anyway.
        scheduler = setInterval(() => {
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
            send(clients[rr++ % connections]!, intendedAt, measured);
          }
          // The run lasts its duration even when the last request was due long before the end.
          if (now >= endAt) stop('duration');
        }, tickMs);
      } else {
        const worker = (client: Client) => {
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
          send(client, now, measured, () => worker(client));
        };
        // Workers only wake on answers; this ends the run on time even if every call hangs.
        endTimer = setTimeout(() => stop('duration'), endAt - performance.now());
        for (const client of clients) for (let j = 0; j < pipelining; j++) worker(client);
      }
    });
  }
}
