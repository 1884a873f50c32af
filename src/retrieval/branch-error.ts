/**
 * Failures of one retrieval branch (contract.md §4). They never leave {@link retrieve}: each becomes a
 * `BranchOutcome` (`error` or `timeout` plus a short detail), because dependency failures degrade the
 * answer and never produce a gRPC status (contract.md §11). That is why they live here and not in the
 * service-wide `errors.ts` table, whose codes all map to gRPC statuses.
 */

/** Stable codes; callers branch on `code`, the `detail` is the outcome's text. */
export type BranchErrorCode =
  | 'IBEX_RETRIEVAL_HTTP_STATUS'
  | 'IBEX_RETRIEVAL_HTTP_TIMEOUT'
  | 'IBEX_RETRIEVAL_HTTP_TRANSPORT'
  | 'IBEX_RETRIEVAL_TOO_LARGE'
  | 'IBEX_RETRIEVAL_INVALID_JSON'
  | 'IBEX_RETRIEVAL_BAD_SHAPE'
  | 'IBEX_RETRIEVAL_BAD_DIRECTIVE'
  | 'IBEX_RETRIEVAL_UNAVAILABLE'
  | 'IBEX_RETRIEVAL_STORE_REPLY'
  | 'IBEX_RETRIEVAL_DECODER_BUSY';

/**
 * One branch failure; `detail` never contains credentials. Built without a stack trace (as
 * util/stackless.ts does): it never leaves `retrieve`, where it becomes an outcome's detail, and under load
 * one is built per failed branch of nearly every call, wherever it is constructed.
 */
export class BranchError extends Error {
  readonly code: BranchErrorCode;
  /** Outcome status this failure maps to. */
  readonly status: 'error' | 'timeout';
  /** Outcome detail, e.g. `memory service HTTP 503`. */
  readonly detail: string;
  constructor(code: BranchErrorCode, status: 'error' | 'timeout', detail: string, cause?: unknown) {
    // Error's constructor reads the limit when it captures the stack; it cannot throw here.
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    super(detail, cause === undefined ? undefined : { cause });
    Error.stackTraceLimit = limit;
    this.name = 'BranchError';
    this.code = code;
    this.status = status;
    this.detail = detail;
  }
}

/** Factories: the only way branch failures are built, so details stay the contract's strings. */
export const BranchErrors = {
  /** contract.md §4.1: status ≥ 400. */
  httpStatus: (code: number) =>
    new BranchError('IBEX_RETRIEVAL_HTTP_STATUS', 'error', `memory service HTTP ${code}`),
  /** contract.md §4: the HTTP client's own timeout (connect / headers / body). */
  httpTimeout: (branch: 'hot' | 'cold', cause?: unknown) =>
    new BranchError('IBEX_RETRIEVAL_HTTP_TIMEOUT', 'timeout', `${branch}_http_timeout`, cause),
  /** Connection refused, reset, … `reason` is the transport's error code, never a header. */
  httpTransport: (reason: string, cause?: unknown) =>
    new BranchError(
      'IBEX_RETRIEVAL_HTTP_TRANSPORT',
      'error',
      `memory service unreachable (${reason})`,
      cause,
    ),
  /** contract.md §4.1: a body beyond the cap derived from `limit` and `IBEX_CONTEXT_MAX_MEMORY_CHARS`. */
  tooLarge: () => new BranchError('IBEX_RETRIEVAL_TOO_LARGE', 'error', 'response too large'),
  /** Too many large bodies already wait for the body-decoder thread. */
  decoderBusy: () => new BranchError('IBEX_RETRIEVAL_DECODER_BUSY', 'error', 'body decoder busy'),
  invalidJson: (cause?: unknown) =>
    new BranchError('IBEX_RETRIEVAL_INVALID_JSON', 'error', 'invalid JSON', cause),
  badShape: (where: string) => new BranchError('IBEX_RETRIEVAL_BAD_SHAPE', 'error', `bad shape: ${where}`),
  /** contract.md §4.2 envelope rules; `reason` names the rule (`not UTF-8`, `v must be 1`, …). */
  badDirective: (reason: string, cause?: unknown) =>
    new BranchError('IBEX_RETRIEVAL_BAD_DIRECTIVE', 'error', `bad directive: ${reason}`, cause),
  /** A store that cannot answer (Redis offline, SQLite error). */
  unavailable: (what: string, reason: string, cause?: unknown) =>
    new BranchError('IBEX_RETRIEVAL_UNAVAILABLE', 'error', `${what} unavailable (${reason})`, cause),
  /** A store that answered with an error (e.g. Redis `WRONGTYPE`); `reason` is the reply's code only. */
  storeReply: (what: string, reason: string, cause?: unknown) =>
    new BranchError('IBEX_RETRIEVAL_STORE_REPLY', 'error', `${what} error (${reason})`, cause),
} as const;

/** True for a {@link BranchError}. */
export function isBranchError(err: unknown): err is BranchError {
  return err instanceof BranchError;
}
