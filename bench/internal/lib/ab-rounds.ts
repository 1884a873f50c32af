/**
 * Interleaved A/B rounds against running services (bench:internal ab, bench:tracing): the same load source,
 * optionally mixed with budget-constrained twins, one warm-up per service, then per round one measured step
 * of each service, in alternating order so that drift in machine load hits every build alike.
 */
import { SERVICE_NODE_FLAGS } from '../../../src/config/node-flags.js';
import { budgetMix, mixedSource, probeCandidateTokens } from '../../../src/tools/client/budget-mix.js';
import { runLoad } from '../../../src/tools/client/load-driver.js';
import type { RequestSource } from '../../../src/tools/client/request-source.js';
import type { ServiceLoadOptions } from '../../lib/bench-run.js';
import { measureStep } from '../../lib/load-step.js';
import type { ServiceProcess } from '../../lib/service-process.js';
import { AB_GROUPS, type AbStep } from './ab-summary.js';

/** The flags of an A/B bench, beside {@link ServiceLoadOptions}. */
export interface AbRoundOptions extends ServiceLoadOptions {
  rate: number;
  rounds: number;
  stepSeconds: number;
  warmupSeconds: number;
  /** Share (0..1) of requests sent as a budget-constrained twin. */
  constrained: number;
}

/**
 * Runs the rounds (see the module comment), logging each step to stderr as `round N <label(k)>: …`.
 * @returns every step, in the order measured.
 */
export async function runAbRounds(
  services: readonly ServiceProcess[],
  base: RequestSource,
  opts: AbRoundOptions,
  label: (k: number) => string,
): Promise<AbStep[]> {
  let source = base;
  if (opts.constrained > 0) {
    const tokens = await probeCandidateTokens({ addr: services[0]!.grpcAddr }, source.requests ?? []);
    source = mixedSource(source, budgetMix(tokens, { share: opts.constrained, seed: 1 }), opts.constrained);
  }
  const common = {
    connections: opts.connections,
    timeoutMs: opts.timeoutMs,
    source,
    transport: 'h2' as const,
  };
  for (const service of services) {
    if (opts.warmupSeconds > 0)
      await runLoad({ addr: service.grpcAddr, rate: opts.rate, durationS: opts.warmupSeconds, ...common });
  }
  const steps: AbStep[] = [];
  for (let round = 0; round < opts.rounds; round++) {
    const order = services.map((_, k) => k);
    if (round % 2 === 1) order.reverse();
    for (const k of order) {
      const row = await measureStep(services[k]!, {
        rate: opts.rate,
        seconds: opts.stepSeconds,
        rampSeconds: 1,
        ...common,
      });
      const step: AbStep = {
        round,
        build: k,
        ms_per_call: row.cpu_per_thread.server?.ms_per_call ?? null,
        p50_ms: row.p50_ms,
        p99_ms: row.p99_ms,
        errors: row.errors,
        degraded: row.degraded,
      };
      steps.push(step);
      const m = step.ms_per_call;
      console.error(
        `round ${round + 1} ${label(k)}: ` +
          (m ? AB_GROUPS.map((g) => `${g} ${m[g]}`).join(' ') : 'no calls') +
          ` ms/call; p99 ${step.p99_ms} ms, errors ${step.errors}`,
      );
    }
  }
  return steps;
}

/** The run's settings as the result file records them. */
export function abConfig(opts: AbRoundOptions) {
  return {
    rate: opts.rate,
    rounds: opts.rounds,
    step_seconds: opts.stepSeconds,
    warmup_seconds: opts.warmupSeconds,
    constrained: opts.constrained,
    connections: opts.connections,
    node_args: [...(opts.plainNode ? [] : SERVICE_NODE_FLAGS), ...opts.nodeArgs],
  };
}
