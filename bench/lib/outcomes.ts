/**
 * Per-call outcomes seen by the client (issue 6): each call's status, who decided it and when, against the
 * caller's deadline, in one tally for the run and one per window.
 */
import { type ChannelOptions, InterceptingCall, type Interceptor, status } from '@grpc/grpc-js';
import { build, type Histogram } from 'hdr-histogram-js';
import { statusName } from '../../src/client/cli-options.js';
import { LEVEL_HEADER } from '../../src/wire-headers.js';

/** Who decided a call's final status. */
export type Decider = 'ok' | 'service' | 'server_transport' | 'client' | 'connection';

/**
 * Classifies a final status. The service's own deadline answer carries `deadline exceeded` (errors.ts);
 * grpc-js's server timer `Deadline exceeded`; the client's own timer `Deadline exceeded after …`; a call
 * that never reached a server (refused, no connection) `UNAVAILABLE` with a connection detail.
 */
export function deciderOf(code: number, details: string): Decider {
  if (code === status.OK) return 'ok';
  if (code === status.DEADLINE_EXCEEDED) {
    if (details === 'deadline exceeded') return 'service';
    if (details.startsWith('Deadline exceeded after')) return 'client';
    return 'server_transport';
  }
  if (code === status.UNAVAILABLE && /No connection established|ECONNREFUSED|ECONNRESET/.test(details))
    return 'connection';
  if (code === status.CANCELLED) return 'client';
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
  /** DEADLINE_EXCEEDED split by who decided it (and, for the service, whether it was on time). */
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
 * Records every call made on channels created with its `channelOptions` (grpc-js takes client
 * interceptors from the client options, so `runLoad` passes them through): one tally for the run and one
 * per window of `windowMs` by send time, window 0 starting at the first send after `reset()`.
 */
export function outcomeTracker(opts: TrackerOptions) {
  const margin = opts.marginMs ?? 2;
  const windowMs = opts.windowMs ?? 60_000;
  /** Start of window 0: the first send after a reset (connecting the channels is not part of it). */
  let t0 = Number.NaN;
  let total = newTally();
  let windows: Tally[] = [];
  let recording = true;

  const record = (sentAt: number, doneAt: number, code: number, details: string, level: string) => {
    if (!recording) return;
    const w = Math.max(0, Math.floor((sentAt - t0) / windowMs));
    while (windows.length <= w) windows.push(newTally());
    const latencyMs = doneAt - sentAt;
    const decider = deciderOf(code, details);
    for (const t of [total, windows[w]!]) {
      if (decider === 'service' || decider === 'server_transport' || decider === 'ok') {
        t.answered++;
        if (latencyMs <= opts.deadlineMs + margin) t.within++;
        t.hist.recordValue(Math.max(1, Math.round(latencyMs * 1000)));
      }
      if (code === status.OK) {
        t.ok++;
        if (level === 'L0' || level === 'L1' || level === 'L2') t.levels[level]++;
        else t.levels.missing++;
        continue;
      }
      const name = statusName(code);
      t.errors[name] = (t.errors[name] ?? 0) + 1;
      if (code === status.DEADLINE_EXCEEDED) {
        const d = t.deadline_exceeded;
        if (decider === 'service') {
          if (latencyMs <= opts.deadlineMs + margin) d.service_before_deadline++;
          else d.service_late++;
        } else if (decider === 'client') d.client_timeout++;
        else d.server_transport++;
      }
    }
  };

  const interceptor: Interceptor = (options, nextCall) => {
    const sentAt = performance.now();
    if (Number.isNaN(t0)) t0 = sentAt;
    if (recording) {
      const w = Math.max(0, Math.floor((sentAt - t0) / windowMs));
      while (windows.length <= w) windows.push(newTally());
      total.sent++;
      windows[w]!.sent++;
    }
    let level = '';
    return new InterceptingCall(nextCall(options), {
      start(metadata, _listener, next) {
        next(metadata, {
          onReceiveMetadata(md, nextMetadata) {
            level = String(md.get(LEVEL_HEADER)[0] ?? '');
            nextMetadata(md);
          },
          onReceiveStatus(st, nextStatus) {
            record(sentAt, performance.now(), st.code, st.details, level);
            nextStatus(st);
          },
        });
      },
    });
  };

  return {
    channelOptions: { interceptors: [interceptor] } as ChannelOptions,
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
