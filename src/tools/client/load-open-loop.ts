// Open-loop scheduler of `ibex-context load`: requests at fixed intended times whatever the answers do;
// latency counts from the intended time, so a stall shows in the tail (coordinated omission, as wrk2).
import { performance } from 'node:perf_hooks';
import type { LoadRun } from './load-run.js';
import type { LoadPhases } from './load-types.js';

export interface OpenLoopSettings extends LoadPhases {
  rate: number;
  connections: number;
  tickMs: number;
}

/**
 * Sends `rate` requests/s from `t0` until `endAt` (`duration`) or `maxRequests` (`max_requests`).
 * @returns a function that cancels the timer.
 */
export function openLoop(run: LoadRun, s: OpenLoopSettings): () => void {
  const intervalMs = 1000 / s.rate;
  // Blocks of about one tick's calls per connection: HTTP/2 writes them at once, and shares stay equal.
  const block = Math.max(1, Math.round((s.rate * s.tickMs) / 1000));
  let k = 0;
  let timer: NodeJS.Timeout | undefined;
  // One timer, armed for the next intended send. Why: see docs/design/load-driver.md.
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
