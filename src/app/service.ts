/** Starts and stops the whole service (`ibex-context serve`, end-to-end tests on port 0). */
import type { ServerCredentials, ServerInterceptor } from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { CapabilityCatalog } from '../budget/catalog.js';
import type { Settings } from '../config/settings.js';
import { createGrpcServer, type GrpcServer } from '../grpc/grpc-server.js';
import { CpuPool } from '../pool/pool-client.js';
import { createAssembler } from '../request/assemble.js';
import type { AssembleFn } from '../request/assemble-fn.js';
import { encodeHistory } from '../request/wire-request.js';
import { InclusionCounter } from '../retrieval/inclusion-counter.js';
import type { MemorySource } from '../retrieval/ports.js';
import { createSources, type RetrievalSources } from '../retrieval/sources.js';
import { WARM_QUERY, warmContent, warmSearchHits } from '../retrieval/warm-memories.js';
import { type AdminServer, startAdminServer } from '../telemetry/admin-server.js';
import { assemblyMetricsInterceptor } from '../telemetry/assembly-metrics.js';
import { registerFeedbackMetrics } from '../telemetry/feedback-metrics.js';
import { createMetrics, type Metrics } from '../telemetry/metrics.js';
import type { TracingConfig } from '../telemetry/tracing/config.js';
import { warmBpe } from '../text/bpe.js';
import { serializeAssembleResponseBuffer } from '../wire/proto.js';
import { warmDependencies } from './dependency-warmup.js';
import { WARMED_CALLS, warmCall, warmOnTenants, watchNewTenants } from './tenant-warmup.js';

export interface RunningService {
  /** gRPC `host:port` actually bound. */
  grpcAddr: string;
  /** Admin base URL (`http://host:port`). */
  adminUrl: string;
  grpc: GrpcServer;
  pool: CpuPool;
  sources: RetrievalSources;
  metrics: Metrics;
  /** Graceful stop: NOT_SERVING, drain in-flight calls within `graceMs`, then close all. Idempotent. */
  stop(graceMs?: number): Promise<void>;
}

export interface StartOptions {
  logger: Logger;
  /** Server credentials (TLS); insecure when omitted. */
  credentials?: ServerCredentials;
  interceptors?: ServerInterceptor[];
  /** Warnings repeated on /readyz (e.g. insecure binding). */
  warnings?: string[];
  /** Tracing settings (`tracingConfigFromEnv()`); off when absent or null. */
  tracing?: TracingConfig | null;
}

const WARMUP_CALLS = 40;
// Over synthetic candidates, as many as a call without available_tokens gets.
const WARMUP_CANDIDATE_CALLS = 40;

/** A memory source answering synthetic memories for any tenant (hot read: the 20 newest). */
function warmMemorySource(): MemorySource {
  const now = Date.now();
  return {
    hot: (orgId, agentId) =>
      warmSearchHits(orgId, agentId, 20, now).map((h) => ({ ...(h as object), source: 'hot' })),
    search: (orgId, agentId, _query, _signal, limit) => warmSearchHits(orgId, agentId, limit ?? 10, now),
    close: async () => {},
  };
}

/** Runs the pipeline before SERVING, so the first real calls do not pay lazy compilation in their deadline. */
async function warmPipeline(
  settings: Settings,
  catalog: CapabilityCatalog,
  sources: RetrievalSources,
  pool: CpuPool,
  logger: Logger,
): Promise<void> {
  const assemble = createAssembler({
    settings,
    catalog,
    sources,
    pool,
    logger: logger.child({}, { level: 'silent' }),
  });
  const remote = sources.kind.memory === 'http';
  const models = catalog.modelIds();
  for (let i = 0; i < WARMUP_CALLS; i++) {
    await warmCall(assemble, {
      query: 'warm up the pipeline',
      model: models[i % models.length]!,
      availableTokens: 0,
      history: encodeHistory([
        { role: 'user', content: 'hello' },
        { role: 'assistant', content: 'hi' },
      ]),
      skipHot: remote,
      skipCold: remote,
    });
  }
  // Per-candidate code over hundreds of candidates: a tenant with no memories never runs it.
  const warm = createAssembler({
    settings,
    catalog,
    sources: { ...sources, memory: warmMemorySource() },
    pool,
    logger: logger.child({}, { level: 'silent' }),
  });
  for (let i = 0; i < WARMUP_CANDIDATE_CALLS; i++) {
    const answered = await warmCall(warm, {
      query: WARM_QUERY,
      model: models[i % models.length]!,
      availableTokens: i % 4 === 3 ? 2000 : 0,
      history: encodeHistory([
        { role: 'user', content: warmContent(2) },
        { role: 'assistant', content: 'That sounds like a lovely weekend with the family.' },
      ]),
      skipHot: false,
      skipCold: false,
    });
    if (answered) serializeAssembleResponseBuffer(answered.response);
  }
}

function hostOf(addr: string): string {
  return addr.slice(0, addr.lastIndexOf(':'));
}

/** Starts the service; resolves once SERVING. @throws the first start-up failure, after cleaning up. */
export async function startService(settings: Settings, opts: StartOptions): Promise<RunningService> {
  const logger = opts.logger;
  const catalog = CapabilityCatalog.load(settings.catalogFile, { exactTokens: settings.exactTokens });
  // Exact counts load their encodings before traffic, not inside the first call's deadline.
  if (settings.exactTokens) warmBpe();
  const closers: (() => Promise<void>)[] = [];
  const closeAll = async () => {
    for (const close of closers.reverse())
      await close().catch((err) => logger.error({ err }, 'close failed'));
  };
  try {
    const sources = await createSources(settings, { logger: logger.child({ component: 'retrieval' }) });
    closers.push(() => sources.close());
    let pool: CpuPool | undefined;
    const metrics = createMetrics(
      () => pool?.stats(),
      () => sources.storeReads?.(),
      () => sources.memoryThread?.(),
    );
    closers.push(async () => metrics.stop());
    pool = await CpuPool.start(settings.pool);
    const started = pool;
    closers.push(() => started.close());
    await warmDependencies(sources, logger);
    await warmPipeline(settings, catalog, sources, started, logger);
    // Loaded only when on: off, the process holds no OpenTelemetry SDK code.
    const tracing = opts.tracing
      ? (await import('../telemetry/tracing/tracing.js')).startTracing(opts.tracing, {
          registry: metrics.registry,
          stores: sources.kind,
          logger,
        })
      : undefined;
    // Closers run in reverse: closed after the gRPC drain, so the last calls' spans are flushed.
    if (tracing) closers.push(() => tracing.shutdown());
    // Likewise before the stores, so the last answers' inclusions are written.
    const inclusions = sources.feedback
      ? new InclusionCounter(sources.feedback, {
          ...settings.inclusions,
          onError: (err) =>
            logger.warn({ code: (err as { code?: unknown })?.code }, 'inclusion counts not written'),
        })
      : undefined;
    if (inclusions) closers.push(() => inclusions.close());
    const feedbackMetrics = registerFeedbackMetrics(
      metrics.registry,
      inclusions ? () => inclusions.stats() : undefined,
    );
    // The serving pipeline warms on stored agents first, quietly: no inclusion, metric or log line.
    let warming = true;
    const assemble = createAssembler({
      settings,
      catalog,
      sources,
      pool,
      logger,
      metrics,
      inclusions,
      quiet: () => warming,
    });
    const tenantWarmup = await warmOnTenants(
      assemble,
      sources,
      catalog.modelIds(),
      settings.timeoutMs,
      logger,
    );
    warming = false;
    logger.debug(tenantWarmup, 'pipeline warmed on stored agents');
    let served = 0;
    const counted: AssembleFn = Object.assign(
      (req: Parameters<AssembleFn>[0], ctx: Parameters<AssembleFn>[1]) => {
        served++;
        return assemble(req, ctx);
      },
      assemble.atDeadline ? { atDeadline: assemble.atDeadline } : {},
    );
    const grpc = createGrpcServer({
      assemble: counted,
      // A memory service has no feedback and its search is not scoped as §7a states: both stay UNIMPLEMENTED.
      ...(sources.feedback
        ? {
            memoryRpcs: {
              memory: sources.memory,
              feedback: sources.feedback,
              ranking: settings.ranking,
              maxMemoryChars: settings.maxMemoryChars,
              metrics: feedbackMetrics,
            },
          }
        : {}),
      logger,
      settings,
      onLateAnswer: (path, lateMs) => metrics.lateAnswers.observe({ path }, lateMs / 1000),
      // Tracing before authentication, so that refused calls get their span.
      interceptors: [
        assemblyMetricsInterceptor(metrics),
        ...(tracing ? [tracing.interceptor] : []),
        ...(opts.interceptors ?? []),
      ],
      traces: tracing,
    });
    const port = await grpc.bind(settings.grpcAddr, opts.credentials);
    closers.push(() => grpc.drain(0));
    const grpcAddr = `${hostOf(settings.grpcAddr)}:${port}`;
    let ready = false;
    let draining = false;
    const admin: AdminServer = await startAdminServer(settings.adminAddr, metrics.registry, () => ({
      ready,
      draining,
      warnings: opts.warnings ?? [],
      stores: sources.kind,
    }));
    closers.push(() => admin.close());
    // Started on an empty or nearly empty store: warm on the agents an import adds while serving.
    const rowStamp = sources.rowStamp;
    if (rowStamp && tenantWarmup.calls < WARMED_CALLS) {
      const watching = watchNewTenants({
        // Its own quiet assembler: a real call in flight beside it keeps its metrics and counts.
        assemble: createAssembler({
          settings,
          catalog,
          sources,
          pool,
          logger: logger.child({}, { level: 'silent' }),
          quiet: () => true,
        }),
        sources,
        rowStamp,
        servedCalls: () => served,
        models: catalog.modelIds(),
        deadlineMs: settings.timeoutMs,
        logger,
      });
      closers.push(() => watching.stop());
    }
    grpc.markServing();
    ready = true;
    logger.info(
      {
        grpc: grpcAddr,
        admin: admin.url,
        memory: sources.kind.memory,
        directive: sources.kind.directive,
        tracing: opts.tracing ? { url: opts.tracing.url, sampler: opts.tracing.sampler } : 'off',
        pool: {
          minThreads: settings.pool.minThreads,
          maxThreads: settings.pool.maxThreads,
          maxQueue: settings.pool.maxQueue,
        },
      },
      'ibex-context serving',
    );
    let stopping: Promise<void> | undefined;
    return {
      grpcAddr,
      adminUrl: admin.url,
      grpc,
      pool: started,
      sources,
      metrics,
      stop(graceMs = settings.shutdownGraceMs) {
        stopping ??= (async () => {
          draining = true;
          logger.info({ graceMs, inFlight: grpc.inFlight() }, 'shutting down');
          // drain() is idempotent: the closer registered at bind time returns this same drain.
          await grpc.drain(graceMs);
          await closeAll();
          logger.info('ibex-context stopped');
        })();
        return stopping;
      },
    };
  } catch (err) {
    await closeAll();
    throw err;
  }
}
