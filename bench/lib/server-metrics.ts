/**
 * What the server did during one measured step, from two `/metrics` scrapes (before and after) plus the
 * child's CPU times: pool wait and run, retrieval branch latencies, server-side assembly time, event-loop
 * delay, degradation reasons and CPU split between the main thread and the other threads.
 *
 * Counters and histograms are differenced between the scrapes. The event-loop delay gauge is special: the
 * service resets its monitor at every scrape, so the *after* scrape reads the delay over the step itself.
 */
import type { LoopDelayQuantiles } from '../../src/telemetry/loop-delay.js';
import { machineCpu, type ProcessCpu, type ServiceProcess } from './service-process.js';

/** One parsed exposition: `name{label="v",…}` (labels sorted) → value. */
export type PromSamples = Map<string, number>;

/** Parses the Prometheus text format (as prom-client writes it: no timestamps, no exemplars). */
export function parsePrometheus(text: string): PromSamples {
  const out: PromSamples = new Map();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$/.exec(line);
    if (!m) continue;
    const labels = [...(m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)]
      .map((l) => `${l[1]}="${l[2]}"`)
      .sort();
    const value = m[3] === '+Inf' ? Number.POSITIVE_INFINITY : Number(m[3]);
    out.set(labels.length ? `${m[1]}{${labels.join(',')}}` : m[1]!, value);
  }
  return out;
}

/** Labels of a sample key (`{}` when it has none). */
function labelsOf(key: string): Record<string, string> {
  const i = key.indexOf('{');
  if (i < 0) return {};
  const out: Record<string, string> = {};
  for (const l of key.slice(i + 1, -1).matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g))
    out[l[1]!] = l[2]!;
  return out;
}

function nameOf(key: string): string {
  const i = key.indexOf('{');
  return i < 0 ? key : key.slice(0, i);
}

/** Sum of every sample of `name` whose labels include `match`. */
export function sumOf(s: PromSamples, name: string, match: Record<string, string> = {}): number {
  let total = 0;
  for (const [key, value] of s) {
    if (nameOf(key) !== name) continue;
    const labels = labelsOf(key);
    if (Object.entries(match).every(([k, v]) => labels[k] === v)) total += value;
  }
  return total;
}

/** Distinct values of one label over the samples of `name`. */
function labelValues(s: PromSamples, name: string, label: string): string[] {
  const out = new Set<string>();
  for (const key of s.keys()) {
    if (nameOf(key) !== name) continue;
    const v = labelsOf(key)[label];
    if (v !== undefined) out.add(v);
  }
  return [...out].sort();
}

/** Mean and estimated p99 (linear within the bucket) of a histogram's growth between two scrapes, ms. */
export interface HistogramDelta {
  count: number;
  mean_ms: number;
  p99_ms: number;
}

/**
 * The growth of histogram `name` (labels matching `match`, summed) between `a` and `b`.
 * p99 is interpolated inside its bucket; in the +Inf bucket it is reported as the largest finite bound.
 */
export function histogramDelta(
  a: PromSamples,
  b: PromSamples,
  name: string,
  match: Record<string, string> = {},
): HistogramDelta {
  const count = sumOf(b, `${name}_count`, match) - sumOf(a, `${name}_count`, match);
  const sum = sumOf(b, `${name}_sum`, match) - sumOf(a, `${name}_sum`, match);
  if (count <= 0) return { count: 0, mean_ms: 0, p99_ms: 0 };
  // The label text is kept as written: re-rendering a parsed bound could spell it differently.
  const buckets = labelValues(b, `${name}_bucket`, 'le')
    .map((le) => ({ le, bound: le === '+Inf' ? Number.POSITIVE_INFINITY : Number(le) }))
    .sort((x, y) => x.bound - y.bound);
  const bounds = buckets.map((x) => x.bound);
  const cumulative = buckets.map(({ le }) => {
    const l = { ...match, le };
    return sumOf(b, `${name}_bucket`, l) - sumOf(a, `${name}_bucket`, l);
  });
  const target = 0.99 * count;
  let p99 = 0;
  for (let i = 0; i < bounds.length; i++) {
    if (cumulative[i]! < target) continue;
    const hi = bounds[i]!;
    const lo = i === 0 ? 0 : bounds[i - 1]!;
    if (!Number.isFinite(hi)) {
      p99 = lo;
      break;
    }
    const below = i === 0 ? 0 : cumulative[i - 1]!;
    const inBucket = cumulative[i]! - below;
    p99 = inBucket <= 0 ? hi : lo + ((hi - lo) * (target - below)) / inBucket;
    break;
  }
  return { count, mean_ms: round3((sum / count) * 1000), p99_ms: round3(p99 * 1000) };
}

const round3 = (x: number) => Math.round(x * 1000) / 1000;
const round2 = (x: number) => Math.round(x * 100) / 100;

/** A point-in-time reading of the server (and of the machine). */
export interface ServerSnapshot {
  /** `performance.now()` of the reading, ms. */
  at: number;
  samples: PromSamples;
  cpu: ProcessCpu | null;
  machine: { busy_s: number; total_s: number } | null;
}

/** Reads `/metrics`, the child's CPU times and the machine's CPU times. */
export async function snapshot(service: ServiceProcess): Promise<ServerSnapshot> {
  const text = await service.metricsText();
  return { at: performance.now(), samples: parsePrometheus(text), cpu: service.cpu(), machine: machineCpu() };
}

/** What the server did between two snapshots. CPU figures are in cores (CPU seconds per wall second). */
export interface ServerStepStats {
  window_s: number;
  /** Server-side AssembleContext time, arrival to answer (any level). */
  assembly: HistogramDelta;
  /** Wait for a pool thread (queue + dispatch) and the worker's pack + format time. */
  pool_wait: HistogramDelta;
  pool_run: HistogramDelta;
  /** Tasks by outcome (completed, rejected = pool_saturated, withdrawn = pool_deadline, failed). */
  pool_tasks: Record<string, number>;
  /** Busy fraction of the pool threads: Σ run time / (window × threads). */
  pool_busy_ratio: number;
  /** piscina-style utilization gauge (moving average) at the end of the step. */
  pool_utilization_gauge: number;
  pool_threads: number;
  /** Latency of each retrieval branch (all statuses except skipped). */
  branches: Record<string, HistogramDelta & { not_success: number }>;
  /** Degradation reasons counted by the server (`hot_timeout`, `pool_saturated`, …). */
  degraded_reasons: Record<string, number>;
  /** Embedded-store reads refused because the store-read queue was full (a `cold_error` each). */
  store_busy: number;
  /** Calls with a large history answered DEADLINE_EXCEEDED at once: not even a degraded answer fit in time. */
  refused_too_late: number;
  /** Answers sent after their deadline because the event loop ran late (`ibex_context_late_answer_seconds`). */
  late_answers: number;
  /** Main-thread event-loop delay over the step, ms (monitorEventLoopDelay, 10 ms resolution). */
  event_loop_delay_ms: LoopDelayQuantiles;
  /** Main-isolate garbage collection over the step ({@link gcDelta}). */
  gc: GcStepStats;
  /** Cores used by the server: all threads, the main (event-loop) thread, and the rest (pool, GC, libuv). */
  cpu_cores: { total: number; main_thread: number; other_threads: number } | null;
  /** Busy cores of the whole machine over the step (every process, the driver included). */
  machine_busy_cores: number | null;
  /**
   * The main thread's time runnable but without a CPU, ms per wall second, and its preemptions per second
   * (`/proc/<pid>/task/<pid>/schedstat` and `status`): the share of the event-loop delay that other threads
   * and processes (the load driver's too, on the same cores) cause. Null where `/proc` lacks them.
   */
  main_thread_sched: { runqueue_wait_ms_per_s: number; preemptions_per_s: number } | null;
}

/**
 * How much counter `name` grew from `a` to `b` per value of `label` (values seen in `b`), leaving out
 * values that did not grow: e.g. pool tasks by outcome.
 */
function countersByLabel(
  a: PromSamples,
  b: PromSamples,
  name: string,
  label: string,
): Record<string, number> {
  const grown: Record<string, number> = {};
  for (const value of labelValues(b, name, label)) {
    const n = sumOf(b, name, { [label]: value }) - sumOf(a, name, { [label]: value });
    if (n > 0) grown[value] = n;
  }
  return grown;
}

/**
 * Main-isolate garbage collection between two scrapes, from prom-client's `nodejs_gc_duration_seconds`
 * (perf_hooks GC entries of the main thread only; pool and store threads are not in it). Heavy
 * uploads and answers allocate ~10 MB buffers outside the JS heap, and V8 answers that external-memory
 * growth with mark-compacts whose pauses land on the event loop.
 */
export interface GcStepStats {
  /** GC time per wall second, ms/s (every kind). */
  ms_per_s: number;
  /** Mark-compacts per wall second. */
  major_per_s: number;
  /** Count and total ms per kind (`minor`, `major`, `incremental`, `weakcb`). */
  by_kind: Record<string, { count: number; ms: number }>;
}

function gcDelta(a: PromSamples, b: PromSamples, windowS: number): GcStepStats {
  const by_kind: GcStepStats['by_kind'] = {};
  let totalMs = 0;
  for (const kind of labelValues(b, 'nodejs_gc_duration_seconds_count', 'kind')) {
    const grown = (suffix: string) =>
      sumOf(b, `nodejs_gc_duration_seconds_${suffix}`, { kind }) -
      sumOf(a, `nodejs_gc_duration_seconds_${suffix}`, { kind });
    const count = grown('count');
    if (count <= 0) continue;
    const ms = grown('sum') * 1000;
    by_kind[kind] = { count, ms: round2(ms) };
    totalMs += ms;
  }
  return {
    ms_per_s: round2(totalMs / windowS),
    major_per_s: round2((by_kind.major?.count ?? 0) / windowS),
    by_kind,
  };
}

/** {@link ServerStepStats} between `a` and `b`. */
export function stepStats(a: ServerSnapshot, b: ServerSnapshot): ServerStepStats {
  const windowS = Math.max(1e-9, (b.at - a.at) / 1000);
  const pool_run = histogramDelta(a.samples, b.samples, 'ibex_context_pool_run_seconds');
  const threads = sumOf(b.samples, 'ibex_context_pool_threads');
  const runSumS =
    sumOf(b.samples, 'ibex_context_pool_run_seconds_sum') -
    sumOf(a.samples, 'ibex_context_pool_run_seconds_sum');
  const pool_tasks = countersByLabel(a.samples, b.samples, 'ibex_context_pool_tasks_total', 'outcome');
  const branches: ServerStepStats['branches'] = {};
  for (const branch of labelValues(b.samples, 'ibex_context_branch_duration_seconds_count', 'branch')) {
    const h = histogramDelta(a.samples, b.samples, 'ibex_context_branch_duration_seconds', { branch });
    const outcomes = (m: PromSamples) =>
      sumOf(m, 'ibex_context_branch_outcomes_total', { branch }) -
      sumOf(m, 'ibex_context_branch_outcomes_total', { branch, status: 'success' }) -
      sumOf(m, 'ibex_context_branch_outcomes_total', { branch, status: 'skipped' });
    branches[branch] = { ...h, not_success: outcomes(b.samples) - outcomes(a.samples) };
  }
  const degraded_reasons = countersByLabel(a.samples, b.samples, 'ibex_context_degraded_total', 'reason');
  const eld = (q: string) =>
    round3(sumOf(b.samples, 'ibex_context_event_loop_delay_seconds', { quantile: q }) * 1000);
  let cpu_cores: ServerStepStats['cpu_cores'] = null;
  if (a.cpu && b.cpu) {
    const total = (b.cpu.total_s - a.cpu.total_s) / windowS;
    const main = (b.cpu.main_thread_s - a.cpu.main_thread_s) / windowS;
    cpu_cores = { total: round2(total), main_thread: round2(main), other_threads: round2(total - main) };
  }
  let main_thread_sched: ServerStepStats['main_thread_sched'] = null;
  const sa = a.cpu?.main_thread_sched;
  const sb = b.cpu?.main_thread_sched;
  if (sa && sb)
    main_thread_sched = {
      runqueue_wait_ms_per_s: round2(((sb.runqueue_wait_s - sa.runqueue_wait_s) * 1000) / windowS),
      preemptions_per_s: round2((sb.involuntary_switches - sa.involuntary_switches) / windowS),
    };
  let machine_busy_cores: number | null = null;
  if (a.machine && b.machine) machine_busy_cores = round2((b.machine.busy_s - a.machine.busy_s) / windowS);
  return {
    window_s: round3(windowS),
    assembly: histogramDelta(a.samples, b.samples, 'ibex_context_assembly_duration_seconds'),
    pool_wait: histogramDelta(a.samples, b.samples, 'ibex_context_pool_wait_seconds'),
    pool_run,
    pool_tasks,
    pool_busy_ratio: threads > 0 ? round3(runSumS / (windowS * threads)) : 0,
    pool_utilization_gauge: round3(sumOf(b.samples, 'ibex_context_pool_utilization_ratio')),
    pool_threads: threads,
    branches,
    degraded_reasons,
    store_busy:
      sumOf(b.samples, 'ibex_context_store_read_busy_total') -
      sumOf(a.samples, 'ibex_context_store_read_busy_total'),
    refused_too_late:
      sumOf(b.samples, 'ibex_context_refused_too_late_total') -
      sumOf(a.samples, 'ibex_context_refused_too_late_total'),
    late_answers:
      sumOf(b.samples, 'ibex_context_late_answer_seconds_count') -
      sumOf(a.samples, 'ibex_context_late_answer_seconds_count'),
    event_loop_delay_ms: { p50: eld('0.5'), p99: eld('0.99'), max: eld('1') },
    gc: gcDelta(a.samples, b.samples, windowS),
    cpu_cores,
    machine_busy_cores,
    main_thread_sched,
  };
}
