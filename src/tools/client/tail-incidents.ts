// A load run's slow calls grouped into incidents by intended send time: evenly spread ones point at per-call
// costs, dense periodic ones at something periodic (docs/design/main-thread.md, "Where the tail comes from").
import { medianOfSorted, round } from './stats.js';

/** Slow calls within this many ms of the previous one (by intended send time) belong to its incident. */
export const INCIDENT_GAP_MS = 50;
/** An incident of at least this many slow calls is a large one. */
export const LARGE_INCIDENT_CALLS = 10;

/** The tail of one run ({@link tailIncidents}); times in ms. */
export interface TailReport {
  /** Latency (from the intended send) above which a call is slow, ms. */
  threshold_ms: number;
  gap_ms: number;
  slow_calls: number;
  /** Slow calls over answered calls (0 when none were answered). */
  slow_share: number;
  incidents: number;
  large_incidents: number;
  calls_in_large_incidents: number;
  /** Median time between consecutive large incidents' first calls, ms; null for fewer than two. */
  large_period_ms: number | null;
  /** Large incidents in which the driver sent a call over half the threshold late: its own stall joined. */
  driver_late_large_incidents: number;
  /** The incident with the most slow calls (earliest of equals), with the driver's worst send lag in it. */
  largest: { calls: number; span_ms: number; max_ms: number; max_send_lag_ms: number } | null;
}

/** One slow call: intended send time (monotonic ms), latency from then and the driver's send lag, ms. */
export interface SlowCall {
  at: number;
  ms: number;
  lag?: number;
}

/**
 * Groups slow calls (any order, not modified) into incidents: in intended-send order, a call more than
 * `gapMs` after the previous one starts a new incident. @throws RangeError for a negative or non-finite gap.
 */
export function tailIncidents(
  slow: readonly SlowCall[],
  answered: number,
  thresholdMs: number,
  gapMs = INCIDENT_GAP_MS,
): TailReport {
  if (!Number.isFinite(gapMs) || gapMs < 0)
    throw new RangeError(`tailIncidents: gap must be ≥ 0, got ${gapMs}`);
  const calls = [...slow].sort((a, b) => a.at - b.at);
  const incidents: { first: number; last: number; calls: number; max: number; lag: number }[] = [];
  for (const c of calls) {
    const cur = incidents[incidents.length - 1];
    const lag = c.lag ?? 0;
    if (cur !== undefined && c.at - cur.last <= gapMs) {
      cur.last = c.at;
      cur.calls++;
      if (c.ms > cur.max) cur.max = c.ms;
      if (lag > cur.lag) cur.lag = lag;
    } else incidents.push({ first: c.at, last: c.at, calls: 1, max: c.ms, lag });
  }
  const large = incidents.filter((i) => i.calls >= LARGE_INCIDENT_CALLS);
  const periods = large
    .slice(1)
    .map((i, k) => i.first - large[k]!.first)
    .sort((a, b) => a - b);
  let largest: (typeof incidents)[number] | null = null;
  for (const i of incidents) if (largest === null || i.calls > largest.calls) largest = i;
  return {
    threshold_ms: thresholdMs,
    gap_ms: gapMs,
    slow_calls: calls.length,
    slow_share: answered > 0 ? round(calls.length / answered, 4) : 0,
    incidents: incidents.length,
    large_incidents: large.length,
    calls_in_large_incidents: large.reduce((s, i) => s + i.calls, 0),
    large_period_ms: periods.length > 0 ? round(medianOfSorted(periods), 1) : null,
    driver_late_large_incidents: large.filter((i) => i.lag > thresholdMs / 2).length,
    largest:
      largest === null
        ? null
        : {
            calls: largest.calls,
            span_ms: round(largest.last - largest.first, 1),
            max_ms: round(largest.max, 1),
            max_send_lag_ms: round(largest.lag, 1),
          },
  };
}
