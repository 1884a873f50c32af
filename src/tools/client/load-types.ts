// Shapes of `ibex-context load`: options, progress snapshots and the report (`load --json`: snake_case).
import type { ConnectionOptions } from './context-client.js';
import type { TransportName } from './load-transport.js';
import type { RawOutcome } from './raw-grpc.js';
import { type RequestSource, syntheticSource } from './request-source.js';
import type { SampleStats } from './stats.js';
import type { TailReport } from './tail-incidents.js';

/** Options of {@link runLoad}. Durations in seconds, timeouts in milliseconds, rates in requests/s. */
export interface LoadOptions extends ConnectionOptions {
  connections?: number;
  durationS?: number;
  /** Total requests/s over all connections (open loop); absent or 0 = closed loop. */
  rate?: number;
  pipelining?: number;
  warmupS?: number;
  timeoutMs?: number;
  /** Bound on measured requests sent; the run ends once they are all answered. */
  maxRequests?: number;
  source?: RequestSource;
  connectTimeoutMs?: number;
  /** An OK answer later than deadline + this many ms counts as `late`. */
  lateMarginMs?: number;
  /** A measured call slower than this (ms from its intended send) is counted in `tail`. */
  tailThresholdMs?: number;
  /** Shortest open-loop timer delay, ms: the timer is armed for the next intended send, never sooner. */
  tickMs?: number;
  progressIntervalMs?: number;
  onProgress?: (progress: LoadProgress) => void;
  /** Aborting it ends the run early; the report covers what was measured until then. */
  signal?: AbortSignal;
  /** Wire transport (default `h2`; `grpc-js` when `channelOptions` are given: only grpc-js reads them). */
  transport?: TransportName;
  /** Decode every OK response in full and check it against its level header; costs driver CPU. */
  verify?: boolean;
  /** Sees every call as it ends, warmup included, on the driver's event loop: keep it cheap. */
  onCall?: (call: LoadCall) => void;
}

/**
 * One ended call as {@link LoadOptions.onCall} sees it, times `performance.now()` ms. `body` is null unless
 * the run keeps bodies, and valid only until `onCall` returns.
 */
export interface LoadCall extends RawOutcome {
  sentAt: number;
  doneAt: number;
  measured: boolean;
}

export interface LoadProgress {
  phase: 'warmup' | 'measure' | 'drain';
  elapsedS: number;
  totalS: number;
  sent: number;
  ok: number;
  errors: number;
  inFlight: number;
  /** Answers/s over the last progress interval (warmup included). */
  recentRps: number;
}

/** The run's phases, `performance.now()` ms, and its bound on measured requests (Infinity: none). */
export interface LoadPhases {
  t0: number;
  measureStart: number;
  endAt: number;
  maxRequests: number;
}

/** Latency summary, ms (3 decimals). */
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

export type StopReason = 'duration' | 'max_requests' | 'signal';

/** Result of {@link runLoad} (`load --json`). Counts cover measured requests only. */
export interface LoadReport {
  target: string;
  open_loop: boolean;
  connections: number;
  pipelining: number;
  rate: number | null;
  duration_s: number;
  warmup_s: number;
  timeout_ms: number;
  source: string;
  transport: TransportName;
  stopped_by: StopReason;
  /** Every answered measured call (any status), ms, from an HdrHistogram in µs; not cancelled stragglers. */
  latency_ms: LatencyStats;
  /**
   * OK answers split at the service's clock (`metrics.total_ms`, contract.md §9): `service` is the handler's
   * time, `outside` the rest of the latency (transport, decode, write, driver delays); ±0.5 ms per call.
   */
  split_ms: { answers: number; service: SplitQuantiles; outside: SplitQuantiles };
  requests: {
    sent: number;
    completed: number;
    ok: number;
    /** Non-OK statuses by gRPC code name; DEADLINE_EXCEEDED split by whose deadline (`errorKey`). */
    errors: Record<string, number>;
    error_total: number;
    error_details: Record<string, string[]>;
    degraded: { L1: number; L2: number };
    levels: { L0: number; L1: number; L2: number };
    level_missing: number;
    late: number;
    /** Calls still unanswered when the drain wait ended; cancelled, not counted as errors. */
    unfinished: number;
    warmup_sent: number;
  };
  /**
   * Calls sent with `available_tokens` (constrained), and OK answers where the packer excluded a candidate
   * for `budget` (contract.md §8), read from `memories_used`. Shares are over OK answers.
   */
  packing: {
    constrained_sent: number;
    constrained_share: number;
    budget_choice: number;
    budget_choice_share: number;
    /** OK answers that could not be read, or failed `--verify`. */
    unreadable: number;
  };
  throughput_rps: number;
  /** Measured requests sent per second (the offered load actually achieved). */
  sent_rps: number;
  /** How late the driver sent measured requests after their intended time, ms (part of open-loop latency). */
  schedule_lag_ms: { avg: number; max: number };
  /** Driver cost: event-loop utilization (0..1; near 1, the driver set the pace) and process CPU seconds. */
  driver: { event_loop_utilization: number; cpu_s: number };
  warnings: string[];
  /** Answers per full second of the measured phase (autocannon's Req/Sec row). */
  rps: SampleStats & { samples: number };
  /** Response bytes received in the measured phase (message bodies). */
  bytes: { total: number; per_second: SampleStats };
  /** Slow calls (over `tailThresholdMs`) grouped into incidents by send time. */
  tail: TailReport;
}

export interface SplitQuantiles {
  p50: number;
  p99: number;
}

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

export type ResolvedLoadOptions = ReturnType<typeof resolveLoadOptions>;

/** {@link LoadOptions} with defaults applied. @throws RangeError naming the first invalid option. */
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
