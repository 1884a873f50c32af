// Prometheus metrics (contract.md §12), `ibex_context_*` in base units, on a registry of their own so tests
// and several servers in one process do not collide.

import { readFileSync } from 'node:fs';
import path from 'node:path';
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import type { PoolStats } from '../pool/pool-stats.js';
import type { MemoryThreadStats, StoreReadStats } from '../retrieval/ports.js';
import { PG_EVENTS, type PgEventCounts } from '../retrieval/postgres/pg-stats.js';
import { MESSAGE_BUFFERS } from '../util/message-buffers.js';
import { startLoopDelayMonitor } from './loop-delay.js';
import { transportCounters } from './transport-counters.js';

/** Latency buckets in seconds: sub-millisecond to the request deadline and a bit past it. */
const LATENCY_BUCKETS = [
  0.0005, 0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.25, 1,
];
const POOL_BUCKETS = [0.00001, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05];

/** Pool figures read at scrape time; only the pool knows whether a deadline withdrew or abandoned a task. */
export type PoolGaugeSource = Pick<
  PoolStats,
  | 'queueSize'
  | 'utilization'
  | 'threads'
  | 'capacity'
  | 'maxQueue'
  | 'completed'
  | 'withdrawn'
  | 'abandoned'
  | 'rejected'
  | 'failed'
  | 'unfit'
>;

/** Store-read thread figures read at scrape time (`PooledStoreReads.stats()`). */
export type StoreReadGaugeSource = StoreReadStats;

/** Memory-fetch thread figures read at scrape time (`RoutedMemorySource.stats()`). */
export type MemoryThreadGaugeSource = MemoryThreadStats;

/** `version` of the package.json above this module, or `unknown`. */
function packageVersion(): string {
  let dir = path.dirname(new URL(import.meta.url).pathname);
  for (;;) {
    try {
      const v = (JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8')) as { version?: unknown })
        .version;
      return typeof v === 'string' ? v : 'unknown';
    } catch {
      const up = path.dirname(dir);
      if (up === dir) return 'unknown';
      dir = up;
    }
  }
}

export interface Metrics {
  registry: Registry;
  /** Every AssembleContext call, by level (`none` without an answer) and gRPC code name (contract.md §12). */
  assemblyDuration: Histogram<'level' | 'code'>;
  assemblies: Counter<'level' | 'code'>;
  degraded: Counter<'level' | 'reason'>;
  branchDuration: Histogram<'branch' | 'status'>;
  branchOutcomes: Counter<'branch' | 'status'>;
  droppedHits: Counter<'reason'>;
  poolWait: Histogram;
  poolRun: Histogram;
  packerPath: Counter<'path' | 'reason'>;
  inFlight: Gauge;
  /** Calls with a large history refused because not even their degraded answer could be ready in time. */
  refusedTooLate: Counter;
  /** Answers sent after D: how late (seconds past D), by how they came to be late (`LateAnswerPath`). */
  lateAnswers: Histogram<'path'>;
  /** Stops the event-loop monitor. */
  stop(): void;
}

/**
 * Creates the registry and metrics. `pool`, `memoryThread` and `storeReads` are read at scrape time; an
 * absent one (not created yet, or not configured) reads 0.
 */
export function createMetrics(
  pool?: () => PoolGaugeSource | undefined,
  storeReads?: () => StoreReadGaugeSource | undefined,
  memoryThread?: () => MemoryThreadGaugeSource | undefined,
): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: 10 });
  const loop = startLoopDelayMonitor();
  new Gauge({
    name: 'ibex_context_event_loop_delay_seconds',
    help: 'Main-thread event-loop delay since the previous scrape, by quantile',
    labelNames: ['quantile'],
    registers: [registry],
    collect() {
      const q = loop.take();
      this.set({ quantile: '0.5' }, q.p50);
      this.set({ quantile: '0.99' }, q.p99);
      this.set({ quantile: '1' }, q.max);
    },
  });
  new Gauge({
    name: 'ibex_context_pool_queue_depth',
    help: 'CPU tasks waiting in the worker pool queue',
    registers: [registry],
    collect() {
      this.set(pool?.()?.queueSize ?? 0);
    },
  });
  new Gauge({
    name: 'ibex_context_pool_utilization_ratio',
    help: 'Worker pool utilization (0..1) as piscina reports it',
    registers: [registry],
    collect() {
      this.set(pool?.()?.utilization ?? 0);
    },
  });
  new Gauge({
    name: 'ibex_context_store_read_queue_depth',
    help: 'Embedded-store searches waiting for a store-read thread',
    registers: [registry],
    collect() {
      this.set(storeReads?.()?.queueSize ?? 0);
    },
  });
  new Counter({
    name: 'ibex_context_store_read_busy_total',
    help: 'Embedded-store searches refused at once because the store-read queue was full',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(storeReads?.()?.busyRejections ?? 0);
    },
  });
  new Counter({
    name: 'ibex_context_memory_thread_reads_total',
    help: 'Memory-service reads run in the memory-fetch thread (orgs whose memory service answered large bodies)',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(memoryThread?.()?.threadReads ?? 0);
    },
  });
  new Gauge({
    name: 'ibex_context_memory_heavy_orgs',
    help: 'Orgs whose memory reads go to the memory-fetch thread now',
    registers: [registry],
    collect() {
      this.set(memoryThread?.()?.heavyOrgs ?? 0);
    },
  });
  new Gauge({
    name: 'ibex_context_pool_capacity',
    help: 'CPU tasks that can run at once (max worker threads)',
    registers: [registry],
    collect() {
      this.set(pool?.()?.capacity ?? 0);
    },
  });
  new Gauge({
    name: 'ibex_context_pool_queue_limit',
    help: 'CPU tasks that may wait in the queue before calls are answered pool_saturated',
    registers: [registry],
    collect() {
      this.set(pool?.()?.maxQueue ?? 0);
    },
  });
  new Counter({
    name: 'ibex_context_pool_tasks_total',
    help: 'CPU tasks by outcome, as the pool counts them: completed, withdrawn (deadline while queued), abandoned (deadline while running), rejected (queue full), failed, unfit (withdrawn at dispatch: no longer expected to finish in time)',
    labelNames: ['outcome'],
    registers: [registry],
    collect() {
      const s = pool?.();
      this.reset();
      if (!s) return;
      for (const outcome of ['completed', 'withdrawn', 'abandoned', 'rejected', 'failed', 'unfit'] as const)
        this.inc({ outcome }, s[outcome]);
    },
  });
  new Gauge({
    name: 'ibex_context_build_info',
    help: 'Always 1; the labels say which build is running',
    labelNames: ['version', 'node_version'],
    registers: [registry],
  }).set({ version: packageVersion(), node_version: process.versions.node }, 1);
  new Counter({
    name: 'ibex_context_message_buffers_total',
    help: 'Request messages and memory-service bodies of 1 MiB or more: read into a reused buffer (reused) or not (missed), and buffers taken back (released)',
    labelNames: ['event'],
    registers: [registry],
    collect() {
      this.reset();
      for (const event of ['reused', 'missed', 'released'] as const)
        this.inc({ event }, MESSAGE_BUFFERS.stats[event]);
    },
  });
  new Counter({
    name: 'ibex_context_upload_turn_waits_total',
    help: "Times a request message of 1 MiB or more was paused to wait for its connection's turn (another large upload was being read)",
    registers: [registry],
    collect() {
      this.reset();
      this.inc(transportCounters().uploadTurnWaits());
    },
  });
  new Counter({
    name: 'ibex_context_requests_decided_early_total',
    help: 'AssembleContext requests of 1 MiB or more answered from a prefix of their bytes (contract.md §11 counts on the wire); the rest was never read',
    registers: [registry],
    collect() {
      this.reset();
      this.inc(transportCounters().requestsDecidedEarly());
    },
  });
  new Gauge({
    name: 'ibex_context_message_buffers_retained_bytes',
    help: 'Bytes held in free request-message buffers (at most 64 MiB)',
    registers: [registry],
    collect() {
      this.set(MESSAGE_BUFFERS.retainedBytes);
    },
  });
  new Counter({
    name: 'ibex_context_postgres_events_total',
    help: 'PostgreSQL store: connections opened and closed, reads abandoned to the server statement_timeout, reads retried after a connection error, cancel requests sent, LISTEN connections opened',
    labelNames: ['event'],
    registers: [registry],
    collect() {
      this.reset();
      for (const event of Object.keys(PG_EVENTS) as (keyof PgEventCounts)[])
        this.inc({ event }, PG_EVENTS[event]);
    },
  });
  new Gauge({
    name: 'ibex_context_pool_threads',
    help: 'Worker threads alive',
    registers: [registry],
    collect() {
      this.set(pool?.()?.threads ?? 0);
    },
  });
  return {
    registry,
    assemblyDuration: new Histogram({
      name: 'ibex_context_assembly_duration_seconds',
      help: 'AssembleContext latency from arrival to status, every call, by degradation level and gRPC code',
      labelNames: ['level', 'code'],
      buckets: LATENCY_BUCKETS,
      registers: [registry],
    }),
    assemblies: new Counter({
      name: 'ibex_context_assemblies_total',
      help: 'AssembleContext calls by degradation level and gRPC status code name',
      labelNames: ['level', 'code'],
      registers: [registry],
    }),
    degraded: new Counter({
      name: 'ibex_context_degraded_total',
      help: 'Degraded assemblies by level and reason',
      labelNames: ['level', 'reason'],
      registers: [registry],
    }),
    branchDuration: new Histogram({
      name: 'ibex_context_branch_duration_seconds',
      help: 'Retrieval branch latency by branch and status',
      labelNames: ['branch', 'status'],
      buckets: LATENCY_BUCKETS,
      registers: [registry],
    }),
    branchOutcomes: new Counter({
      name: 'ibex_context_branch_outcomes_total',
      help: 'Retrieval branch outcomes by branch and status',
      labelNames: ['branch', 'status'],
      registers: [registry],
    }),
    droppedHits: new Counter({
      name: 'ibex_context_dropped_hits_total',
      help: 'Memory hits dropped at retrieval: invalid shape, another org/agent, oversize content, or past the requested limit',
      labelNames: ['reason'],
      registers: [registry],
    }),
    poolWait: new Histogram({
      name: 'ibex_context_pool_wait_seconds',
      help: 'CPU task wait in the worker pool queue',
      buckets: POOL_BUCKETS,
      registers: [registry],
    }),
    poolRun: new Histogram({
      name: 'ibex_context_pool_run_seconds',
      help: 'CPU task (pack + format) run time in a worker',
      buckets: POOL_BUCKETS,
      registers: [registry],
    }),
    packerPath: new Counter({
      name: 'ibex_context_packer_path_total',
      help: 'Packer runs by path (dp, greedy) and greedy reason',
      labelNames: ['path', 'reason'],
      registers: [registry],
    }),
    inFlight: new Gauge({
      name: 'ibex_context_in_flight_calls',
      help: 'AssembleContext calls being served',
      registers: [registry],
    }),
    refusedTooLate: new Counter({
      name: 'ibex_context_refused_too_late_total',
      help: 'AssembleContext calls with a history of 256 KiB or more answered DEADLINE_EXCEEDED without building an answer: at its measured cost, not even the degraded answer could be ready before the deadline',
      registers: [registry],
    }),
    lateAnswers: new Histogram({
      name: 'ibex_context_late_answer_seconds',
      help: 'AssembleContext answers sent after the deadline because the event loop ran late, by seconds past it: path="ready_after_deadline" (the assembled answer) or "deadline_answer" (directive and history, L2, built when the deadline timer fired); a caller whose own deadline passed has had DEADLINE_EXCEEDED from its client already',
      labelNames: ['path'] as const,
      buckets: [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1],
      registers: [registry],
    }),
    stop() {
      loop.stop();
    },
  };
}
