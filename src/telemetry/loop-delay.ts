/**
 * The main thread's event-loop delay as the service exports it (contract.md §12,
 * `ibex_context_event_loop_delay_seconds`), in one place so that the benches' empty-process floor
 * (bench/eld-probe.ts) measures exactly what the service reports.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';

/** Sampling interval of the event-loop delay histogram, ms (10 ms, so an idle service wakes rarely). */
export const ELD_RESOLUTION_MS = 10;

/**
 * Event-loop delay quantiles over an interval: what exceeds the sampling interval, in seconds from
 * {@link LoopDelayMonitor.take}, in ms in the benches' reports.
 */
export interface LoopDelayQuantiles {
  p50: number;
  p99: number;
  max: number;
}

/** A running event-loop delay monitor of the calling thread. */
export interface LoopDelayMonitor {
  /**
   * Quantiles since the previous `take` (or the start), then starts a new interval. The first sampling
   * interval after a take is not recorded: Node's histogram reset also forgets the last sample's time.
   */
  take(): LoopDelayQuantiles;
  /** Stops sampling (the timer no longer wakes the loop). */
  stop(): void;
}

/**
 * Starts sampling the calling thread's event loop every {@link ELD_RESOLUTION_MS} ms
 * (`monitorEventLoopDelay`). At 1 ms the histogram's timer woke an idle server ~1,000 times a second;
 * the delays that matter here are milliseconds to tens of ms, which 10 ms sampling still sees.
 */
export function startLoopDelayMonitor(): LoopDelayMonitor {
  const loop = monitorEventLoopDelay({ resolution: ELD_RESOLUTION_MS });
  loop.enable();
  // The histogram records each sampling interval whole (resolution + delay): an idle loop reads ~10 ms.
  // The delay is what exceeds the resolution.
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
