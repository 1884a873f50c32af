/**
 * Shapes of `ibex-context load`: the options of `runLoad`, its progress snapshots
 * and its report (what `load --json` prints, snake_case on purpose).
 */
import type { ConnectionOptions } from './context-client.js';
import type { TransportName } from './load-transport.js';
import type { RawOutcome } from './raw-grpc.js';
import { type RequestSource, syntheticSource } from './request-source.js';
import type { SampleStats } from './stats.js';
import type { TailReport } from './tail-incidents.js';

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
  /**
   * A measured call slower than this (from its intended send time) is counted in the report's `tail`,
   * ms (default 20, the p99 target).
   */
  tailThresholdMs?: number;
  /** Shortest open-loop timer delay, ms (default 1): the timer is armed for the next intended send, never sooner. */
  tickMs?: number;
  /** Period of {@link LoadOptions.onProgress}, ms (default 1000). */
  progressIntervalMs?: number;
  /** Called periodically while the run is going (the CLI draws its progress line with it). */
  onProgress?: (progress: LoadProgress) => void;
  /** Aborting it ends the run early; the report covers what was measured until then. */
  signal?: AbortSignal;
  /**
   * How calls go on the wire (default `h2`: pre-encoded messages over `node:http2`; `grpc-js` when
   * `channelOptions` are given, since only grpc-js channels read them).
   */
  transport?: TransportName;
  /**
   * Decode every OK response in full and check it against its level header (default false: only the
   * packing counters are read from the bytes). Costs the driver CPU; for correctness runs, not figures.
   */
  verify?: boolean;
  /**
   * Sees every call of the run as it ends, warmup included (benches tally outcomes per window with it,
   * bench/lib/outcomes.ts). Runs on the driver's event loop, once per call: keep it cheap.
   */
  onCall?: (call: LoadCall) => void;
}

/**
 * One ended call as {@link LoadOptions.onCall} sees it: the transport's outcome (status, what ended it,
 * level, bytes) with its times, `performance.now()` ms. `body` is null unless the run keeps bodies, and
 * valid only until `onCall` returns ({@link RawOutcome.body}).
 */
export interface LoadCall extends RawOutcome {
  /** When it actually went out. */
  sentAt: number;
  doneAt: number;
  /** False for warmup calls. */
  measured: boolean;
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

/** The run's phases, `performance.now()` ms, and its bound on measured requests. */
export interface LoadPhases {
  /** Start of the run (warmup included). */
  t0: number;
  /** Start of the measured phase. */
  measureStart: number;
  /** End of the measured phase. */
  endAt: number;
  /** Stop once this many measured requests were sent (Infinity: no bound). */
  maxRequests: number;
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
  /** `h2` (pre-encoded frames over node:http2) or `grpc-js`. */
  transport: TransportName;
  stopped_by: StopReason;
  /**
   * Latency of every answered measured call (any status), ms, from an HdrHistogram recorded in µs.
   * Cancelled stragglers (`requests.unfinished`) are not in it.
   */
  latency_ms: LatencyStats;
  /**
   * OK answers split at the service's own clock (`metrics.total_ms`, contract.md §9): `service` is that total,
   * from the handler's start (request received and decoded) to its answer; `outside` is the rest of each
   * call's latency from its actual send: both directions of the transport, the service's receive and
   * decode before its handler and its write after the answer, the driver's own delays. ms, ±0.5 ms per call (total_ms is whole ms);
   * `answers` counts the OK answers that carried metrics (0: both are 0).
   */
  split_ms: { answers: number; service: SplitQuantiles; outside: SplitQuantiles };
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
  /**
   * The budget mix: measured calls sent with `available_tokens` (constrained), and OK answers
   * where the packer had to choose: at least one candidate excluded for `budget` (contract.md §8), read from
   * `memories_used` in the response bytes. `budget_choice_share` is over OK answers.
   */
  packing: {
    constrained_sent: number;
    constrained_share: number;
    budget_choice: number;
    budget_choice_share: number;
    /** OK answers whose bytes could not be read (malformed), or failed `--verify`. */
    unreadable: number;
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
  /** The slow calls (over `tailThresholdMs`) grouped into incidents by send time (tail-incidents.ts). */
  tail: TailReport;
}

/** p50 and p99 of one part of {@link LoadReport.split_ms}, ms. */
export interface SplitQuantiles {
  p50: number;
  p99: number;
}

/** Defaults of {@link LoadOptions}. */
export const LOAD_DEFAULTS = {
  connections: 10,
  durationS: 10,
  pipelining: 1,
  warmupS: 0,
  timeoutMs: 1000,
  connectTimeoutMs: 5000,
  lateMarginMs: 2,
  tailThresholdMs: 20,
  tickMs: 1,
  progressIntervalMs: 1000,
} as const;

function positive(name: string, value: number, integer: boolean): number {
  if (!Number.isFinite(value) || value <= 0 || (integer && !Number.isInteger(value))) {
    throw new RangeError(
      `runLoad: ${name} must be a positive ${integer ? 'integer' : 'number'}, got ${value}`,
    );
  }
  return value;
}

/** {@link LoadOptions} with defaults applied and checked ({@link resolveLoadOptions}). */
export type ResolvedLoadOptions = ReturnType<typeof resolveLoadOptions>;

/**
 * {@link LoadOptions} with defaults applied and checked.
 * @throws RangeError naming the first invalid option.
 */
export function resolveLoadOptions(opts: LoadOptions) {
  const connections = positive('connections', opts.connections ?? LOAD_DEFAULTS.connections, true);
  const durationS = positive('durationS', opts.durationS ?? LOAD_DEFAULTS.durationS, false);
  const pipelining = positive('pipelining', opts.pipelining ?? LOAD_DEFAULTS.pipelining, true);
  const timeoutMs = positive('timeoutMs', opts.timeoutMs ?? LOAD_DEFAULTS.timeoutMs, false);
  const tickMs = positive('tickMs', opts.tickMs ?? LOAD_DEFAULTS.tickMs, false);
  const progressMs = positive(
    'progressIntervalMs',
    opts.progressIntervalMs ?? LOAD_DEFAULTS.progressIntervalMs,
    false,
  );
  const warmupS = opts.warmupS ?? LOAD_DEFAULTS.warmupS;
  if (!Number.isFinite(warmupS) || warmupS < 0)
    throw new RangeError(`runLoad: warmupS must be ≥ 0, got ${warmupS}`);
  const rate = opts.rate ?? 0;
  if (!Number.isFinite(rate) || rate < 0) throw new RangeError(`runLoad: rate must be ≥ 0, got ${rate}`);
  const openLoop = rate > 0;
  const maxRequests = opts.maxRequests ?? Number.POSITIVE_INFINITY;
  if (!(maxRequests >= 1)) throw new RangeError(`runLoad: maxRequests must be ≥ 1, got ${maxRequests}`);
  const lateMarginMs = opts.lateMarginMs ?? LOAD_DEFAULTS.lateMarginMs;
  const tailThresholdMs = positive(
    'tailThresholdMs',
    opts.tailThresholdMs ?? LOAD_DEFAULTS.tailThresholdMs,
    false,
  );
  const source = opts.source ?? syntheticSource();
  const verify = opts.verify ?? false;
  const transportName = opts.transport ?? (opts.channelOptions ? 'grpc-js' : 'h2');

  return {
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
    tailThresholdMs,
    source,
    verify,
    transportName,
  };
}
