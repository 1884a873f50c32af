/** Branch failures (contract.md §4): they become outcomes, never gRPC statuses (hence not errors.ts). */

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

/** `detail` never has credentials. No stack: one is built per failed branch under load. */
export class BranchError extends Error {
  readonly code: BranchErrorCode;
  readonly status: 'error' | 'timeout';
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

export const BranchErrors = {
  httpStatus: (code: number) =>
    new BranchError('IBEX_RETRIEVAL_HTTP_STATUS', 'error', `memory service HTTP ${code}`),
  httpTimeout: (branch: 'hot' | 'cold', cause?: unknown) =>
    new BranchError('IBEX_RETRIEVAL_HTTP_TIMEOUT', 'timeout', `${branch}_http_timeout`, cause),
  /** `reason` is the transport's error code, never a header. */
  httpTransport: (reason: string, cause?: unknown) =>
    new BranchError(
      'IBEX_RETRIEVAL_HTTP_TRANSPORT',
      'error',
      `memory service unreachable (${reason})`,
      cause,
    ),
  tooLarge: () => new BranchError('IBEX_RETRIEVAL_TOO_LARGE', 'error', 'response too large'),
  decoderBusy: () => new BranchError('IBEX_RETRIEVAL_DECODER_BUSY', 'error', 'body decoder busy'),
  invalidJson: (cause?: unknown) =>
    new BranchError('IBEX_RETRIEVAL_INVALID_JSON', 'error', 'invalid JSON', cause),
  badShape: (where: string) => new BranchError('IBEX_RETRIEVAL_BAD_SHAPE', 'error', `bad shape: ${where}`),
  /** contract.md §4.2 envelope rules; `reason` names the rule. */
  badDirective: (reason: string, cause?: unknown) =>
    new BranchError('IBEX_RETRIEVAL_BAD_DIRECTIVE', 'error', `bad directive: ${reason}`, cause),
  unavailable: (what: string, reason: string, cause?: unknown) =>
    new BranchError('IBEX_RETRIEVAL_UNAVAILABLE', 'error', `${what} unavailable (${reason})`, cause),
  /** `reason` is the reply's code only (e.g. Redis `WRONGTYPE`). */
  storeReply: (what: string, reason: string, cause?: unknown) =>
    new BranchError('IBEX_RETRIEVAL_STORE_REPLY', 'error', `${what} error (${reason})`, cause),
} as const;

export function isBranchError(err: unknown): err is BranchError {
  return err instanceof BranchError;
}
