/** Names the calling thread (Linux `/proc`), so benches can split CPU per thread; else a no-op. */
import { writeFileSync } from 'node:fs';

/** Names of the service's own threads, for `top -H` and the benches' per-thread CPU split. */
export const THREAD_NAMES = {
  pool: 'ibex-pool',
  store: 'ibex-store',
  decoder: 'ibex-decoder',
  memory: 'ibex-memory',
} as const;

export function nameThisThread(name: string): void {
  if (process.platform !== 'linux') return;
  try {
    writeFileSync('/proc/thread-self/comm', name.slice(0, 15));
  } catch {
    // A read-only /proc only costs the bench its per-thread split.
  }
}
