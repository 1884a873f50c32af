/**
 * Names the calling thread for `/proc/<pid>/task/<tid>/comm`: Node 20 gives every thread the
 * name `node`, so `bench:load` could not tell a pool worker from a store reader or a V8 helper when it
 * splits the server's CPU per thread. Linux only (a thread may rename itself through
 * `/proc/thread-self/comm`; the kernel keeps the first 15 bytes); elsewhere, or when `/proc` is not
 * writable, it does nothing.
 */
import { writeFileSync } from 'node:fs';

/**
 * Names of the service's own threads, for `top -H` and `/proc` (the benches split CPU by `pool` and
 * `store`, bench/lib/thread-cpu.ts; the others count there as other threads).
 */
export const THREAD_NAMES = {
  pool: 'ibex-pool',
  store: 'ibex-store',
  decoder: 'ibex-decoder',
  memory: 'ibex-memory',
} as const;

/** Renames the calling thread; never throws. */
export function nameThisThread(name: string): void {
  if (process.platform !== 'linux') return;
  try {
    writeFileSync('/proc/thread-self/comm', name.slice(0, 15));
  } catch {
    // A read-only /proc (some sandboxes) only costs the bench its per-thread split.
  }
}
