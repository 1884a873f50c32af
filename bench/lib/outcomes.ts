/**
 * Per-call outcomes seen by the client: each call's status, who decided it and when, against the
 * caller's deadline, in one tally for the run and one per window.
 */
import { status } from '@grpc/grpc-js';
import { build, type Histogram } from 'hdr-histogram-js';
import { statusName } from '../../src/tools/client/cli-options.js';
import type { LoadCall } from '../../src/tools/client/load-types.js';
import type { CallEnd } from '../../src/tools/client/raw-grpc.js';

/** Who decided a call's final status. */
export type Decider = 'ok' | 'service' | 'server_transport' | 'client' | 'connection';

/**
 * Classifies a final status by its code and what ended the call (raw-grpc `CallEnd`), never by its text
 * Our own timer or cancel ⇒ `client`; no usable connection ⇒ `connection`; a stream
 * the server ended without a gRPC status ⇒ `server_transport`; any status the server sent ⇒ `service`.
 * The service's deadline answer and grpc-js's server deadline timer look the same on the wire (a
 * trailers-only DEADLINE_EXCEEDED from one event loop): both are the server's, split by when they came.
 */
export function deciderOf(code: number, end: CallEnd): Decider {
  if (code === status.OK) return 'ok';
  if (end === 'timer' || end === 'cancel') return 'client';
  if (end === 'connection') return 'connection';
  if (end === 'stream') return 'server_transport';
  return 'service';
}

/** Totals of a set of calls (one window, or the whole run). Latencies from the actual send, µs. */
export interface Tally {
  sent: number;
  /** Final statuses decided by the server (service or grpc-js server), any code. */
  answered: number;
  /** Server answers arriving within the caller's deadline + margin. */
  within: number;
  ok: number;
  levels: { L0: number; L1: number; L2: number; missing: number };
  errors: Record<string, number>;
  /**
   * DEADLINE_EXCEEDED split by who decided it (and, for the server, whether it came by the caller's
   * deadline + margin); `server_transport` counts streams the server ended without a status.
   */
  deadline_exceeded: {
    service_before_deadline: number;
    service_late: number;
    server_transport: number;
    client_timeout: number;
  };
  hist: Histogram;
}

function newTally(): Tally {
  return {
    sent: 0,
    answered: 0,
    within: 0,
    ok: 0,
    levels: { L0: 0, L1: 0, L2: 0, missing: 0 },
    errors: {},
    deadline_exceeded: {
      service_before_deadline: 0,
      service_late: 0,
      server_transport: 0,
      client_timeout: 0,
    },
    hist: build({ lowestDiscernibleValue: 1, numberOfSignificantValueDigits: 3, autoResize: true }),
  };
}

/** Options of {@link outcomeTracker}. */
export interface TrackerOptions {
  /** The caller's deadline, ms (the client sets it at the actual send). */
  deadlineMs: number;
  /** Extra time an answer may take and still count as within the deadline, ms (default 2). */
  marginMs?: number;
  /** Width of the per-window tallies, ms (default 60000). */
  windowMs?: number;
}

/**
 * Records every call of a `runLoad` run given its `onCall`: one tally for the run and one per window of
 * `windowMs` by send time, window 0 starting at the first send after `reset()`.
 */
export function outcomeTracker(opts: TrackerOptions) {
  const margin = opts.marginMs ?? 2;
  const windowMs = opts.windowMs ?? 60_000;
  /** Start of window 0: the first send after a reset (connecting the channels is not part of it). */
  let t0 = Number.NaN;
  let total = newTally();
  let windows: Tally[] = [];
  let recording = true;

  const count = (t: Tally, c: LoadCall, decider: Decider, latencyMs: number) => {
    t.sent++;
    if (decider === 'service' || decider === 'server_transport' || decider === 'ok') {
      t.answered++;
      if (latencyMs <= opts.deadlineMs + margin) t.within++;
      t.hist.recordValue(Math.max(1, Math.round(latencyMs * 1000)));
    }
    if (c.code === status.OK) {
      t.ok++;
      const level = c.level;
      if (level === 'L0' || level === 'L1' || level === 'L2') t.levels[level]++;
      else t.levels.missing++;
      return;
    }
    const name = statusName(c.code);
    t.errors[name] = (t.errors[name] ?? 0) + 1;
    if (c.code !== status.DEADLINE_EXCEEDED) return;
    const d = t.deadline_exceeded;
    if (decider === 'service') {
      if (latencyMs <= opts.deadlineMs + margin) d.service_before_deadline++;
      else d.service_late++;
    } else if (decider === 'client') d.client_timeout++;
    else d.server_transport++;
  };

  const onCall = (c: LoadCall) => {
    if (!recording) return;
    if (Number.isNaN(t0)) t0 = c.sentAt;
    const w = Math.max(0, Math.floor((c.sentAt - t0) / windowMs));
    while (windows.length <= w) windows.push(newTally());
    const decider = deciderOf(c.code, c.end);
    const latencyMs = c.doneAt - c.sentAt;
    count(total, c, decider, latencyMs);
    count(windows[w]!, c, decider, latencyMs);
  };

  return {
    /** Pass as `runLoad`'s `onCall`. */
    onCall,
    /** Starts afresh (drops what was recorded) and restarts the windows' clock. */
    reset() {
      total = newTally();
      windows = [];
      t0 = Number.NaN;
      recording = true;
    },
    /** Stops recording (calls still in flight are not counted). */
    pause() {
      recording = false;
    },
    get total() {
      return total;
    },
    get windows() {
      return windows;
    },
  };
}

export type OutcomeTracker = ReturnType<typeof outcomeTracker>;

const round3 = (x: number) => Math.round(x * 1000) / 1000;

/** Latency percentiles of a tally, ms. */
export function latencyOf(t: Tally) {
  const at = (p: number) => round3(t.hist.getValueAtPercentile(p) / 1000);
  return {
    p50: at(50),
    p99: at(99),
    p99_9: at(99.9),
    max: round3(t.hist.maxValue / 1000),
  };
}

/** A tally as written to the results (no histogram). */
export function tallyJson(t: Tally) {
  const { hist: _hist, ...rest } = t;
  return { ...rest, latency_ms: t.answered > 0 ? latencyOf(t) : null };
}
