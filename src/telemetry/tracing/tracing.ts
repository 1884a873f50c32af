// OpenTelemetry tracing of AssembleContext (contract.md §12), exported over OTLP in batches off the hot path;
// off, none of it is created. Propagation is by hand, not instrumentation-grpc: why in docs/tracing.md.
import { type Metadata, ServerInterceptingCall, type ServerInterceptor, status } from '@grpc/grpc-js';
import { ROOT_CONTEXT, SpanKind, TraceFlags } from '@opentelemetry/api';
import { type ExportResult, ExportResultCode } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import {
  defaultResource,
  detectResources,
  envDetector,
  resourceFromAttributes,
} from '@opentelemetry/resources';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BasicTracerProvider,
  BatchSpanProcessor,
  ParentBasedSampler,
  type ReadableSpan,
  type Sampler,
  SamplingDecision,
  type SpanExporter,
  type SpanProcessor,
  TraceIdRatioBasedSampler,
} from '@opentelemetry/sdk-trace-base';
import { ATTR_SERVICE_NAME } from '@opentelemetry/semantic-conventions';
import type { Logger } from 'pino';
import { Counter, type Registry } from 'prom-client';
import { monotonicNow } from '../../util/clock.js';
import { CallTrace, SERVER_SPAN_NAME, type TraceCore } from './call-trace.js';
import type { SamplerConfig, TracingConfig } from './config.js';

export { callLogger } from './call-logger.js';
export { CallTrace } from './call-trace.js';
export { type TracingConfig, tracingConfigFromEnv } from './config.js';

/** Longest wait for the last export at shutdown, ms. */
const SHUTDOWN_FLUSH_MS = 2000;

const ASSEMBLE_PATH = '/ibex.context.v1.ContextAssemblyService/AssembleContext';

/** Finds the trace of a call from its request metadata (the handler's `call.metadata`). */
export interface CallTraces {
  of(metadata: Metadata): CallTrace | undefined;
}

export interface Tracing extends CallTraces {
  /** Starts each AssembleContext call's trace; place it before authentication so refusals get spans. */
  interceptor: ServerInterceptor;
  /** A call's trace, as the interceptor starts it (`arrival` on the monotonicNow clock); for benches. */
  newCall(arrival: number): CallTrace;
  /** Exports what is queued (tests, shutdown). */
  forceFlush(): Promise<void>;
  /** Flushes, then stops exporting. Idempotent. */
  shutdown(): Promise<void>;
}

/** What {@link startTracing} needs besides the settings. */
export interface TracingDeps {
  /** Where `ibex_context_trace_spans_dropped_total` / `_exported_total` are registered. */
  registry: Registry;
  /** Store kinds for the branch spans' `ibex.store`. */
  stores: { directive: string; memory: string };
  logger: Logger;
  /** Replaces the OTLP exporter (benches that measure the SDK without a collector). */
  exporter?: SpanExporter;
}

function rootSampler(cfg: SamplerConfig): Sampler {
  if (cfg.name.endsWith('always_off')) return new AlwaysOffSampler();
  if (cfg.name.endsWith('traceidratio')) return new TraceIdRatioBasedSampler(cfg.ratio);
  return new AlwaysOnSampler();
}

function sampler(cfg: SamplerConfig): Sampler {
  const root = rootSampler(cfg);
  return cfg.name.startsWith('parentbased_') ? new ParentBasedSampler({ root }) : root;
}

// Counts what the SDK's batch processor would drop silently (it reports drops only via an experimental
// meter option); the count waiting mirrors its queue, so the bound is the same.
class CountingBatchProcessor implements SpanProcessor {
  private waiting = 0;
  private readonly batch: BatchSpanProcessor;
  private failing = false;

  constructor(
    exporter: SpanExporter,
    private readonly cfg: TracingConfig,
    private readonly dropped: Counter<'reason'>,
    exported: Counter,
    logger: Logger,
  ) {
    const counted: SpanExporter = {
      export: (spans: ReadableSpan[], done: (r: ExportResult) => void) => {
        this.waiting = Math.max(0, this.waiting - spans.length);
        exporter.export(spans, (result) => {
          if (result.code === ExportResultCode.SUCCESS) {
            exported.inc(spans.length);
            if (this.failing) logger.info({ url: cfg.url }, 'trace export recovered');
            this.failing = false;
          } else {
            dropped.inc({ reason: 'export_failed' }, spans.length);
            // One line per outage, not per batch: the counter has the volume.
            if (!this.failing)
              logger.warn(
                { url: cfg.url, err: result.error?.message },
                'trace export failing; spans dropped',
              );
            this.failing = true;
          }
          done(result);
        });
      },
      shutdown: () => exporter.shutdown(),
      forceFlush: () => exporter.forceFlush?.() ?? Promise.resolve(),
    };
    this.batch = new BatchSpanProcessor(counted, {
      maxQueueSize: cfg.maxQueueSize,
      maxExportBatchSize: cfg.maxExportBatchSize,
      scheduledDelayMillis: cfg.scheduleDelayMs,
      exportTimeoutMillis: cfg.exportTimeoutMs,
    });
  }

  onStart(): void {}

  onEnd(span: ReadableSpan): void {
    if ((span.spanContext().traceFlags & TraceFlags.SAMPLED) === 0) return;
    if (this.waiting >= this.cfg.maxQueueSize) {
      this.dropped.inc({ reason: 'queue_full' });
      return;
    }
    this.waiting++;
    this.batch.onEnd(span);
  }

  forceFlush(): Promise<void> {
    return this.batch.forceFlush();
  }

  shutdown(): Promise<void> {
    return this.batch.shutdown();
  }
}

function counter<L extends string>(
  registry: Registry,
  name: string,
  help: string,
  labelNames: L[],
): Counter<L> {
  const existing = registry.getSingleMetric(name);
  if (existing) return existing as Counter<L>;
  return new Counter({ name, help, labelNames, registers: [registry] });
}

/**
 * Starts tracing: provider, OTLP exporter (or `deps.exporter`) behind a bounded counting batch processor,
 * and the interceptor. Counts `ibex_context_trace_spans_dropped_total{reason}` and `…_exported_total`.
 */
export function startTracing(cfg: TracingConfig, deps: TracingDeps): Tracing {
  const dropped = counter(
    deps.registry,
    'ibex_context_trace_spans_dropped_total',
    'Spans not exported: queue_full (the export queue was full), export_failed (the collector refused or was unreachable).',
    ['reason'],
  );
  const exported = counter(
    deps.registry,
    'ibex_context_trace_spans_exported_total',
    'Spans accepted by the collector.',
    [],
  );
  const exporter =
    deps.exporter ?? new OTLPTraceExporter({ url: cfg.url, timeoutMillis: cfg.exportTimeoutMs });
  const processor = new CountingBatchProcessor(
    exporter,
    cfg,
    dropped,
    exported,
    deps.logger.child({ component: 'tracing' }),
  );
  const resource = defaultResource()
    .merge(resourceFromAttributes({ [ATTR_SERVICE_NAME]: cfg.serviceName }))
    .merge(detectResources({ detectors: [envDetector] }));
  const provider = new BasicTracerProvider({
    resource,
    sampler: sampler(cfg.sampler),
    spanProcessors: [processor],
  });
  const root = rootSampler(cfg.sampler);
  const core: TraceCore = {
    tracer: provider.getTracer('ibex-context'),
    sampleFieldParent: (traceId) =>
      root.shouldSample(ROOT_CONTEXT, traceId, SERVER_SPAN_NAME, SpanKind.SERVER, {}, []).decision ===
      SamplingDecision.RECORD_AND_SAMPLED,
    tenantIds: cfg.tenantIds,
    stores: deps.stores,
  };
  const byMetadata = new WeakMap<Metadata, CallTrace>();

  const interceptor: ServerInterceptor = (method, call) => {
    if (method.path !== ASSEMBLE_PATH) return new ServerInterceptingCall(call);
    const t = new CallTrace(core, monotonicNow());
    return new ServerInterceptingCall(call, {
      start: (next) => {
        next({
          onReceiveMetadata: (md, nextMd) => {
            t.received(md);
            byMetadata.set(md, t);
            nextMd(md);
          },
          onReceiveMessage: (msg, nextMsg) => {
            t.requested(msg);
            nextMsg(msg);
          },
          onCancel: () => t.end(status.CANCELLED),
        });
      },
      sendMetadata: (md, next) => {
        t.writing();
        next(md);
      },
      sendMessage: (msg, next) => {
        t.responded(msg);
        next(msg);
      },
      sendStatus: (st, next) => {
        next(st);
        t.end(st.code);
      },
    });
  };

  let stopping: Promise<void> | undefined;
  return {
    interceptor,
    newCall: (arrival) => new CallTrace(core, arrival),
    of: (metadata) => byMetadata.get(metadata),
    forceFlush: () => provider.forceFlush(),
    shutdown() {
      // A collector that is down must not hold a draining process: what is not out by then is dropped.
      stopping ??= Promise.race([
        provider.shutdown(),
        new Promise<void>((resolve) => setTimeout(resolve, SHUTDOWN_FLUSH_MS).unref()),
      ]);
      return stopping;
    },
  };
}
