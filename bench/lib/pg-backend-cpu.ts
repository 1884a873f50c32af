/** CPU time of the PostgreSQL backends serving the service's pools, read from /proc (same machine only). */
import type pg from 'pg';
import { processCpuS } from './pinned.js';

/** CPU seconds of the replicas' PostgreSQL backends, by pid. */
export async function backendCpu(admin: pg.Client): Promise<Map<number, number>> {
  const rows = await admin.query<{ pid: number }>(
    "SELECT pid FROM pg_stat_activity WHERE application_name = 'ibex-context' AND datname = current_database()",
  );
  const out = new Map<number, number>();
  for (const { pid } of rows.rows) {
    try {
      out.set(pid, processCpuS(pid));
    } catch {
      // Backend gone, or not on this machine.
    }
  }
  return out;
}

/** CPU seconds the backends of `b` used since `a` (both from {@link backendCpu}), to 0.01 s. */
export function cpuDelta(a: Map<number, number>, b: Map<number, number>): number {
  let s = 0;
  // A backend opened during the window (the pool grows under load) counts whole.
  for (const [pid, t] of b) s += t - (a.get(pid) ?? 0);
  return Math.round(s * 100) / 100;
}
