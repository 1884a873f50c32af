/**
 * CPU time per thread of a process from `/proc/<pid>/task/<tid>/stat` (utime + stime, clock ticks) and
 * `/proc/<pid>/task/<tid>/comm`, grouped the way bench:load reports it: the main (event-loop) thread (tid =
 * pid), pool workers (`ibex-pool`), store readers (`ibex-store`) and everything else (V8 GC/compiler
 * helpers and libuv threads, all named `node` or `libuv-worker`). Linux only; `null` elsewhere.
 *
 * Threads that ended between two readings are lost from the delta (their time leaves with them); the
 * service's threads live for the whole run, so that only matters for short-lived helpers.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { THREAD_NAMES } from '../../src/pool/thread-name.js';

/** Clock ticks per second of `/proc/.../stat` (USER_HZ): 100 on every Linux we run on. */
const CLK_TCK = 100;

/** Thread groups of a Node process. */
export type ThreadGroup = 'main' | 'pool' | 'store' | 'other';

/** CPU seconds so far, per thread id, with the thread's group and name. */
export type ThreadReading = Map<number, { group: ThreadGroup; name: string; cpu_s: number }>;

function groupOf(pid: number, tid: number, name: string): ThreadGroup {
  if (tid === pid) return 'main';
  if (name.startsWith(THREAD_NAMES.pool)) return 'pool';
  if (name.startsWith(THREAD_NAMES.store)) return 'store';
  return 'other';
}

/** Reads every thread of `pid`; `null` when `/proc` is not there (not Linux) or the process is gone. */
export function readThreads(pid: number): ThreadReading | null {
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return null;
  }
  const out: ThreadReading = new Map();
  for (const t of tids) {
    const tid = Number(t);
    try {
      const stat = readFileSync(`/proc/${pid}/task/${t}/stat`, 'utf8');
      const name = readFileSync(`/proc/${pid}/task/${t}/comm`, 'utf8').trim();
      // Fields after the parenthesised comm (which may contain spaces): state is field 3, utime 14, stime 15.
      const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const ticks = Number(rest[11]) + Number(rest[12]);
      out.set(tid, { group: groupOf(pid, tid, name), name, cpu_s: ticks / CLK_TCK });
    } catch {
      // The thread ended between readdir and read.
    }
  }
  return out;
}

/** CPU per thread group over a window: cores (CPU s per wall s) and ms per call. */
export interface ThreadCpuStep {
  /** Threads seen per group (at the end of the window). */
  threads: Record<ThreadGroup, number>;
  cores: Record<ThreadGroup | 'total', number>;
  /** CPU ms per answered call; null when no call was answered. */
  ms_per_call: Record<ThreadGroup | 'total', number> | null;
}

const r3 = (x: number) => Math.round(x * 1000) / 1000;

/**
 * Per-group CPU between two readings of the same process over `windowS` seconds in which `calls` calls
 * were answered. Threads present only in `b` count from zero (they started in the window).
 */
export function threadCpuStep(
  a: ThreadReading,
  b: ThreadReading,
  windowS: number,
  calls: number,
): ThreadCpuStep {
  const groups: ThreadGroup[] = ['main', 'pool', 'store', 'other'];
  const cpu = { main: 0, pool: 0, store: 0, other: 0 };
  const threads = { main: 0, pool: 0, store: 0, other: 0 };
  for (const [tid, t] of b) {
    threads[t.group]++;
    cpu[t.group] += Math.max(0, t.cpu_s - (a.get(tid)?.cpu_s ?? 0));
  }
  const total = groups.reduce((s, g) => s + cpu[g], 0);
  const w = Math.max(1e-9, windowS);
  const cores = {
    main: r3(cpu.main / w),
    pool: r3(cpu.pool / w),
    store: r3(cpu.store / w),
    other: r3(cpu.other / w),
    total: r3(total / w),
  };
  const perCall = (s: number) => r3((s * 1000) / calls);
  return {
    threads,
    cores,
    ms_per_call:
      calls > 0
        ? {
            main: perCall(cpu.main),
            pool: perCall(cpu.pool),
            store: perCall(cpu.store),
            other: perCall(cpu.other),
            total: perCall(total),
          }
        : null,
  };
}
