/**
 * Where a load run's tail comes from: its slow calls grouped into incidents by their intended send times.
 * Slow calls spread evenly over a run point at per-call costs; a few dense incidents at a steady period
 * point at something periodic in the service, such as the main thread's mark-compacts
 * (docs/design/main-thread.md, "Where the tail comes from").
 */
import { medianOfSorted, round } from './stats.js';

/** Slow calls within this many ms of the previous one (by intended send time) belong to its incident. */
export const INCIDENT_GAP_MS = 50;
/** An incident of at least this many slow calls is a large one (counted and timed apart). */
export const LARGE_INCIDENT_CALLS = 10;

/** The tail of one run ({@link tailIncidents}); times in ms. */
export interface TailReport {
  /** A call whose latency (from its intended send time) is over this is slow, ms. */
  threshold_ms: number;
  /** Slow calls whose intended send times are at most this far apart form one incident, ms. */
  gap_ms: number;
  slow_calls: number;
  /** Slow calls over the answered calls they were counted among (0 when none were answered). */
  slow_share: number;
  incidents: number;
  /** Incidents of at least {@link LARGE_INCIDENT_CALLS} slow calls. */
  large_incidents: number;
  /** Slow calls in those. */
  calls_in_large_incidents: number;
  /** Median time from one large incident's first slow call to the next one's, ms; null for fewer than two. */
  large_period_ms: number | null;
  /**
   * Large incidents in which the driver itself sent a call more than half the threshold after its
   * intended time: its own stall (a GC of the driver, a busy core) made or joined them, not the service's.
   */
  driver_late_large_incidents: number;
  /**
   * The incident with the most slow calls (the earliest of equals): calls, first-to-last send span, worst
   * latency, and the worst send lag of its calls (the driver's share of it).
   */
  largest: { calls: number; span_ms: number; max_ms: number; max_send_lag_ms: number } | null;
}

/**
 * One slow call: its intended send time (any monotonic ms clock), its latency from then, and how late the
 * driver actually sent it (0 when not known), ms.
 */
export interface SlowCall {
  at: number;
  ms: number;
  lag?: number;
}

/**
 * Groups slow calls into incidents: in intended-send order, a call more than `gapMs` after the previous
 * slow call starts a new incident.
 * @param slow the run's slow calls, any order (not modified).
 * @param answered answered calls the slow ones are a share of.
 * @param thresholdMs the latency above which the caller counted a call as slow, ms (reported as is).
 * @throws RangeError for a negative or non-finite gap.
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
