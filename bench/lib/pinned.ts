/**
 * bench:load's per-core figures (`--pinned`, `--overload-seconds`): the service and all its threads on
 * one CPU and the driver on another (`taskset`, both commands printed), the bare grpc-js floor driven the
 * same way in the same run, and an overload phase at a multiple of the measured saturation rate followed
 * by the time until every answer is L0 again.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { runLoad } from '../../src/tools/client/load-driver.js';
import type { LoadOptions, LoadReport } from '../../src/tools/client/load-types.js';
import { startBareGrpcServer } from './bare-grpc.js';
import { parsePrometheus, sumOf } from './server-metrics.js';
import type { ServiceProcess } from './service-process.js';

/** USER_HZ of `/proc/<pid>/stat`. */
const CLK_TCK = 100;

/** The CPUs this process may run on (`Cpus_allowed_list` of /proc/self/status), ascending. */
export function allowedCpus(): number[] {
  const line = readFileSync('/proc/self/status', 'utf8').match(/^Cpus_allowed_list:\s*(\S+)/m)?.[1] ?? '0';
  const cpus: number[] = [];
  for (const part of line.split(',')) {
    const [a, b] = part.split('-').map(Number);
    for (let c = a!; c <= (b ?? a!); c++) cpus.push(c);
  }
  return cpus;
}

/**
 * Pins every thread of `pid` to `cpu` with `taskset -a -p -c`. @returns the command, as printed.
 * @throws Error when taskset fails (not installed, no such process).
 */
export function pinAll(pid: number, cpu: number): string {
  const args = ['-a', '-p', '-c', String(cpu), String(pid)];
  execFileSync('taskset', args, { stdio: 'ignore' });
  return `taskset ${args.join(' ')}`;
}

/** CPU seconds of `pid` (all threads) so far, from `/proc/<pid>/stat`. */
export function processCpuS(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
}

/** CPU ms per answered call of `cpuS` CPU seconds; 0 when nothing was answered. */
function msPerCall(cpuS: number, answered: number): number {
  return answered > 0 ? round((cpuS * 1000) / answered, 3) : 0;
}

/** One step of the bare grpc-js floor. */
export interface FloorStep {
  rate: number;
  achieved_rps: number;
  p99_ms: number;
  errors: number;
  /** CPU of the bare server per answered call, ms. */
  cpu_ms_per_call: number;
}

/** The bare server answering one call at a time: the latency floor of the process, its socket and this core. */
export interface FloorSingleCall {
  achieved_rps: number;
  p50_ms: number;
  p99_ms: number;
  errors: number;
  cpu_ms_per_call: number;
}

/**
 * Drives the bare grpc-js server (service definition, canned LoCoMo-sized answer) at `rates`, pinned to
 * `cpu` when given, then with `singleCall` one call at a time (closed loop, one connection) for `seconds`.
 * @returns one row per rate, and the one-call-at-a-time figures (null without `singleCall`).
 */
export async function runBareFloor(
  rates: readonly number[],
  seconds: number,
  common: Omit<LoadOptions, 'addr' | 'rate' | 'durationS'>,
  cpu: number | null,
  singleCall = false,
): Promise<{ steps: FloorStep[]; pin: string | null; single: FloorSingleCall | null }> {
  const bare = await startBareGrpcServer('codec');
  const pid = bare.child.pid!;
  try {
    const pin = cpu === null ? null : pinAll(pid, cpu);
    if (pin) console.error(`bare grpc-js floor: ${pin}`);
    const addr = `127.0.0.1:${bare.port}`;
    await runLoad({ ...common, addr, rate: rates[0]!, durationS: 2 });
    // One run against the bare server, with its CPU per answered call from /proc.
    const measure = async (opts: Partial<LoadOptions>) => {
      const before = processCpuS(pid);
      const r = await runLoad({ ...common, addr, durationS: seconds, ...opts });
      const answered = r.requests.completed;
      return {
        latency: r.latency_ms,
        achieved_rps: round(answered / r.duration_s),
        errors: r.requests.error_total,
        cpu_ms_per_call: msPerCall(processCpuS(pid) - before, answered),
      };
    };
    const steps: FloorStep[] = [];
    for (const rate of rates) {
      const { latency, ...m } = await measure({ rate });
      steps.push({
        rate,
        achieved_rps: m.achieved_rps,
        p99_ms: latency.p99,
        errors: m.errors,
        cpu_ms_per_call: m.cpu_ms_per_call,
      });
      console.error(`bare floor ${rate} rps: p99 ${latency.p99} ms, ${m.cpu_ms_per_call} ms CPU/call`);
    }
    let single: FloorSingleCall | null = null;
    if (singleCall) {
      const { latency, ...m } = await measure({ connections: 1 });
      single = { ...m, p50_ms: latency.p50, p99_ms: latency.p99 };
      console.error(`bare floor, one call at a time: p50 ${single.p50_ms} ms, p99 ${single.p99_ms} ms`);
    }
    return { steps, pin, single };
  } finally {
    bare.child.kill('SIGKILL');
  }
}

/** The overload phase's figures. */
export interface OverloadPhase {
  rate: number;
  seconds: number;
  sent: number;
  errors: number;
  errors_by_code: Record<string, number>;
  /** Answers the service sent after their deadline (its event loop ran late), from its metrics. */
  late_answers: number;
  l0_share: number;
  shed_share: number;
  p99_ms: number;
  /** Highest admission limit / lowest seen at the end of the phase. */
  admission_limit_after: number;
  /** Rate of the recovery phase (the clean rate). */
  recovery_rate: number;
  /**
   * Seconds from the end of the overload to the end of the last recovery slice with a non-L0 answer
   * (0: the first slice was all L0); null when some answer was still degraded in the last slice.
   */
  seconds_back_to_l0: number | null;
  recovery_slices: { t_s: number; sent: number; non_l0: number; errors: number }[];
}

const SLICE_S = 0.25;

/**
 * Offers `rate` for `seconds`, then `recoveryRate` in {@link SLICE_S} slices for `recoverySeconds`:
 * errors, L0 and shed shares (sheds from the service's `ibex_context_admission_shed_total`), p99, and
 * the seconds until every answer is L0 again.
 */
export async function runOverload(
  service: ServiceProcess,
  rate: number,
  seconds: number,
  recoveryRate: number,
  recoverySeconds: number,
  common: Omit<LoadOptions, 'addr' | 'rate' | 'durationS'>,
): Promise<OverloadPhase> {
  const shedsOf = async () =>
    sumOf(parsePrometheus(await service.metricsText()), 'ibex_context_admission_shed_total');
  const lateOf = (text: string) => sumOf(parsePrometheus(text), 'ibex_context_late_answer_seconds_count');
  const shedsBefore = await shedsOf();
  const lateBefore = lateOf(await service.metricsText());
  const r: LoadReport = await runLoad({ ...common, addr: service.grpcAddr, rate, durationS: seconds });
  const samples = parsePrometheus(await service.metricsText());
  const sheds = sumOf(samples, 'ibex_context_admission_shed_total') - shedsBefore;
  const lateAnswers = sumOf(samples, 'ibex_context_late_answer_seconds_count') - lateBefore;
  const slices: OverloadPhase['recovery_slices'] = [];
  for (let t = 0; t < recoverySeconds; t += SLICE_S) {
    const s = await runLoad({ ...common, addr: service.grpcAddr, rate: recoveryRate, durationS: SLICE_S });
    slices.push({
      t_s: round(t + SLICE_S),
      sent: s.requests.sent,
      non_l0: s.requests.ok - s.requests.levels.L0,
      errors: s.requests.error_total,
    });
  }
  const lastBad = slices.findLastIndex((s) => s.non_l0 > 0 || s.errors > 0);
  const sent = r.requests.sent;
  return {
    rate,
    seconds,
    sent,
    errors: r.requests.error_total,
    errors_by_code: r.requests.errors,
    late_answers: lateAnswers,
    l0_share: sent > 0 ? round(r.requests.levels.L0 / sent, 4) : 0,
    shed_share: sent > 0 ? round(sheds / sent, 4) : 0,
    p99_ms: r.latency_ms.p99,
    admission_limit_after: sumOf(samples, 'ibex_context_admission_limit'),
    recovery_rate: recoveryRate,
    seconds_back_to_l0: lastBad === slices.length - 1 ? null : lastBad < 0 ? 0 : slices[lastBad]!.t_s,
    recovery_slices: slices,
  };
}

function round(x: number, digits = 2): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}
