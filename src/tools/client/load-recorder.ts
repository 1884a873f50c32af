// What `ibex-context load` records, in the report's own shapes: counts, the latency HdrHistogram and
// per-second buckets of the measured window. The schedulers decide when calls go out.
import { build, type Histogram } from 'hdr-histogram-js';
import type { AssembleContextRequestInput } from '../../wire/proto.js';
import { errorKey } from './cli-options.js';
import { readAnswer } from './load-transport.js';
import type { LatencyStats, LoadReport, StopReason } from './load-types.js';
import type { RawOutcome } from './raw-grpc.js';
import { round, type SampleStats, sampleStats } from './stats.js';
import { type SlowCall, type TailReport, tailIncidents } from './tail-incidents.js';

const DETAILS_PER_KEY = 3;

class PerSecond {
  private readonly buckets: number[] = [];

  add(second: number, value: number): void {
    this.buckets[second] = (this.buckets[second] ?? 0) + value;
  }

  /** One sample per full second of `windowMs` (a shorter window: its total scaled to a second). */
  samples(windowMs: number): number[] {
    // The epsilon absorbs float error: a 2 s window computed as 1999.9999999 ms still has 2 full seconds.
    const full = Math.floor(windowMs / 1000 + 1e-6);
    if (full > 0) return Array.from({ length: full }, (_, i) => this.buckets[i] ?? 0);
    if (windowMs <= 0) return [];
    const total = this.buckets.reduce((s, v) => s + (v ?? 0), 0);
    return [Math.round((total * 1000) / windowMs)];
  }
}

function latencyHistogram(): Histogram {
  return build({ lowestDiscernibleValue: 1, numberOfSignificantValueDigits: 3, autoResize: true });
}

/** Settings of a {@link LoadRecorder}; times are `performance.now()` ms. */
export interface RecorderSettings {
  measureStart: number;
  /** Planned end of the measured window (later answers are timed but not in its throughput). */
  endAt: number;
  timeoutMs: number;
  lateMarginMs: number;
  verify: boolean;
  tailThresholdMs: number;
}

export class LoadRecorder {
  readonly requests: LoadReport['requests'] = {
    sent: 0,
    completed: 0,
    ok: 0,
    errors: {},
    error_total: 0,
    error_details: {},
    degraded: { L1: 0, L2: 0 },
    levels: { L0: 0, L1: 0, L2: 0 },
    level_missing: 0,
    late: 0,
    unfinished: 0,
    warmup_sent: 0,
  };
  private readonly pack = { constrained_sent: 0, budget_choice: 0, unreadable: 0 };
  /** Latency from the intended send, µs. */
  private readonly hist: Histogram = latencyHistogram();
  /** OK answers' `metrics.total_ms`, whole ms. */
  private readonly serviceHist: Histogram = latencyHistogram();
  /** The rest of those answers' latency from their actual send, µs. */
  private readonly outsideHist: Histogram = latencyHistogram();
  private readonly answersPerSecond = new PerSecond();
  private readonly bytesPerSecond = new PerSecond();
  /** Only calls over the tail threshold are kept, so a long run stays small. */
  private readonly slow: SlowCall[] = [];
  private inWindow = 0;
  private bytesInWindow = 0;
  private lagSumMs = 0;
  private lagMaxMs = 0;
  private lastDoneAt = 0;
  private windowEnd: number;
  answeredSinceProgress = 0;

  constructor(private readonly s: RecorderSettings) {
    this.windowEnd = s.endAt;
  }

  /** Sending stopped: a signal ends the window now; a max-requests run lasts until its last answer. */
  stoppedAt(reason: StopReason, now: number): void {
    if (reason === 'signal') this.windowEnd = Math.min(this.windowEnd, now);
    if (reason === 'max_requests') this.windowEnd = Number.POSITIVE_INFINITY;
  }

  windowMs(): number {
    const end =
      this.windowEnd === Number.POSITIVE_INFINITY
        ? Math.max(this.s.measureStart, this.lastDoneAt)
        : this.windowEnd;
    return Math.max(0, end - this.s.measureStart);
  }

  sent(req: AssembleContextRequestInput, intendedAt: number, sentAt: number, measured: boolean): void {
    if (!measured) {
      this.requests.warmup_sent++;
      return;
    }
    this.requests.sent++;
    if ((req.available_tokens ?? 0) > 0) this.pack.constrained_sent++;
    const lag = sentAt - intendedAt;
    this.lagSumMs += lag;
    if (lag > this.lagMaxMs) this.lagMaxMs = lag;
  }

  /** A measured call cancelled at the end of the run: neither answered nor an error. */
  unfinished(): void {
    this.requests.unfinished++;
  }

  answered(o: RawOutcome, intendedAt: number, sentAt: number, doneAt: number): void {
    const r = this.requests;
    r.completed++;
    this.lastDoneAt = doneAt;
    if (doneAt <= this.windowEnd) this.countInWindow(doneAt, Math.max(0, o.bytes - 5));
    const latencyMs = doneAt - intendedAt;
    this.hist.recordValue(Math.max(1, Math.round(latencyMs * 1000)));
    if (latencyMs > this.s.tailThresholdMs)
      this.slow.push({ at: intendedAt, ms: latencyMs, lag: sentAt - intendedAt });
    if (o.code !== 0) {
      this.error(o, doneAt - sentAt);
      return;
    }
    r.ok++;
    if (doneAt - sentAt > this.s.timeoutMs + this.s.lateMarginMs) r.late++;
    const answer = readAnswer(o, this.s.verify);
    if (answer.totalMs !== null) {
      this.serviceHist.recordValue(Math.max(0, answer.totalMs));
      // Below 0 only by total_ms's rounding to whole ms.
      this.outsideHist.recordValue(Math.max(0, Math.round((doneAt - sentAt - answer.totalMs) * 1000)));
    }
    if (answer.budgetChoice) this.pack.budget_choice++;
    if (answer.unreadable) this.pack.unreadable++;
    const level = answer.level;
    if (level === 'L0' || level === 'L1' || level === 'L2') {
      r.levels[level]++;
      if (level !== 'L0') r.degraded[level]++;
    } else r.level_missing++;
  }

  private countInWindow(doneAt: number, bytes: number): void {
    this.inWindow++;
    this.bytesInWindow += bytes;
    const second = Math.floor((doneAt - this.s.measureStart) / 1000);
    this.answersPerSecond.add(second, 1);
    this.bytesPerSecond.add(second, bytes);
  }

  private error(o: RawOutcome, elapsedMs: number): void {
    const r = this.requests;
    const key = errorKey(o, elapsedMs, this.s.timeoutMs, o.end === 'timer');
    r.errors[key] = (r.errors[key] ?? 0) + 1;
    r.error_total++;
    const details = r.error_details[key] ?? [];
    r.error_details[key] = details;
    if (details.length < DETAILS_PER_KEY && !details.includes(o.details)) details.push(o.details);
  }

  /** Latency summary, ms; frees the histogram, so call it once, last. */
  latency(): LatencyStats {
    const h = this.hist;
    const us = (v: number) => round(v / 1000, 3);
    const empty = h.totalCount === 0;
    const out: LatencyStats = {
      p2_5: us(h.getValueAtPercentile(2.5)),
      p50: us(h.getValueAtPercentile(50)),
      p97_5: us(h.getValueAtPercentile(97.5)),
      p99: us(h.getValueAtPercentile(99)),
      p99_9: us(h.getValueAtPercentile(99.9)),
      avg: empty ? 0 : us(h.mean),
      stdev: empty ? 0 : us(h.stdDeviation),
      min: empty ? 0 : us(h.minNonZeroValue),
      max: us(h.maxValue),
    };
    h.destroy();
    return out;
  }

  /** The report's `split_ms`; frees its histograms, so call it once. */
  split(): LoadReport['split_ms'] {
    // `perMs`: recorded units per ms (the service part in whole ms, the outside part in µs).
    const q = (h: Histogram, perMs: number) =>
      h.totalCount === 0
        ? { p50: 0, p99: 0 }
        : {
            p50: round(h.getValueAtPercentile(50) / perMs, 3),
            p99: round(h.getValueAtPercentile(99) / perMs, 3),
          };
    const out = {
      answers: this.serviceHist.totalCount,
      service: q(this.serviceHist, 1),
      outside: q(this.outsideHist, 1000),
    };
    this.serviceHist.destroy();
    this.outsideHist.destroy();
    return out;
  }

  tail(): TailReport {
    return tailIncidents(this.slow, this.requests.completed, this.s.tailThresholdMs);
  }

  packing(): LoadReport['packing'] {
    const { sent, ok } = this.requests;
    const p = this.pack;
    return {
      constrained_sent: p.constrained_sent,
      constrained_share: sent > 0 ? round(p.constrained_sent / sent, 3) : 0,
      budget_choice: p.budget_choice,
      budget_choice_share: ok > 0 ? round(p.budget_choice / ok, 3) : 0,
      unreadable: p.unreadable,
    };
  }

  rates(
    windowMs: number,
  ): Pick<LoadReport, 'throughput_rps' | 'sent_rps' | 'schedule_lag_ms' | 'rps' | 'bytes'> {
    const seconds = windowMs / 1000;
    const sent = this.requests.sent;
    const rpsSamples = this.answersPerSecond.samples(windowMs);
    const perSecond = (s: PerSecond): SampleStats => sampleStats(s.samples(windowMs));
    return {
      throughput_rps: seconds > 0 ? round(this.inWindow / seconds, 1) : 0,
      sent_rps: seconds > 0 ? round(sent / seconds, 1) : 0,
      schedule_lag_ms: { avg: sent > 0 ? round(this.lagSumMs / sent, 3) : 0, max: round(this.lagMaxMs, 3) },
      rps: { ...sampleStats(rpsSamples), samples: rpsSamples.length },
      bytes: { total: this.bytesInWindow, per_second: perSecond(this.bytesPerSecond) },
    };
  }
}
