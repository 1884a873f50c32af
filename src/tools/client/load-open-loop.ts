/**
 * The open-loop scheduler of `ibex-context load`: requests at fixed intended times
 * whatever the answers do, spread over the connections tick by tick. Latency counts from the intended time, so a
 * server stall shows in the tail instead of silently slowing the sender (coordinated omission corrected,
 * as wrk2 does).
 */
import { performance } from 'node:perf_hooks';
import type { LoadRun } from './load-run.js';
import type { LoadPhases } from './load-types.js';

/** Settings of {@link openLoop}. */
export interface OpenLoopSettings extends LoadPhases {
  /** Total requests/s over all connections. */
  rate: number;
  connections: number;
  /** Shortest timer delay, ms: the timer is armed for the next intended send, never sooner. */
  tickMs: number;
}

/**
 * Sends `rate` requests/s from `t0` until `endAt`, then stops the run (`duration`), or when the measured
 * requests reach `maxRequests` (`max_requests`).
 * @returns a function that cancels the timer (the run stopped for another reason).
 */
export function openLoop(run: LoadRun, s: OpenLoopSettings): () => void {
  const intervalMs = 1000 / s.rate;
  // Requests go to the connections in blocks of about what one tick sends: HTTP/2 then writes a tick's
  // calls in one write instead of one per connection (fewer syscalls per call at high rates), and every
  // connection still gets the same share.
  const block = Math.max(1, Math.round((s.rate * s.tickMs) / 1000));
  let k = 0;
  let timer: NodeJS.Timeout | undefined;
  // One timer at a time, armed for the next intended send: a timer per request would cost more than the
  // calls at 4k rps on two cores, and a fixed 1 ms interval wakes the driver 1,000 times a second even at
  // 100 req/s. setTimeout's ~1 ms floor (tickMs) batches whatever falls due in between into one tick.
  const tick = () => {
    const now = performance.now();
    for (;;) {
      const intendedAt = s.t0 + k * intervalMs;
      if (intendedAt >= s.endAt || intendedAt > now) break;
      const measured = intendedAt >= s.measureStart;
      if (measured && run.recorder.requests.sent >= s.maxRequests) {
        run.stop('max_requests');
        return;
      }
      run.send(Math.floor(k / block) % s.connections, intendedAt, measured);
      k++;
    }
    // The run lasts its duration even when the last request was due long before the end.
    if (now >= s.endAt) {
      run.stop('duration');
      return;
    }
    const next = Math.min(s.t0 + k * intervalMs, s.endAt);
    timer = setTimeout(tick, Math.max(s.tickMs, next - performance.now()));
  };
  timer = setTimeout(tick, 0);
  return () => clearTimeout(timer);
}
