// `ibex-context serve` (`npm start`): the gRPC service; SIGTERM/SIGINT drain gracefully and exit 0.
import os from 'node:os';
import { format } from 'node:util';
import { setLogger } from '@grpc/grpc-js';
import { startService } from '../../../app/service.js';
import { type AuthSetup, setupAuth } from '../../../auth/setup-auth.js';
import { missingServiceNodeFlags } from '../../../config/node-flags.js';
import { loadSettings } from '../../../config/settings.js';
import { createLogger } from '../../../telemetry/logger.js';
import { type TracingConfig, tracingConfigFromEnv } from '../../../telemetry/tracing/config.js';
import { describeStartupError } from '../startup-error.js';

/** Runs until a signal; returns the exit code (0 after a clean drain, 1 on a start-up failure). */
export async function run(argv: string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    const { serveUsage } = await import('./serve-help.js');
    console.log(serveUsage());
    return 0;
  }
  if (argv.length > 0) {
    console.error(`ibex-context serve: unknown argument ${argv[0]} (serve takes no flags; see --help)`);
    return 2;
  }
  let settings: ReturnType<typeof loadSettings>;
  let tracing: TracingConfig | null;
  try {
    settings = loadSettings();
    tracing = tracingConfigFromEnv();
  } catch (err) {
    console.error(`ibex-context: invalid configuration: ${(err as Error).message}`);
    return 1;
  }
  const logger = createLogger(settings);
  const cores = os.availableParallelism();
  if (settings.pool.maxThreads > cores) {
    // Allowed (a pod may be given more cores later) but worth a word: extra threads only add switches.
    logger.warn(
      { pool_max_threads: settings.pool.maxThreads, cores },
      'IBEX_CONTEXT_POOL_MAX_THREADS exceeds the cores available; threads beyond the cores add context switches, not throughput',
    );
  }
  const missing = missingServiceNodeFlags();
  if (missing.length > 0) {
    // Allowed (the service works) but the event loop pays for it under large uploads.
    logger.warn(
      { missing_node_flags: missing },
      'node was started without the flags npm start and the Dockerfile give it; expect frequent main-thread mark-compacts under large requests and a longer latency tail under load (docs/design/main-thread.md, "Node flags")',
    );
  }
  // Before anything heavy starts: a bad TLS/token file or an unauthenticated public address exits 1 here.
  let auth: AuthSetup;
  try {
    auth = setupAuth(settings, logger);
  } catch (err) {
    console.error(`ibex-context: ${(err as Error).message}`);
    return 1;
  }
  // grpc-js's own errors go through the logger, to keep the log JSON and the start-up line alone.
  setLogger({
    error: (...args: unknown[]) => logger.warn({ component: 'grpc-js' }, format(...args)),
    info: (...args: unknown[]) => logger.debug({ component: 'grpc-js' }, format(...args)),
    debug: (...args: unknown[]) => logger.debug({ component: 'grpc-js' }, format(...args)),
  });
  let service: Awaited<ReturnType<typeof startService>>;
  try {
    service = await startService(settings, {
      logger,
      credentials: auth.credentials,
      interceptors: auth.interceptors,
      warnings: auth.warnings,
      tracing,
    });
  } catch (err) {
    // One line on stderr naming the setting and the cause; the stack only at debug level.
    logger.debug({ err }, 'start-up failed');
    console.error(`ibex-context: cannot start: ${describeStartupError(err, settings)}`);
    return 1;
  }
  return new Promise<number>((resolve) => {
    let stopping = false;
    // Handlers stay until the drain ends: `npm start` delivers Ctrl-C's SIGINT twice, and a signal with no
    // handler left would kill the process mid-drain. The drain is bounded by itself.
    const onSignal = (signal: NodeJS.Signals) => {
      if (stopping) {
        logger.info({ signal }, 'signal received while draining; still draining');
        return;
      }
      stopping = true;
      logger.info({ signal }, 'signal received');
      const done = (code: number) => {
        process.off('SIGTERM', onSignal);
        process.off('SIGINT', onSignal);
        resolve(code);
      };
      service.stop().then(
        () => done(0),
        (err: unknown) => {
          logger.error({ err }, 'shutdown failed');
          done(1);
        },
      );
    };
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
  });
}
