/**
 * The logger for a line written inside a call (contract.md §12: such lines carry `trace_id` and `span_id`).
 * A module of its own, with a type-only import, so that the server's modules load no OpenTelemetry code
 * while tracing is off.
 */
import type { Logger } from 'pino';
import type { CallTrace } from './call-trace.js';

/**
 * @returns `logger` itself when the call has no trace (tracing off), else a child (made once per call,
 *   on first use) whose lines carry the call's `trace_id` and `span_id`.
 */
export function callLogger(logger: Logger, trace: CallTrace | undefined): Logger {
  return trace ? trace.log(logger) : logger;
}
