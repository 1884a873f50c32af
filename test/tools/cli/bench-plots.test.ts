/**
 * bench:load's charts: log rate axis, and a percentile that falls among client timeouts is
 * not drawn as a latency; errors and degraded answers get their own chart.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { clientTimeouts, lineChartSpec, writeLoadCharts } from '../../../bench/lib/plot.js';

const dir = mkdtempSync(path.join(tmpdir(), 'ibex-plots-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const step = (rate: number, p50: number, p99: number, byCode: Record<string, number>, degraded = 0) => ({
  rate,
  sent_rps: rate,
  p50_ms: p50,
  p99_ms: p99,
  p99_9_ms: p99 * 1.2,
  errors: Object.values(byCode).reduce((a, b) => a + b, 0),
  errors_by_code: byCode,
  degraded,
});

describe('bench:load charts', () => {
  it('counts client timeouts from the split DEADLINE_EXCEEDED key and unanswered calls', () => {
    expect(
      clientTimeouts({
        errors_by_code: {
          'DEADLINE_EXCEEDED (client --timeout)': 3,
          'DEADLINE_EXCEEDED (server cap)': 5,
          UNFINISHED: 2,
        },
      }),
    ).toBe(5);
  });

  it('leaves out percentiles among client timeouts and draws errors/degraded as % of calls', async () => {
    const rows = [
      step(50, 5, 20, {}),
      // 2 % of 1000 calls timed out: p50 is a latency, p99 and p99.9 are the timeout.
      step(100, 8, 990, { 'DEADLINE_EXCEEDED (client --timeout)': 20 }, 100),
      step(1000, 1000, 1040, { 'DEADLINE_EXCEEDED (client --timeout)': 9000 }),
    ];
    const { svgFile, errorsSvgFile } = await writeLoadCharts(dir, {
      rows,
      stepSeconds: 10,
      timeoutMs: 1000,
      p99TargetMs: 20,
      subtitle: 'test',
    });
    const svg = readFileSync(svgFile, 'utf8');
    expect(svg).toContain("X-axis titled 'offered rate (requests/s, log scale)' for a log scale");
    // Drawn: p50 at 50 and 100, p99 and p99.9 at 50 only, the 20 ms target (at 20 ms) — never ≥ 990 ms.
    expect(svg).toMatch(/Y-axis titled 'latency \(ms, log scale\)' for a log scale with values from 5 to 24/);
    const errors = readFileSync(errorsSvgFile, 'utf8');
    // 90 % of the 1000-rps step timed out; 10 % of the 100-rps step was degraded.
    expect(errors).toMatch(/Y-axis titled '% of calls sent' for a linear scale with values from 0 to 90/);
  });

  it('lineChartSpec uses a log x scale only when asked', () => {
    const base = { title: 't', xTitle: 'x', yTitle: 'y', series: [{ name: 's', points: [{ x: 1, y: 1 }] }] };
    const scales = (spec: ReturnType<typeof lineChartSpec>) =>
      spec.scales as { name: string; type: string }[];
    expect(scales(lineChartSpec({ ...base, xLog: true })).find((s) => s.name === 'x')!.type).toBe('log');
    expect(scales(lineChartSpec(base)).find((s) => s.name === 'x')!.type).toBe('linear');
  });
});
