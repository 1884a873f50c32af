/** CPU time of the PostgreSQL backends serving the service's pools, read from /proc (same machine only). */
import { readFileSync } from 'node:fs';
import type pg from 'pg';

/** Clock ticks per second of /proc/<pid>/stat's utime and stime. */
const CLK_TCK = 100;

/** CPU seconds of the replicas' PostgreSQL backends, by pid. */
export async function backendCpu(admin: pg.Client): Promise<Map<number, number>> {
  const rows = await admin.query<{ pid: number }>(
    "SELECT pid FROM pg_stat_activity WHERE application_name = 'ibex-context' AND datname = current_database()",
  );
  const out = new Map<number, number>();
  for (const { pid } of rows.rows) {
    try {
      const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const rest = text.slice(text.lastIndexOf(')') + 2).split(' ');
      out.set(pid, (Number(rest[11]) + Number(rest[12])) / CLK_TCK);
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
