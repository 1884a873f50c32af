/** `bench:replicas`'s recovery phase: back to full L0 after an overload and after losing every backend. */
import type pg from 'pg';
import { runLoad } from '../../src/tools/client/load-driver.js';
import { cyclingSource } from '../../src/tools/client/request-source.js';
import type { AssembleContextRequestInput } from '../../src/wire/proto.js';
import { measureStep } from './load-step.js';
import { parsePrometheus, sumOf } from './server-metrics.js';
import type { ServiceProcess } from './service-process.js';

/** The replica's `ibex_context_postgres_events_total{event}` now. */
async function pgEvent(s: ServiceProcess, event: string): Promise<number> {
  return sumOf(parsePrometheus(await s.metricsText()), 'ibex_context_postgres_events_total', { event });
}

/** 1 s steps at `rate` until one is all L0 with no error (at most `maxSeconds`): seconds to that step's start. */
async function secondsToL0(
  s: ServiceProcess,
  requests: AssembleContextRequestInput[],
  rate: number,
  connections: number,
  maxSeconds: number,
): Promise<number | null> {
  const t0 = performance.now();
  for (let i = 0; i < maxSeconds; i++) {
    const start = performance.now();
    const row = await measureStep(s, {
      rate,
      seconds: 1,
      rampSeconds: 0,
      connections,
      timeoutMs: 1000,
      source: cyclingSource('recovery', requests),
    });
    if (row.errors === 0 && row.degraded === 0) return Math.round((start - t0) / 100) / 10;
  }
  return null;
}

/**
 * How one replica comes back to full L0 at `rate` calls/s: after 10 s of three times that rate, and after
 * every PostgreSQL backend of the service is terminated (through `admin`). Seconds to full L0 (null: not
 * within 10 s) and the pool connections opened meanwhile.
 */
export async function recovery(
  s: ServiceProcess,
  requests: AssembleContextRequestInput[],
  rate: number,
  connections: number,
  admin: pg.Client,
) {
  const opened0 = await pgEvent(s, 'connections_opened');
  console.error(`recovery: 10 s at ${3 * rate}/s, then ${rate}/s`);
  await runLoad({
    addr: s.grpcAddr,
    rate: 3 * rate,
    connections,
    timeoutMs: 1000,
    source: cyclingSource('overload', requests),
    transport: 'h2',
    durationS: 10,
  });
  const opened1 = await pgEvent(s, 'connections_opened');
  const overloadSeconds = await secondsToL0(s, requests, rate, connections, 10);
  const opened2 = await pgEvent(s, 'connections_opened');
  await admin.query(
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'ibex-context%' AND datname = current_database() AND pid <> pg_backend_pid()",
  );
  const restartSeconds = await secondsToL0(s, requests, rate, connections, 10);
  const opened3 = await pgEvent(s, 'connections_opened');
  return {
    rate_rps: rate,
    overload: {
      offered_rps: 3 * rate,
      seconds: 10,
      seconds_to_full_l0: overloadSeconds,
      connections_opened_during: opened1 - opened0,
      connections_opened_after: opened2 - opened1,
    },
    backends_terminated: {
      seconds_to_full_l0: restartSeconds,
      connections_opened_after: opened3 - opened2,
    },
  };
}
