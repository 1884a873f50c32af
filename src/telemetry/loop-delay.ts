// Event-loop delay as the service exports it (contract.md §12), in one place so the benches' floor
// (bench/eld-probe.ts) measures exactly what the service reports.
import { monitorEventLoopDelay } from 'node:perf_hooks';

/** Sampling interval of the event-loop delay histogram, ms (10 ms, so an idle service wakes rarely). */
export const ELD_RESOLUTION_MS = 10;

/** Delay quantiles over an interval (what exceeds the sampling interval): seconds in `take`, ms in benches. */
export interface LoopDelayQuantiles {
  p50: number;
  p99: number;
  max: number;
}

export interface LoopDelayMonitor {
  /**
   * Quantiles since the previous `take`, then a new interval (its first sample is lost to Node's reset).
   */
  take(): LoopDelayQuantiles;
  /** Stops sampling (the timer no longer wakes the loop). */
  stop(): void;
}

/** Starts sampling the calling thread's event loop every {@link ELD_RESOLUTION_MS} ms. */
export function startLoopDelayMonitor(): LoopDelayMonitor {
  const loop = monitorEventLoopDelay({ resolution: ELD_RESOLUTION_MS });
  loop.enable();
  // The histogram records each interval whole (resolution + delay); the delay is the excess.
  const delay = (ns: number) => Math.max(0, ns / 1e9 - ELD_RESOLUTION_MS / 1000);
  return {
    take() {
      const out = { p50: delay(loop.percentile(50)), p99: delay(loop.percentile(99)), max: delay(loop.max) };
      loop.reset();
      return out;
    },
    stop() {
      loop.disable();
    },
  };
}
