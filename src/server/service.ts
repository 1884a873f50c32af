/**
 * Starts and stops the whole service: settings → catalog → retrieval sources → worker pool (warmed) →
 * gRPC server → admin endpoint → health SERVING. Used by `ibex-context serve` and by end-to-end tests,
 * which start it in-process on port 0.
 */
import type { ServerCredentials, ServerInterceptor } from '@grpc/grpc-js';
import type { Logger } from 'pino';
import { CapabilityCatalog } from '../budget/catalog.js';
import type { Settings } from '../config/settings.js';
import { CpuPool } from '../pool/pool-client.js';
import { createSources, type RetrievalSources } from '../retrieval/sources.js';
import { type AdminServer, startAdminServer } from '../telemetry/admin-server.js';
import { createMetrics, type Metrics } from '../telemetry/metrics.js';
import { createAssembler } from './assemble.js';
import { createGrpcServer, type GrpcServer } from './grpc-server.js';

/** A running service. */
export interface RunningService {
  /** gRPC `host:port` actually bound. */
  grpcAddr: string;
  /** Admin base URL (`http://host:port`). */
  adminUrl: string;
  grpc: GrpcServer;
  pool: CpuPool;
  sources: RetrievalSources;
  metrics: Metrics;
  /**
   * Graceful stop (SPEC §10, issue: SIGTERM): health NOT_SERVING, stop accepting, let in-flight calls
   * finish within `graceMs` (default settings.shutdownGraceMs), then close the pool, sources and admin.
   * Idempotent.
   */
  stop(graceMs?: number): Promise<void>;
}

/** Extra wiring for {@link startService}. */
export interface StartOptions {
  logger: Logger;
  /** Server credentials (TLS); insecure when omitted. */
  credentials?: ServerCredentials;
  interceptors?: ServerInterceptor[];
  /** Warnings repeated on /readyz (e.g. insecure binding). */
  warnings?: string[];
}

function hostOf(addr: string): string {
  return addr.slice(0, addr.lastIndexOf(':'));
}

/**
 * Starts the service and resolves once it is SERVING (pool warm).
 * @throws the first start-up failure (bad catalog file, port in use, …) after closing what was opened.
 */
export async function startService(settings: Settings, opts: StartOptions): Promise<RunningService> {
  const logger = opts.logger;
  const catalog = CapabilityCatalog.load(settings.catalogFile);
  const closers: (() => Promise<void>)[] = [];
  const closeAll = async () => {
    for (const close of closers.reverse())
      await close().catch((err) => logger.error({ err }, 'close failed'));
  };
  try {
    const sources = await createSources(settings, { logger: logger.child({ component: 'retrieval' }) });
    closers.push(() => sources.close());
    let pool: CpuPool | undefined;
    const metrics = createMetrics(() => pool?.stats());
    closers.push(async () => metrics.stop());
    pool = await CpuPool.start(settings.pool);
    const started = pool;
    closers.push(() => started.close());
    const grpc = createGrpcServer({
      assemble: createAssembler({ settings, catalog, sources, pool, logger, metrics }),
      logger,
      settings,
      interceptors: opts.interceptors,
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
    }));
    closers.push(() => admin.close());
    grpc.markServing();
    ready = true;
    logger.info(
      {
        grpc: grpcAddr,
        admin: admin.url,
        memory: sources.kind.memory,
        directive: sources.kind.directive,
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
