/**
 * Summary of V8's `--trace-gc-nvp` output, per isolate (the service's main thread and each worker thread
 * have one): how many scavenges and mark-compacts, their pauses, and how much a scavenge promotes.
 *
 * Why: at 1,000 req/s the main thread's scavenges took 2.5–3 ms each and promoted ~1.5 MB (12 % of what
 * was allocated), which feeds a mark-compact every ~2 s (docs/design/main-thread.md, "Where the tail comes from").
 * Promotion is what makes both pauses long, and the nvp trace is the only place V8 reports it per
 * collection.
 *
 * Pause quantiles come from the benches' one percentile estimator (`percentilesOf`, HDR, 3 significant
 * digits).
 *
 * A line looks like `[1234:0x5f3e0c0]    51799 ms: pause=0.3 mutator=1134.5 gc=s … allocated=7529048
 * promoted=42744 …`: the bracket names the process and isolate, the ms is the isolate's own uptime.
 */

import { medianOfSorted, percentilesOf } from '../../../src/tools/client/stats.js';

/** One collection as the trace prints it. */
export interface GcEvent {
  /** Isolate address, e.g. `0x5f3e0c0`. */
  isolate: string;
  /** Milliseconds since the isolate started. */
  atMs: number;
  /** `s` scavenge, `mc` mark-compact, `mmc` minor mark-compact. */
  kind: string;
  /** Main-thread pause, ms. */
  pauseMs: number;
  /** Bytes allocated since the previous collection. */
  allocated: number;
  /** Bytes moved to the old generation by this collection (scavenges; 0 when not printed). */
  promoted: number;
}

// The last prefix of the line: isolates print concurrently, and V8 sometimes writes one isolate's prefix and
// then another's whole line (`[1:0xa] 18 ms: [1:0xb] 14 ms: pause=…`); the first isolate's fields then come
// on a line of their own with no prefix, which cannot be attributed and is skipped.
const LINE = /\[\d+:(0x[0-9a-f]+)\]\s+(\d+) ms: (?!.*\[\d+:0x[0-9a-f]+\]\s+\d+ ms: )(.*)$/;

/** Parses one trace line; `null` for anything else (the service's own log lines share the stream). */
export function parseGcLine(line: string): GcEvent | null {
  const m = LINE.exec(line.trim());
  if (!m) return null;
  const fields = new Map<string, string>();
  for (const pair of m[3]!.split(/\s+/)) {
    const eq = pair.indexOf('=');
    if (eq > 0) fields.set(pair.slice(0, eq), pair.slice(eq + 1));
  }
  const kind = fields.get('gc');
  const pause = Number(fields.get('pause'));
  if (kind === undefined || !Number.isFinite(pause)) return null;
  return {
    isolate: m[1]!,
    atMs: Number(m[2]),
    kind,
    pauseMs: pause,
    allocated: Number(fields.get('allocated') ?? 0) || 0,
    promoted: Number(fields.get('promoted') ?? 0) || 0,
  };
}

/** Figures of one isolate over the summarised window. */
export interface IsolateGcSummary {
  isolate: string;
  /** Order in which the isolate first appeared in the trace: 0 is the main thread's (it starts and collects first). */
  order: number;
  scavenges: number;
  scavenge_pause_ms: { p50: number; p90: number; max: number; total: number };
  /** Median bytes promoted per scavenge (a count: {@link medianOfSorted}, not the HDR estimate). */
  promoted_per_scavenge_p50: number;
  /** Promoted bytes over allocated bytes, all scavenges of the window. */
  promoted_share: number;
  mark_compacts: number;
  mark_compact_pause_ms: { max: number; total: number };
}

const r3 = (x: number) => Math.round(x * 1000) / 1000;

/**
 * Summarises the events of each isolate whose uptime is at least `afterMs` (skip start-up and warm-up:
 * an isolate's clock starts with it, so the window is per isolate).
 * @returns one summary per isolate, in order of first appearance.
 */
export function summariseGc(events: readonly GcEvent[], afterMs = 0): IsolateGcSummary[] {
  const order = new Map<string, number>();
  for (const e of events) if (!order.has(e.isolate)) order.set(e.isolate, order.size);
  return [...order].map(([isolate, rank]) => {
    const mine = events.filter((e) => e.isolate === isolate && e.atMs >= afterMs);
    const scavenges = mine.filter((e) => e.kind === 's');
    const compacts = mine.filter((e) => e.kind === 'mc');
    const pauses = scavenges.map((e) => e.pauseMs);
    const pauseAt = percentilesOf(pauses);
    const promoted = scavenges.map((e) => e.promoted).sort((a, b) => a - b);
    const allocated = scavenges.reduce((s, e) => s + e.allocated, 0);
    const promotedTotal = promoted.reduce((s, x) => s + x, 0);
    return {
      isolate,
      order: rank,
      scavenges: scavenges.length,
      scavenge_pause_ms: {
        p50: r3(pauseAt(50)),
        p90: r3(pauseAt(90)),
        max: r3(Math.max(0, ...pauses)),
        total: r3(pauses.reduce((s, x) => s + x, 0)),
      },
      promoted_per_scavenge_p50: medianOfSorted(promoted),
      promoted_share: allocated > 0 ? r3(promotedTotal / allocated) : 0,
      mark_compacts: compacts.length,
      mark_compact_pause_ms: {
        max: r3(Math.max(0, ...compacts.map((e) => e.pauseMs))),
        total: r3(compacts.reduce((s, e) => s + e.pauseMs, 0)),
      },
    };
  });
}
