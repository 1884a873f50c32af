/**
 * The saturation ramp of the load-held benches: geometric open-loop steps until one is not clean,
 * then bisections.
 */
import { type LoadReport, runLoad } from '../../src/tools/client/load-driver.js';
import { driverLimited } from '../../src/tools/client/load-report.js';
import type { RequestSource } from '../../src/tools/client/request-source.js';

const round3 = (x: number) => Math.round(x * 1000) / 1000;

/** One ramp step. */
export interface RampStep {
  rate: number;
  achieved_rps: number;
  /** From the intended send time (runLoad, coordinated omission corrected). */
  p99_ms: number;
  errors: number;
  degraded_share: number;
  clean: boolean;
  driver_limited: boolean;
}

/** Options of {@link findSaturation}. */
export interface RampOptions {
  /** First rate, rps (default 50). */
  start?: number;
  /** Factor between steps (default 1.5). */
  factor?: number;
  /** Highest rate tried (default 50000). */
  max?: number;
  /** Seconds per step, after 1 s of unrecorded warm-up (default 3). */
  stepSeconds?: number;
  connections: number;
  deadlineMs: number;
  /** Degraded share above which a step is not clean (default 0.005). */
  maxDegradedShare?: number;
  /** Error share (any non-OK status) above which a step is not clean (default 0.001). */
  maxErrorShare?: number;
  log?: (line: string) => void;
}

function stepOf(
  rate: number,
  r: LoadReport,
  deadlineMs: number,
  maxDegraded: number,
  maxErrors: number,
): RampStep {
  const answered = r.requests.ok;
  const degraded = r.requests.degraded.L1 + r.requests.degraded.L2;
  const degradedShare = answered > 0 ? degraded / answered : 1;
  const errors = r.requests.error_total + r.requests.unfinished;
  return {
    rate,
    achieved_rps: r.throughput_rps,
    p99_ms: r.latency_ms.p99,
    errors,
    degraded_share: round3(degradedShare),
    clean:
      errors <= maxErrors * r.requests.sent &&
      r.latency_ms.p99 <= deadlineMs &&
      degradedShare <= maxDegraded &&
      r.throughput_rps >= 0.95 * rate,
    driver_limited: driverLimited(r),
  };
}

/**
 * The saturation rate: the highest open-loop rate answered in full — at most `maxErrorShare` errors and
 * `maxDegradedShare` degraded answers, p99 (from the intended send time) within the deadline, throughput
 * keeping up. Geometric steps until one is not clean (twice in a row), then two bisections between the
 * last clean rate and it.
 */
export async function findSaturation(addr: string, source: RequestSource, opts: RampOptions) {
  const factor = opts.factor ?? 1.5;
  const maxDegraded = opts.maxDegradedShare ?? 0.005;
  const maxErrors = opts.maxErrorShare ?? 0.001;
  const steps: RampStep[] = [];
  const step = async (rate: number) => {
    const r = await runLoad({
      addr,
      rate,
      durationS: opts.stepSeconds ?? 3,
      warmupS: 1,
      connections: opts.connections,
      timeoutMs: opts.deadlineMs,
      source,
    });
    const s = stepOf(rate, r, opts.deadlineMs, maxDegraded, maxErrors);
    steps.push(s);
    opts.log?.(
      `  ramp ${String(rate).padStart(6)} rps: achieved ${Math.round(s.achieved_rps)}, p99 ${s.p99_ms} ms, ` +
        `errors ${s.errors}, degraded ${(s.degraded_share * 100).toFixed(2)} % → ${s.clean ? 'clean' : 'not clean'}` +
        (s.driver_limited ? ' (driver behind schedule)' : ''),
    );
    // Let a backlog drain before the next step.
    await new Promise((r) => setTimeout(r, 500));
    return s.clean;
  };
  // A step that is not clean is run once more: one stall of a shared machine should not end the ramp.
  const clean = async (rate: number) => (await step(rate)) || (await step(rate));
  let good = 0;
  let bad = 0;
  for (let rate = opts.start ?? 50; rate <= (opts.max ?? 50_000); rate = Math.round(rate * factor)) {
    if (await clean(rate)) good = rate;
    else {
      bad = rate;
      break;
    }
  }
  if (good > 0 && bad > 0) {
    for (let i = 0; i < 2; i++) {
      const mid = Math.round((good + bad) / 2);
      if (mid === good || mid === bad) break;
      if (await clean(mid)) good = mid;
      else bad = mid;
    }
  }
  return { rate: good, first_unclean_rate: bad || null, steps };
}

/**
 * The saturation rate a bench runs against: `--rate` when given, else found by a ramp (logged).
 * @returns the rate (req/s) and the ramp record (null when `--rate` was given).
 * @throws Error when not even the first ramp step is clean.
 */
export async function resolveSaturation(
  addr: string,
  source: RequestSource,
  opts: { rate?: number; connections: number; deadlineMs: number },
): Promise<{ rate: number; saturation: Awaited<ReturnType<typeof findSaturation>> | null }> {
  if (opts.rate) return { rate: opts.rate, saturation: null };
  console.log('finding the saturation rate (ramp):');
  const saturation = await findSaturation(addr, source, {
    connections: opts.connections,
    deadlineMs: opts.deadlineMs,
    log: (l) => console.log(l),
  });
  if (saturation.rate === 0) {
    throw new Error('not even the first ramp step was clean (a busy machine?); pass --rate <saturation rps>');
  }
  return { rate: saturation.rate, saturation };
}
