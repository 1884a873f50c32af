/**
 * The Markdown pieces docs/benchmarks.md is made of: tables padded as Biome pads them, the run line under
 * each heading, and number formats.
 */

/** @param {unknown} v */
export const cell = (v) => (v === undefined || v === null ? '–' : String(v));

/**
 * A Markdown table with its columns padded as the repository's formatter (Biome) pads them, so the
 * generated page passes `npm run lint` unchanged.
 * @param {string[]} head @param {unknown[][]} rows
 */
export function table(head, rows) {
  const lines = [head, ...rows.map((r) => r.map(cell))];
  const widths = head.map((_, i) => Math.max(3, ...lines.map((l) => [...l[i]].length)));
  const line = (l) => `| ${l.map((c, i) => c + ' '.repeat(widths[i] - [...c].length)).join(' | ')} |`;
  return [
    line(lines[0]),
    `| ${widths.map((w) => '-'.repeat(w)).join(' | ')} |`,
    ...lines.slice(1).map(line),
  ].join('\n');
}

/** @param {any} r a result with `machine` (and `generated_at`/`date`/`node`, and `run` from bench/lib/paths.ts) */
export function runLine(r) {
  const m = r.machine;
  const when = (r.generated_at ?? r.date ?? '').slice(0, 10);
  const parts = [];
  if (m) parts.push(`${m.cpus} × ${m.cpu_model}, ${m.memory_gb} GiB`);
  else if (r.cpus) parts.push(`${r.cpus} cores`);
  if (m?.loadavg_1m_at_start !== undefined) parts.push(`load average ${m.loadavg_1m_at_start} at start`);
  if (r.load_average_1m !== undefined) parts.push(`load average ${r.load_average_1m}`);
  if (r.node) parts.push(`Node ${r.node}`);
  if (when) parts.push(`run ${when}`);
  const line = parts.length ? `Run: ${parts.join('; ')}.` : 'Run: machine not recorded in the result file.';
  return r.run ? `${line}\nCommit ${r.run.commit}, written ${r.run.date}.` : line;
}

/**
 * A field a renderer needs; a result file of another shape fails loudly, naming the file's field.
 * @param {any} r @param {string} key
 */
export function need(r, key) {
  if (r[key] === undefined)
    throw new Error(`bench result has no field ${key}: re-run its bench or update scripts/bench-docs/`);
  return r[key];
}

export const round = (v, d = 2) => (typeof v === 'number' ? Math.round(v * 10 ** d) / 10 ** d : v);
export const pct = (v) => (typeof v === 'number' ? `${round(v * 100, 1)} %` : v);

/**
 * Table rows of figures stored flat as `<key>_<column>`: one row per `[label, key]`, the label then
 * `o[key_column]` for each column.
 * @param {any} o @param {[string, string][]} labels @param {string[]} columns
 */
export function keyedRows(o, labels, columns) {
  return labels.map(([label, key]) => [label, ...columns.map((c) => o[`${key}_${c}`])]);
}

/** One table row: `o`'s values of `keys`, in that order. @param {any} o @param {string[]} keys */
export const fields = (o, keys) => keys.map((k) => o[k]);

/** @typedef {{ script: string; command?: string; file: string; title: string; render: (r: any) => string }} Section */
