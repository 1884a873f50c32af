/**
 * What the assembly pipeline reports about each call: {@link metricsObserver} maps it to the contract.md §12
 * series, {@link NO_OBSERVER} drops it.
 */
import type { CpuStageResult } from '../pool/pool-client.js';
import type { RetrievalResult } from '../retrieval/retrieve.js';
import type { Metrics } from '../telemetry/metrics.js';
import type { DegradationLevel } from '../wire/proto.js';

/** The pipeline's reporting points, in call order. Implementations must not throw. */
export interface AssemblyObserver {
  /** A call entered the pipeline (in-flight + 1). */
  callStarted(): void;
  /** A call left the pipeline, answered or not (in-flight − 1). */
  callEnded(): void;
  /** Retrieval ended: branch outcomes and latencies (ms), dropped and bounded hits. */
  retrieved(r: RetrievalResult): void;
  /** The CPU stage returned a result: pool wait and run (µs), the packer's path. */
  cpuStageDone(stage: CpuStageResult): void;
  /** The answer is degraded: one event per reason (`hot_timeout:…` counted under `hot_timeout`). */
  degraded(level: DegradationLevel, reasons: readonly string[]): void;
  /** A large-history call was refused DEADLINE_EXCEEDED: even its degraded answer would miss D. */
  refusedTooLate(): void;
}

export const NO_OBSERVER: AssemblyObserver = {
  callStarted() {},
  callEnded() {},
  retrieved() {},
  cpuStageDone() {},
  degraded() {},
  refusedTooLate() {},
};

/** `observer` while `quiet()` is false; nothing while it is true. */
export function unlessQuiet(quiet: () => boolean, observer: AssemblyObserver): AssemblyObserver {
  const pick = () => (quiet() ? NO_OBSERVER : observer);
  return {
    callStarted: () => pick().callStarted(),
    callEnded: () => pick().callEnded(),
    retrieved: (r) => pick().retrieved(r),
    cpuStageDone: (stage) => pick().cpuStageDone(stage),
    degraded: (level, reasons) => pick().degraded(level, reasons),
    refusedTooLate: () => pick().refusedTooLate(),
  };
}

/** Reports into the service's prom-client series (contract.md §12; src/telemetry/metrics.ts names them). */
export function metricsObserver(metrics: Metrics): AssemblyObserver {
  return {
    callStarted: () => metrics.inFlight.inc(),
    callEnded: () => metrics.inFlight.dec(),
    retrieved(r) {
      for (const b of r.branches) {
        metrics.branchOutcomes.inc({ branch: b.name, status: b.status });
        if (b.status !== 'skipped')
          metrics.branchDuration.observe({ branch: b.name, status: b.status }, b.latency_ms / 1000);
      }
      if (r.dropped.invalid > 0) metrics.droppedHits.inc({ reason: 'invalid' }, r.dropped.invalid);
      if (r.dropped.foreign > 0) metrics.droppedHits.inc({ reason: 'foreign' }, r.dropped.foreign);
      if (r.bounded.oversize > 0) metrics.droppedHits.inc({ reason: 'oversize' }, r.bounded.oversize);
      if (r.bounded.ignored > 0) metrics.droppedHits.inc({ reason: 'past_limit' }, r.bounded.ignored);
    },
    cpuStageDone(stage) {
      metrics.poolWait.observe(stage.wait_us / 1e6);
      metrics.poolRun.observe(stage.run_us / 1e6);
      metrics.packerPath.inc({
        path: stage.output.pack.path,
        reason: stage.output.pack.greedy_reason ?? 'none',
      });
    },
    degraded(level, reasons) {
      for (const reason of reasons) metrics.degraded.inc({ level, reason: reason.split(':')[0]! });
    },
    refusedTooLate: () => metrics.refusedTooLate.inc(),
  };
}
