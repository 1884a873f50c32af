// Memory RPC series (contract.md §7a, §12): calls by method and status, feedback updates, inclusion counter.
import { Counter, Gauge, type Registry } from 'prom-client';
import type { InclusionStats } from '../retrieval/inclusion-counter.js';

/** Series names (the admin endpoint's `/metrics`). */
export const FEEDBACK_SERIES = {
  calls: 'ibex_context_memory_rpc_total',
  updates: 'ibex_context_feedback_updates_total',
  ignored: 'ibex_context_feedback_ignored_ids_total',
  inclusions: 'ibex_context_inclusions_total',
  inclusionsPending: 'ibex_context_inclusions_pending',
} as const;

/** What the memory RPC handlers report. */
export interface FeedbackMetrics {
  /** One call of `method` (`SearchMemories` | `RecordMemoryFeedback`) ended with gRPC status `code`. */
  call(method: string, code: string): void;
  /** Feedback moved `updates` memories and ignored `ignored` ids. */
  feedback(kind: string, updates: number, ignored: number): void;
}

export const NO_FEEDBACK_METRICS: FeedbackMetrics = { call() {}, feedback() {} };

/** Registers the series on `registry`; the inclusion series only with `inclusions` (read at scrape time). */
export function registerFeedbackMetrics(
  registry: Registry,
  inclusions?: () => InclusionStats,
): FeedbackMetrics {
  const calls = new Counter({
    name: FEEDBACK_SERIES.calls,
    help: 'SearchMemories and RecordMemoryFeedback calls, by method and gRPC status code',
    labelNames: ['method', 'code'] as const,
    registers: [registry],
  });
  const updates = new Counter({
    name: FEEDBACK_SERIES.updates,
    help: 'Memories whose usefulness RecordMemoryFeedback moved, by feedback',
    labelNames: ['feedback'] as const,
    registers: [registry],
  });
  const ignored = new Counter({
    name: FEEDBACK_SERIES.ignored,
    help: "RecordMemoryFeedback ids ignored: another org's memory or an unknown id",
    registers: [registry],
  });
  if (inclusions) {
    const reported = { recorded: 0, flushed: 0, droppedFull: 0, droppedFailed: 0 };
    new Counter({
      name: FEEDBACK_SERIES.inclusions,
      help:
        'Memory inclusions counted for the frequency term: recorded (taken from answers), flushed ' +
        '(written), dropped_full (counter map full), dropped_failed (write failed)',
      labelNames: ['event'] as const,
      registers: [registry],
      collect() {
        const s = inclusions();
        const step = (event: string, key: keyof typeof reported) => {
          if (s[key] > reported[key]) this.inc({ event }, s[key] - reported[key]);
          reported[key] = s[key];
        };
        step('recorded', 'recorded');
        step('flushed', 'flushed');
        step('dropped_full', 'droppedFull');
        step('dropped_failed', 'droppedFailed');
      },
    });
    new Gauge({
      name: FEEDBACK_SERIES.inclusionsPending,
      help: 'Distinct memories whose inclusions wait for the next flush',
      registers: [registry],
      collect() {
        this.set(inclusions().pending);
      },
    });
  }
  return {
    call: (method, code) => calls.inc({ method, code }),
    feedback(kind, n, skipped) {
      if (n > 0) updates.inc({ feedback: kind }, n);
      if (skipped > 0) ignored.inc(skipped);
    },
  };
}
