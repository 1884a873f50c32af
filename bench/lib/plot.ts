/**
 * Line charts for bench results, rendered to SVG headlessly with Vega (no browser, no canvas): several
 * series against one x axis, a linear or log y axis, axis titles and a legend.
 */
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import * as vega from 'vega';
import type { StepRow } from './load-step.js';

/** One line: its points in x order (points with a non-finite y are left out). */
export interface Series {
  name: string;
  points: readonly { x: number; y: number }[];
  /** Dashed stroke, for reference lines such as a target. */
  dashed?: boolean;
}

/** A chart of {@link Series}. */
export interface LineChart {
  title: string;
  /** Smaller text under the title (machine, run settings). */
  subtitle?: string;
  xTitle: string;
  yTitle: string;
  series: readonly Series[];
  /** Log y axis; values ≤ 0 are drawn at {@link LineChart.yFloor}. Default linear. */
  yLog?: boolean;
  /** Smallest y drawn on a log axis (default 0.01). */
  yFloor?: number;
  /** Log x axis (rates spanning decades); values ≤ 0 are left out. Default linear. */
  xLog?: boolean;
  /** Ticks exactly at the x values of the data (small discrete sets such as thread counts). */
  xTicksAtData?: boolean;
  width?: number;
  height?: number;
}

/** One series' mark over the faceted `line` data at (x, y); `enter` holds the mark's own channels. */
function seriesMark(type: 'line' | 'symbol', enter: vega.EncodeEntry): vega.Mark {
  return {
    type,
    from: { data: 'line' },
    encode: { enter: { x: { scale: 'x', field: 'x' }, y: { scale: 'y', field: 'y' }, ...enter } },
  };
}

/** The Vega spec of a chart (exported for tests and for tweaking by hand). */
export function lineChartSpec(chart: LineChart): vega.Spec {
  const floor = chart.yFloor ?? 0.01;
  const values = chart.series.flatMap((s, order) =>
    s.points
      .filter((p) => Number.isFinite(p.x) && Number.isFinite(p.y) && (!chart.xLog || p.x > 0))
      .map((p) => ({
        series: s.name,
        order,
        dashed: s.dashed === true,
        x: p.x,
        y: chart.yLog ? Math.max(floor, p.y) : p.y,
      })),
  );
  const xValues = [...new Set(values.map((v) => v.x))].sort((a, b) => a - b);
  const spec: vega.Spec = {
    $schema: 'https://vega.github.io/schema/vega/v5.json',
    width: chart.width ?? 640,
    height: chart.height ?? 360,
    padding: 8,
    background: 'white',
    title: {
      text: chart.title,
      ...(chart.subtitle ? { subtitle: chart.subtitle } : {}),
      anchor: 'start',
      fontSize: 14,
    },
    data: [{ name: 'points', values }],
    scales: [
      chart.xLog
        ? {
            name: 'x',
            type: 'log',
            domain: { data: 'points', field: 'x' },
            range: 'width',
            nice: false,
            padding: chart.xTicksAtData ? 24 : 0,
          }
        : {
            name: 'x',
            type: 'linear',
            domain: { data: 'points', field: 'x' },
            range: 'width',
            zero: false,
            nice: !chart.xTicksAtData,
            padding: chart.xTicksAtData ? 24 : 0,
          },
      chart.yLog
        ? { name: 'y', type: 'log', domain: { data: 'points', field: 'y' }, range: 'height', nice: false }
        : {
            name: 'y',
            type: 'linear',
            domain: { data: 'points', field: 'y' },
            range: 'height',
            zero: true,
            nice: true,
          },
      {
        name: 'color',
        type: 'ordinal',
        domain: chart.series.map((s) => s.name),
        range: 'category',
      },
    ],
    axes: [
      {
        orient: 'bottom',
        scale: 'x',
        title: chart.xTitle,
        grid: true,
        gridOpacity: 0.3,
        ...(chart.xTicksAtData ? { values: xValues, format: 'd' } : chart.xLog ? { format: '~g' } : {}),
      },
      {
        orient: 'left',
        scale: 'y',
        title: chart.yTitle,
        grid: true,
        gridOpacity: 0.3,
        ...(chart.yLog ? { format: '~g' } : {}),
      },
    ],
    legends: [{ stroke: 'color', fill: 'color', orient: 'top-left', symbolType: 'stroke', labelLimit: 360 }],
    marks: [
      {
        type: 'group',
        from: { facet: { name: 'line', data: 'points', groupby: ['series', 'order', 'dashed'] } },
        marks: [
          seriesMark('line', {
            stroke: { scale: 'color', field: 'series' },
            strokeWidth: { value: 2 },
            strokeDash: { signal: 'datum.dashed ? [6, 4] : [1, 0]' },
          }),
          seriesMark('symbol', {
            fill: { scale: 'color', field: 'series' },
            size: { signal: 'datum.dashed ? 0 : 36' },
            tooltip: { signal: "datum.series + ': ' + format(datum.y, '.3~g')" },
          }),
        ],
      },
    ],
  };
  return spec;
}

/** Renders a chart to SVG text. */
export async function renderLineChart(chart: LineChart): Promise<string> {
  const view = new vega.View(vega.parse(lineChartSpec(chart)), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}

/** Renders a chart and writes it to `file`. */
export async function writeLineChart(file: string, chart: LineChart): Promise<void> {
  writeFileSync(file, await renderLineChart(chart));
}

/** What {@link writeLoadCharts} draws: bench:load's steps and the settings they ran with. */
export interface LoadCharts {
  rows: readonly Pick<
    StepRow,
    'rate' | 'sent_rps' | 'p50_ms' | 'p99_ms' | 'p99_9_ms' | 'errors' | 'errors_by_code' | 'degraded'
  >[];
  /** Measured seconds per step. */
  stepSeconds: number;
  /** The driver's per-call deadline, ms. */
  timeoutMs: number;
  p99TargetMs: number;
  subtitle: string;
}

/** Client timeouts of a step: DEADLINE_EXCEEDED by the client's own deadline, plus calls never answered. */
export function clientTimeouts(r: Pick<StepRow, 'errors_by_code'>): number {
  return (r.errors_by_code['DEADLINE_EXCEEDED (client --timeout)'] ?? 0) + (r.errors_by_code.UNFINISHED ?? 0);
}

/**
 * bench:load's two charts, both on a log rate axis so the 50–500 req/s decision region is
 * readable: `load.svg`, latency percentiles where they are latencies — a percentile q is left out at a
 * rate where more than 1 − q of the calls were client timeouts or where it reaches the timeout, since it
 * would then draw the `--timeout`, not a latency — and `load-errors.svg`, errors, client timeouts and
 * degraded answers as % of the calls sent.
 * @returns the two files written in `outDir`.
 */
export async function writeLoadCharts(
  outDir: string,
  c: LoadCharts,
): Promise<{ svgFile: string; errorsSvgFile: string }> {
  const calls = (r: LoadCharts['rows'][number]) => Math.max(1, Math.round(r.sent_rps * c.stepSeconds));
  const latency = (q: number, pick: (r: LoadCharts['rows'][number]) => number) =>
    c.rows
      .filter((r) => clientTimeouts(r) / calls(r) <= 1 - q && pick(r) < c.timeoutMs)
      .map((r) => ({ x: r.rate, y: pick(r) }));
  const svgFile = path.join(outDir, 'load.svg');
  await writeLineChart(svgFile, {
    title: 'AssembleContext latency against offered rate (open loop)',
    subtitle: `${c.subtitle}; a percentile is not drawn where it falls among client timeouts`,
    xTitle: 'offered rate (requests/s, log scale)',
    yTitle: 'latency (ms, log scale)',
    xLog: true,
    yLog: true,
    xTicksAtData: true,
    series: [
      { name: 'p50', points: latency(0.5, (r) => r.p50_ms) },
      { name: 'p99', points: latency(0.99, (r) => r.p99_ms) },
      { name: 'p99.9', points: latency(0.999, (r) => r.p99_9_ms) },
      {
        name: `${c.p99TargetMs} ms target`,
        dashed: true,
        points: c.rows.map((r) => ({ x: r.rate, y: c.p99TargetMs })),
      },
    ],
  });
  const pct = (n: number, r: LoadCharts['rows'][number]) => Math.round((n / calls(r)) * 10_000) / 100;
  const errorsSvgFile = path.join(outDir, 'load-errors.svg');
  await writeLineChart(errorsSvgFile, {
    title: 'Errors and degraded answers against offered rate (open loop)',
    subtitle: c.subtitle,
    xTitle: 'offered rate (requests/s, log scale)',
    yTitle: '% of calls sent',
    xLog: true,
    xTicksAtData: true,
    series: [
      {
        name: 'errors (any status, incl. client timeouts)',
        points: c.rows.map((r) => ({ x: r.rate, y: pct(r.errors, r) })),
      },
      { name: 'client timeouts', points: c.rows.map((r) => ({ x: r.rate, y: pct(clientTimeouts(r), r) })) },
      { name: 'degraded (L1 + L2)', points: c.rows.map((r) => ({ x: r.rate, y: pct(r.degraded, r) })) },
    ],
  });
  return { svgFile, errorsSvgFile };
}
