/**
 * Default thread counts from the CPUs the process may run on: its affinity mask, not the machine's cores.
 * On Linux, Node 20's `os.availableParallelism()` reads `sched_getaffinity` (libuv), so a process started
 * under `taskset -c 1` or a cpuset sees one CPU where `os.cpus().length` would report every core.
 */
import os from 'node:os';

/** CPUs in this process's affinity mask (≥ 1). */
export function affinityCpus(): number {
  return Math.max(1, os.availableParallelism());
}

/** Most store-read threads a default gives (the setting's own maximum). */
export const MAX_DEFAULT_STORE_READ_THREADS = 16;

/** Default thread counts for `cpus` usable CPUs. */
export interface ThreadCounts {
  /** CPU-stage (Piscina) threads, min and max alike: one per usable CPU. */
  poolThreads: number;
  /**
   * Embedded store-read threads: one per four usable CPUs, at least 1 and at most
   * {@link MAX_DEFAULT_STORE_READ_THREADS}. One thread was measured best up to four cores
   * (docs/design/embedded-store.md, "Store-read threads"); a search costs ~0.5 ms of its thread, a
   * fraction of the pool's and the event loop's time per call, so readers grow slower than the pool.
   */
  storeReadThreads: number;
}

/**
 * Sizes the service's threads from the usable CPUs.
 * @param cpus CPUs in the affinity mask (default {@link affinityCpus}); values below 1 count as 1.
 */
export function defaultThreadCounts(cpus: number = affinityCpus()): ThreadCounts {
  const n = Math.max(1, Math.floor(cpus));
  return {
    poolThreads: n,
    storeReadThreads: Math.min(MAX_DEFAULT_STORE_READ_THREADS, Math.ceil(n / 4)),
  };
}
