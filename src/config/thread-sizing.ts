/** Default thread counts from the process's affinity mask (taskset, cpusets), not the machine's cores. */
import os from 'node:os';

export function affinityCpus(): number {
  return Math.max(1, os.availableParallelism());
}

export const MAX_DEFAULT_STORE_READ_THREADS = 16;

export interface ThreadCounts {
  /** CPU-stage threads, min and max alike. */
  poolThreads: number;
  /** One per four CPUs, 1..16: a search is a small share of a call (docs/design/embedded-store.md). */
  storeReadThreads: number;
}

/** @param cpus CPUs in the affinity mask; values below 1 count as 1. */
export function defaultThreadCounts(cpus: number = affinityCpus()): ThreadCounts {
  const n = Math.max(1, Math.floor(cpus));
  return {
    poolThreads: n,
    storeReadThreads: Math.min(MAX_DEFAULT_STORE_READ_THREADS, Math.ceil(n / 4)),
  };
}
