/**
 * bench:internal ab's summary (bench/internal/ab.ts): per build the median CPU per call per thread group over the
 * rounds, and for every build after the first the per-round paired differences from the first build.
 */
import { median, round } from '../../../src/tools/client/stats.js';

/** The thread groups of `/proc` CPU per call (bench/lib/thread-cpu.ts) and their total. */
export const AB_GROUPS = ['main', 'pool', 'store', 'other', 'total'] as const;
export type AbGroup = (typeof AB_GROUPS)[number];

/** One build's step in one round. */
export interface AbStep {
  round: number;
  /** Index of the build in `--builds` (two may be the same checkout). */
  build: number;
  /** CPU ms per answered call per thread group; null when no call was answered. */
  ms_per_call: Record<AbGroup, number> | null;
  p50_ms: number;
  p99_ms: number;
  errors: number;
  degraded: number;
}

/** A build's summary; `vs_first` for every build after the first. */
export interface AbBuildSummary {
  build: number;
  median_ms_per_call: Record<AbGroup, number>;
  p99_ms_median: number;
  /** Per group: median of (this build − first build) over the rounds both measured, ms; rounds it was lower. */
  vs_first?: Record<AbGroup, { median_diff_ms: number; rounds_lower: number; rounds: number }>;
}

/** Summarises `steps` of `builds` builds (indices 0 … builds − 1). Steps without calls are left out. */
export function summariseAb(builds: number, steps: readonly AbStep[]): AbBuildSummary[] {
  const of = (b: number) => steps.filter((s) => s.build === b && s.ms_per_call !== null);
  const reference = of(0);
  return Array.from({ length: builds }, (_, build) => {
    const mine = of(build);
    const groups = <T>(f: (g: AbGroup) => T) =>
      Object.fromEntries(AB_GROUPS.map((g) => [g, f(g)])) as Record<AbGroup, T>;
    const summary: AbBuildSummary = {
      build,
      median_ms_per_call: groups((g) => round(median(mine.map((s) => s.ms_per_call![g])))),
      p99_ms_median: round(median(mine.map((s) => s.p99_ms))),
    };
    if (build === 0) return summary;
    summary.vs_first = groups((g) => {
      const diffs = mine.flatMap((s) => {
        const ref = reference.find((r) => r.round === s.round);
        return ref ? [s.ms_per_call![g] - ref.ms_per_call![g]] : [];
      });
      return {
        median_diff_ms: round(median(diffs)),
        rounds_lower: diffs.filter((d) => d < 0).length,
        rounds: diffs.length,
      };
    });
    return summary;
  });
}
