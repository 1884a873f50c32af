// pino logger (contract.md §12): JSON lines, secrets redacted by path so `{ settings }` cannot leak a token.
import { type DestinationStream, type Logger, pino } from 'pino';
import type { Settings } from '../config/settings.js';
import type { BranchOutcome } from '../wire/types.js';

export type { Logger } from 'pino';

// pino's `*` matches exactly one level, so the common nestings are listed explicitly.
export const REDACT_PATHS: readonly string[] = [
  'authorization',
  'Authorization',
  '*.authorization',
  '*.Authorization',
  'headers.authorization',
  'headers.Authorization',
  '*.headers.authorization',
  '*.headers.Authorization',
  'metadata.authorization',
  '*.metadata.authorization',
  'token',
  '*.token',
  'apiToken',
  '*.apiToken',
  'memoryApiToken',
  '*.memoryApiToken',
  'settings.memoryApiToken',
  'password',
  '*.password',
  'principal.tokenId',
  '*.principal.tokenId',
  'principal_context.token_id',
  '*.principal_context.token_id',
  'tlsKey',
  '*.tlsKey',
  '*.auth.tlsKey',
];

/**
 * Root logger at `settings.logLevel`, to `destination` (default stdout); use `logger.child({ component })`.
 */
export function createLogger(settings: Pick<Settings, 'logLevel'>, destination?: DestinationStream): Logger {
  return pino(
    {
      level: settings.logLevel,
      base: { service: 'ibex-context', pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      redact: { paths: [...REDACT_PATHS], censor: '[redacted]' },
    },
    destination,
  );
}

/**
 * The degraded-assembly line (contract.md §12), a closed shape: `degradation_level`, as `level` is pino's.
 */
export interface DegradedAssemblyLine {
  /** Degradation level, `L1` or `L2` (contract.md §10). */
  degradation_level: string;
  /** Degradation reasons, e.g. `cold_error:…`, `pool_deadline`. */
  reasons: readonly string[];
  /** The three branch outcomes (latency in ms). */
  branches: readonly BranchOutcome[];
  intentional: boolean;
  request_id: string | undefined;
  /** The call's trace and server span ids, when tracing is on. */
  trace_id?: string;
  span_id?: string;
}

/**
 * Writes {@link DegradedAssemblyLine}s at info level through a child of `parent` that skips redaction: the
 * closed type has no room for a token. Why: see docs/operations.md (Logs).
 */
export function degradedAssemblyLog(parent: Logger): (line: DegradedAssemblyLine) => void {
  const child = parent.child({}, { redact: { paths: [] } });
  return (line) => child.info(line, 'degraded assembly');
}
