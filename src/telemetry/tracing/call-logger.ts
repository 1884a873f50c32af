// Per-call log lines carry `trace_id` and `span_id` (contract.md §12). A module of its own with a type-only
// import, so the server loads no OpenTelemetry code while tracing is off.
import type { Logger } from 'pino';
import type { CallTrace } from './call-trace.js';

/** `logger` itself without a trace, else the call's child carrying `trace_id` and `span_id` (made once). */
export function callLogger(logger: Logger, trace: CallTrace | undefined): Logger {
  return trace ? trace.log(logger) : logger;
}
