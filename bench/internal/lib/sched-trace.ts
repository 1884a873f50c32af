/**
 * Why the service's event loop waited for a CPU: a summary of the kernel's scheduler trace
 * (`perf record -e sched:sched_switch,sched:sched_wakeup -a`, printed with `perf script -F
 * comm,tid,pid,cpu,time,event,trace`) for one process's main thread (the event-loop delay target).
 *
 * The main thread is *runnable without a CPU* from its wake-up (or from being switched out still runnable,
 * a preemption) until it is switched in. Over those intervals the summary counts who took its CPU
 * (preemptions by thread), and what every CPU ran meanwhile (a CPU that sat idle while the loop waited
 * means the kernel kept the loop queued behind another thread instead of moving it).
 */
import { percentilesOf, round } from '../../../src/tools/client/stats.js';

/** One scheduler event of the trace. */
export interface SchedEvent {
  /** Seconds (perf's clock). */
  at: number;
  cpu: string;
  /** Process (thread group) and thread of the task that was running when the event fired. */
  pid: string;
  tid: string;
  kind: 'switch' | 'wakeup';
  /** switch: the thread leaving the CPU, its state (`R` = still runnable: preempted), the one entering. */
  prevTid?: string;
  prevState?: string;
  nextTid?: string;
  nextComm?: string;
  /** wakeup: the thread woken. */
  wokenTid?: string;
}

const LINE_RE =
  /^\s*(.+?)\s+(\d+)\/(\d+)\s+\[(\d+)\]\s+(\d+\.\d+):\s+sched:(sched_switch|sched_wakeup):\s+(.*)$/;
const SWITCH_RE = /prev_pid=(\d+) .*prev_state=(\S+) ==> next_comm=(.*?) next_pid=(\d+)/;
const WAKEUP_RE = /\bpid=(\d+) /;

/** Parses one `perf script` line; null for any other line. */
export function parseSchedLine(line: string): SchedEvent | null {
  const m = LINE_RE.exec(line);
  if (!m) return null;
  const base = { at: Number(m[5]), cpu: m[4]!, pid: m[2]!, tid: m[3]! };
  if (m[6] === 'sched_switch') {
    const s = SWITCH_RE.exec(m[7]!);
    if (!s) return null;
    return { ...base, kind: 'switch', prevTid: s[1]!, prevState: s[2]!, nextComm: s[3]!, nextTid: s[4]! };
  }
  const w = WAKEUP_RE.exec(m[7]!);
  return w ? { ...base, kind: 'wakeup', wokenTid: w[1]! } : null;
}

/** {@link summariseMainThreadWaits}' answer. Times in ms. */
export interface MainThreadWaits {
  /** Seconds from the first to the last event. */
  window_s: number;
  waits: number;
  wait_ms: { total: number; p50: number; p99: number; max: number };
  waits_over_1ms: number;
  waits_over_2ms: number;
  /** Times the main thread was switched out still runnable, by who took the CPU (`<comm> (<process>)`). */
  preempted_by: Record<string, number>;
  /**
   * CPU time, summed over all CPUs, that each thread (or `idle`) held while the main thread waited; the
   * process is `service` for the traced process's own threads.
   */
  cpu_ms_while_waiting: Record<string, number>;
}

/**
 * Runnable-without-a-CPU intervals of thread `mainTid` (a process's main thread: tid = pid) over the trace.
 * @param events in trace order (perf prints them sorted by time).
 */
export function summariseMainThreadWaits(events: readonly SchedEvent[], mainTid: string): MainThreadWaits {
  const processOf = new Map<string, string>();
  for (const e of events) processOf.set(e.tid, e.pid);
  const who = (tid: string, comm: string) => {
    if (tid === '0') return 'idle';
    const p = processOf.get(tid);
    return `${comm} (${p === mainTid ? 'service' : (p ?? '?')})`;
  };
  const running = new Map<string, string>();
  const held: Record<string, number> = {};
  const preempted: Record<string, number> = {};
  const waits: number[] = [];
  let state: 'unknown' | 'sleeping' | 'runnable' | 'running' = 'unknown';
  let since = 0;
  let last: number | null = null;
  for (const e of events) {
    const t = e.at * 1000;
    if (state === 'runnable' && last !== null) {
      for (const name of running.values()) held[name] = (held[name] ?? 0) + (t - last);
    }
    last = t;
    if (e.kind === 'wakeup') {
      if (e.wokenTid === mainTid && state === 'sleeping') {
        state = 'runnable';
        since = t;
      }
      continue;
    }
    running.set(e.cpu, who(e.nextTid!, e.nextComm!));
    if (e.prevTid === mainTid) {
      if (e.prevState!.startsWith('R')) {
        state = 'runnable';
        since = t;
        const by = who(e.nextTid!, e.nextComm!);
        preempted[by] = (preempted[by] ?? 0) + 1;
      } else state = 'sleeping';
    }
    if (e.nextTid === mainTid) {
      if (state === 'runnable') waits.push(t - since);
      state = 'running';
    }
  }
  // The benches' one percentile estimator (HDR, µs kept): a p99 never above the max beside it.
  const at = percentilesOf(waits);
  const sortDesc = (r: Record<string, number>, f: (x: number) => number) =>
    Object.fromEntries(
      Object.entries(r)
        .sort((a, b) => b[1] - a[1])
        .map(([k, v]) => [k, f(v)]),
    );
  return {
    // perf's clock has µs resolution.
    window_s: events.length ? Math.round((events[events.length - 1]!.at - events[0]!.at) * 1e6) / 1e6 : 0,
    waits: waits.length,
    wait_ms: {
      total: round(waits.reduce((s, w) => s + w, 0)),
      p50: at(50),
      p99: at(99),
      max: at(100),
    },
    waits_over_1ms: waits.filter((w) => w > 1).length,
    waits_over_2ms: waits.filter((w) => w > 2).length,
    preempted_by: sortDesc(preempted, (x) => x),
    cpu_ms_while_waiting: sortDesc(held, (x) => round(x)),
  };
}
