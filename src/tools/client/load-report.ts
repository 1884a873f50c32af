// Text rendering of a LoadReport (autocannon's layout) and the progress line.
import type { LoadProgress, LoadReport } from './load-types.js';
import { formatBytes, formatCount, renderTable } from './stats.js';
import { LARGE_INCIDENT_CALLS, type TailReport } from './tail-incidents.js';

const pct = (share: number) => `${(share * 100).toFixed(1)} %`;
const ms = (v: number) => `${v.toFixed(v >= 100 ? 0 : v >= 10 ? 1 : 2)} ms`;

/** The run's header line(s), printed before the run starts and at the top of the report. */
export function describeRun(
  r: Pick<
    LoadReport,
    | 'target'
    | 'open_loop'
    | 'rate'
    | 'connections'
    | 'pipelining'
    | 'duration_s'
    | 'warmup_s'
    | 'timeout_ms'
    | 'source'
  >,
): string {
  const mode = r.open_loop
    ? `open loop at ${r.rate} req/s (latency from the intended send time)`
    : `closed loop, ${r.pipelining} in flight per connection`;
  const warmup = r.warmup_s > 0 ? ` after ${r.warmup_s}s warmup` : '';
  return [
    `Running ${r.duration_s}s load test @ ${r.target}${warmup}`,
    `${r.connections} connections, ${mode}, timeout ${r.timeout_ms} ms`,
    `source: ${r.source}`,
  ].join('\n');
}

/** The human report: latency table, req/s + bytes/s table, totals, errors and degradation. */
export function formatLoadReport(r: LoadReport): string {
  const l = r.latency_ms;
  const latency = renderTable([
    ['Stat', '2.5%', '50%', '97.5%', '99%', '99.9%', 'Avg', 'Stdev', 'Max'],
    [
      'Latency',
      ms(l.p2_5),
      ms(l.p50),
      ms(l.p97_5),
      ms(l.p99),
      ms(l.p99_9),
      ms(l.avg),
      ms(l.stdev),
      ms(l.max),
    ],
  ]);
  const q = r.rps;
  const b = r.bytes.per_second;
  const throughput = renderTable([
    ['Stat', '1%', '2.5%', '50%', '97.5%', 'Avg', 'Stdev', 'Min'],
    ['Req/Sec', ...[q.p1, q.p2_5, q.p50, q.p97_5, q.avg, q.stdev, q.min].map((v) => String(v))],
    ['Bytes/Sec', ...[b.p1, b.p2_5, b.p50, b.p97_5, b.avg, b.stdev, b.min].map(formatBytes)],
  ]);
  const req = r.requests;
  const errors = Object.entries(req.errors)
    .sort((a, b2) => b2[1] - a[1])
    .map(([code, n]) => `${code} ${n}`);
  const lines = [
    describeRun({ ...r }),
    '',
    latency,
    '',
    throughput,
    '',
    `Req/Bytes counts sampled once per second (${q.samples} samples).`,
    `# of samples: ${req.completed}`,
    '',
    `${formatCount(req.sent)} requests in ${r.duration_s}s, ${formatBytes(r.bytes.total)} read` +
      ` — ${r.throughput_rps} answers/s, ${r.sent_rps} sent/s` +
      (r.open_loop ? `, send lag avg ${r.schedule_lag_ms.avg} ms max ${r.schedule_lag_ms.max} ms` : ''),
    `ok ${req.ok} · levels L0 ${req.levels.L0} L1 ${req.levels.L1} L2 ${req.levels.L2}` +
      (req.level_missing > 0 ? ` (no level ${req.level_missing})` : '') +
      ` · degraded ${req.degraded.L1 + req.degraded.L2}`,
    `errors ${req.error_total}${errors.length > 0 ? ` (${errors.join(', ')})` : ''}` +
      ` · late ${req.late} · unfinished ${req.unfinished}` +
      (req.warmup_sent > 0 ? ` · warmup requests ${req.warmup_sent} (not recorded)` : ''),
    `packing: constrained ${r.packing.constrained_sent} sent (${pct(r.packing.constrained_share)}) · ` +
      `packer chose (≥ 1 candidate excluded for budget) in ${r.packing.budget_choice} OK answers ` +
      `(${pct(r.packing.budget_choice_share)})`,
  ];
  if (r.split_ms.answers > 0)
    lines.push(
      `of an OK answer's latency: the service's own total_ms p50 ${r.split_ms.service.p50} ms p99 ` +
        `${r.split_ms.service.p99} ms; outside it (transport, receive, driver) p50 ${r.split_ms.outside.p50} ms ` +
        `p99 ${r.split_ms.outside.p99} ms`,
    );
  lines.push(formatTail(r.tail));
  lines.push(
    `driver (${r.transport}): event loop ${Math.round(r.driver.event_loop_utilization * 100)}% busy, ${r.driver.cpu_s} s CPU`,
  );
  if (r.stopped_by !== 'duration') lines.push(`stopped by ${r.stopped_by.replace('_', ' ')}`);
  for (const w of r.warnings) lines.push(`warning: ${w}`);
  return lines.join('\n');
}

/** The tail in one line: slow calls, incidents, the large ones' period and the driver's lateness in them. */
export function formatTail(t: TailReport): string {
  const count = (n: number, one: string) => `${n} ${one}${n === 1 ? '' : 's'}`;
  const head = `tail (> ${t.threshold_ms} ms): ${count(t.slow_calls, 'call')} (${pct(t.slow_share)})`;
  if (t.largest === null) return head;
  const parts = [`${head} in ${count(t.incidents, 'incident')}`];
  if (t.large_incidents > 0) {
    const period =
      t.large_period_ms === null ? '' : `, every ${(t.large_period_ms / 1000).toFixed(1)} s (median)`;
    const late =
      t.driver_late_large_incidents > 0 ? ` (${t.driver_late_large_incidents} with the driver late)` : '';
    parts.push(
      `${t.large_incidents} of ≥ ${LARGE_INCIDENT_CALLS} calls hold ${t.calls_in_large_incidents}${period}${late}`,
    );
  }
  const l = t.largest;
  const lag = l.max_send_lag_ms > 0 ? ` (driver up to ${l.max_send_lag_ms} ms late)` : '';
  parts.push(
    l.calls === 1
      ? `largest: 1 call, ${l.max_ms} ms${lag}`
      : `largest ${l.calls} calls over ${l.span_ms} ms, up to ${l.max_ms} ms${lag}`,
  );
  return parts.join('; ');
}

/** One-line progress (drawn with `\r` on a terminal). */
export function formatProgress(p: LoadProgress): string {
  const width = 20;
  const done = Math.min(width, Math.round((p.elapsedS / Math.max(p.totalS, 0.001)) * width));
  const bar = `${'█'.repeat(done)}${'░'.repeat(width - done)}`;
  return (
    `${bar} ${p.elapsedS.toFixed(1)}/${p.totalS}s ${p.phase.padEnd(7)} ` +
    `sent ${p.sent} ok ${p.ok} err ${p.errors} in-flight ${p.inFlight} ${p.recentRps} req/s`
  );
}

/** Average send lag above which the open-loop schedule is not being kept, ms. */
const LAG_WARNING_MS = 2;

/**
 * An open-loop run sent late on average by more than {@link LAG_WARNING_MS}: the driver limited it (for
 * callers that must not read {@link warningsOf}'s text).
 */
export function driverLimited(r: LoadReport): boolean {
  return r.open_loop && r.schedule_lag_ms.avg > LAG_WARNING_MS;
}

/** The conditions of a finished run that make its numbers doubtful. */
export function warningsOf(r: LoadReport): string[] {
  const out: string[] = [];
  if (driverLimited(r)) {
    out.push(
      `the driver sent ${r.schedule_lag_ms.avg} ms late on average (max ${r.schedule_lag_ms.max} ms): it could ` +
        'not keep its own schedule, and that lag is inside the latencies; lower -c/-R or give the driver its own cores',
    );
  }
  if (r.requests.unfinished > 0) {
    out.push(`${r.requests.unfinished} call(s) were still unanswered after the deadline and were cancelled`);
  }
  if (r.requests.level_missing > 0) {
    out.push(`${r.requests.level_missing} OK answer(s) carried no degradation level`);
  }
  if (r.packing.unreadable > 0) {
    out.push(`${r.packing.unreadable} OK answer(s) could not be read or failed --verify`);
  }
  return out;
}
