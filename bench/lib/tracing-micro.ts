/**
 * The tracing work of one call on the main thread, timed in-process with tinybench: what the pipeline's
 * hooks and the call's end cost at 1 % and 100 % sampling, with the SDK's batch processor and a sink
 * exporter that drops each batch (the protobuf encoding and the HTTP send are the exporter's, off the
 * call's path: see the load rounds). A shared machine moves a load bench's CPU per call by ±10 % between
 * rounds; this figure is the tracing code alone, µs per call.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { Metadata } from '@grpc/grpc-js';
import { ExportResultCode } from '@opentelemetry/core';
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace-base';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { Bench } from 'tinybench';
import type { CpuStageResult } from '../../src/pool/pool-client.js';
import { tracingConfigFromEnv } from '../../src/telemetry/tracing/config.js';
import { startTracing, type Tracing } from '../../src/telemetry/tracing/tracing.js';
import { monotonicNow } from '../../src/util/clock.js';
import type { BranchOutcome } from '../../src/wire/types.js';

/** One mode's figure. */
export interface TracingMicroRow {
  mode: string;
  /** Mean and p99 of one call's tracing work, µs. */
  mean_us: number;
  p99_us: number;
  samples: number;
  /** Spans handed to the exporter per call (12 at 100 %, ~0.12 at 1 %). */
  spans_per_call: number;
}

function modeTracing(sampler: string, arg: string, spans: { n: number }): Tracing {
  const cfg = tracingConfigFromEnv({
    OTEL_TRACES_EXPORTER: 'otlp',
    OTEL_TRACES_SAMPLER: sampler,
    OTEL_TRACES_SAMPLER_ARG: arg,
  })!;
  const exporter: SpanExporter = {
    export(batch: ReadableSpan[], done) {
      spans.n += batch.length;
      done({ code: ExportResultCode.SUCCESS });
    },
    shutdown: async () => {},
  };
  return startTracing(
    { ...cfg, scheduleDelayMs: 50 },
    {
      registry: new Registry(),
      stores: { directive: 'embedded', memory: 'embedded' },
      logger: pino({ level: 'silent' }),
      exporter,
    },
  );
}

/** A CPU-stage result as the pool returns it, with the fields a trace reads. */
function stageResult(): CpuStageResult {
  const started = monotonicNow() - 0.4;
  return {
    wait_us: 120,
    run_us: 300,
    round_trip_us: 520,
    output: {
      budget: { usable_budget: 6000 },
      pack: { path: 'dp', greedy_reason: null, candidates_evaluated: 30 },
      excluded: new Int32Array(12),
      memories_included: 18,
      budget_us: 40,
      pack_us: 150,
      format_us: 90,
      run_us: 300,
      started_at: started,
    },
  } as unknown as CpuStageResult;
}

const BRANCHES: BranchOutcome[] = [
  { name: 'directive', status: 'success', latency_ms: 0.3, detail: '' },
  { name: 'hot', status: 'success', latency_ms: 0.8, detail: '' },
  { name: 'cold', status: 'success', latency_ms: 2.1, detail: '' },
];

const REQUEST = { trace_id: '', span_id: '', org_id: 'o', agent_id: 'a' };
const ANSWER = {
  degradation: { level: 'L0', intentional: false, reasons: [] },
  memories_included: 18,
  tokens_used: 5400,
};

/**
 * Times one call's tracing work (interceptor-side and pipeline hooks, end and span building) per mode.
 * @param timeMs tinybench time per mode, ms.
 */
export async function tracingMicroFigures(timeMs: number): Promise<TracingMicroRow[]> {
  const modes = [
    { mode: 'sampled 1 %', sampler: 'parentbased_traceidratio', arg: '0.01' },
    { mode: 'sampled 100 %', sampler: 'parentbased_always_on', arg: '1' },
  ];
  const bench = new Bench({ time: timeMs, warmupTime: 300, retainSamples: false });
  const counts = modes.map(() => ({ n: 0, calls: 0 }));
  const tracings = modes.map((m, k) => modeTracing(m.sampler, m.arg, counts[k]!));
  const stage = stageResult();
  for (const [k, m] of modes.entries()) {
    const tracing = tracings[k]!;
    const count = counts[k]!;
    bench.add(m.mode, () => {
      count.calls++;
      const t = tracing.newCall(monotonicNow());
      t.received(new Metadata());
      t.requested(REQUEST);
      const now = monotonicNow();
      t.handled(now - 2.5);
      t.retrieved(now - 2.2, now - 0.1, BRANCHES);
      t.assembled(0.1, stage, null, 30, 0);
      t.responded(ANSWER);
      t.end(0);
    });
  }
  await bench.run();
  for (const t of tracings) await t.forceFlush();
  const rows = modes.map((m, k) => {
    const r = bench.tasks[k]!.result as { latency?: { mean: number; p99: number; samplesCount: number } };
    const lat = r.latency!;
    return {
      mode: m.mode,
      mean_us: Math.round(lat.mean * 1000 * 100) / 100,
      p99_us: Math.round(lat.p99 * 1000 * 100) / 100,
      samples: lat.samplesCount,
      spans_per_call: Math.round((100 * counts[k]!.n) / Math.max(1, counts[k]!.calls)) / 100,
    };
  });
  for (const t of tracings) await t.shutdown();
  return rows;
}

/** One async step of a simulated call. */
async function step(i: number): Promise<number> {
  await null;
  return i + 1;
}

/** A call's async shape: 40 awaits and one macrotask hop. */
async function asyncCall(): Promise<number> {
  let x = 0;
  for (let i = 0; i < 40; i++) x = await step(x);
  await new Promise((resolve) => setImmediate(resolve));
  return x;
}

/**
 * What a context manager costs that the hand-built tree does not pay: the same async call (40 awaits)
 * plain and inside `AsyncLocalStorage.run` — on Node 20 the store is carried by async hooks on every
 * promise, which is how `@opentelemetry/context-async-hooks` (needed by the grpc-js instrumentation to
 * link child spans) keeps the active span. Measured last: the hooks stay on until the store is disabled.
 * @returns mean µs per call, plain and inside the store.
 */
export async function contextManagerFigures(
  timeMs: number,
): Promise<{ plain_us: number; in_store_us: number }> {
  const store = new AsyncLocalStorage<{ span: number }>();
  const bench = new Bench({ time: timeMs, warmupTime: 300, retainSamples: false });
  bench.add('plain', async () => {
    await asyncCall();
  });
  bench.add('in AsyncLocalStorage.run', async () => {
    await store.run({ span: 1 }, asyncCall);
  });
  await bench.run();
  store.disable();
  const mean = (k: number) =>
    Math.round((bench.tasks[k]!.result as { latency: { mean: number } }).latency.mean * 1000 * 100) / 100;
  return { plain_us: mean(0), in_store_us: mean(1) };
}
