/**
 * The service's pino logger (SPEC §12): JSON lines, ISO timestamps, level as a label, and secrets
 * redacted by path so a careless `logger.info({ settings })` or `{ metadata }` cannot leak a token.
 */
import { type DestinationStream, type Logger, pino } from 'pino';
import type { Settings } from '../config/settings.js';

export type { Logger } from 'pino';

/**
 * Paths censored in every log line. pino's `*` matches exactly one level, so the common nestings
 * (top level, one object down, headers/metadata objects) are listed explicitly.
 */
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
 * Creates the root logger; derive per-component loggers with `logger.child({ component })`.
 * @param settings only `logLevel` is read (`fatal`…`trace`, or `silent`).
 * @param destination where lines go; stdout when omitted (tests pass a capturing stream).
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
