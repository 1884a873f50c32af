/**
 * One place for every error the service raises (the fastify / undici pattern): a base class with a
 * stable `code`, small factories, and one table mapping codes to gRPC status codes.
 * Callers branch on `code`, never on message text.
 */
import { status } from '@grpc/grpc-js';
import { stackless } from '../util/stackless.js';

/** Stable error codes, grouped by area. */
export type IbexErrorCode =
  | 'IBEX_ERR_INVALID_ARGUMENT'
  | 'IBEX_ERR_UNKNOWN_MODEL'
  | 'IBEX_ERR_ESTIMATE_KIND_MISMATCH'
  | 'IBEX_ERR_CONFIG'
  | 'IBEX_ERR_CATALOG'
  | 'IBEX_ERR_BUDGET_EXCEEDED'
  | 'IBEX_ERR_POOL_SATURATED'
  | 'IBEX_ERR_POOL_DEADLINE'
  | 'IBEX_ERR_POOL_TASK_FAILED'
  | 'IBEX_ERR_DEADLINE_EXCEEDED'
  | 'IBEX_ERR_CANCELLED'
  | 'IBEX_ERR_UNAUTHENTICATED'
  | 'IBEX_ERR_PERMISSION_DENIED'
  | 'IBEX_ERR_METADATA_TOO_LARGE'
  | 'IBEX_ERR_UNIMPLEMENTED'
  | 'IBEX_ERR_UNAVAILABLE'
  | 'IBEX_ERR_INTERNAL';

/**
 * Why the CPU stage missed its deadline: `withdrawn` = the task was still queued and
 * never ran; `abandoned` = it was running and its thread finishes it, the result discarded.
 */
export type PoolDeadlineReason = 'withdrawn' | 'abandoned';

/** Base class of every error this service raises; `cause` is kept. */
export class IbexError extends Error {
  readonly code: IbexErrorCode;
  /** For validation errors: the field (or variable) the message names. */
  readonly field: string | undefined;
  /** For `IBEX_ERR_POOL_DEADLINE`: whether the task was withdrawn from the queue or abandoned running. */
  readonly poolReason: PoolDeadlineReason | undefined;
  constructor(
    code: IbexErrorCode,
    message: string,
    options?: { cause?: unknown; field?: string; poolReason?: PoolDeadlineReason },
  ) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'IbexError';
    this.code = code;
    this.field = options?.field;
    this.poolReason = options?.poolReason;
  }
}

/** gRPC status for each error code (contract.md §11: client errors are INVALID_ARGUMENT, bugs INTERNAL). */
export const GRPC_STATUS_BY_CODE: Readonly<Record<IbexErrorCode, status>> = {
  IBEX_ERR_INVALID_ARGUMENT: status.INVALID_ARGUMENT,
  IBEX_ERR_UNKNOWN_MODEL: status.INVALID_ARGUMENT,
  IBEX_ERR_ESTIMATE_KIND_MISMATCH: status.INTERNAL,
  IBEX_ERR_CONFIG: status.INTERNAL,
  IBEX_ERR_CATALOG: status.INTERNAL,
  IBEX_ERR_BUDGET_EXCEEDED: status.INTERNAL,
  IBEX_ERR_POOL_SATURATED: status.RESOURCE_EXHAUSTED,
  IBEX_ERR_POOL_DEADLINE: status.DEADLINE_EXCEEDED,
  IBEX_ERR_POOL_TASK_FAILED: status.INTERNAL,
  IBEX_ERR_DEADLINE_EXCEEDED: status.DEADLINE_EXCEEDED,
  IBEX_ERR_CANCELLED: status.CANCELLED,
  IBEX_ERR_UNAUTHENTICATED: status.UNAUTHENTICATED,
  IBEX_ERR_PERMISSION_DENIED: status.PERMISSION_DENIED,
  IBEX_ERR_METADATA_TOO_LARGE: status.RESOURCE_EXHAUSTED,
  IBEX_ERR_UNIMPLEMENTED: status.UNIMPLEMENTED,
  IBEX_ERR_UNAVAILABLE: status.UNAVAILABLE,
  IBEX_ERR_INTERNAL: status.INTERNAL,
};

/** Factories: the only way errors are built, so messages stay the contract's exact strings. */
export const Errors = {
  /** contract.md §11 validation failure; `message` is the exact detail string. */
  invalidArgument: (field: string, message: string) =>
    new IbexError('IBEX_ERR_INVALID_ARGUMENT', message, { field }),
  /** contract.md §5: `unknown model '<model>'`. */
  unknownModel: (model: string) =>
    new IbexError('IBEX_ERR_UNKNOWN_MODEL', `unknown model '${model}'`, { field: 'model' }),
  /** contract.md §5: two counts of different estimate kinds must never be summed. */
  estimateKindMismatch: (a: string, b: string) =>
    new IbexError('IBEX_ERR_ESTIMATE_KIND_MISMATCH', `cannot combine token counts of kinds ${a} and ${b}`),
  /** contract.md §3: an invalid setting stops start-up; the message names the variable. */
  config: (variable: string, reason: string) =>
    new IbexError('IBEX_ERR_CONFIG', `${variable}: ${reason}`, { field: variable }),
  catalog: (reason: string, cause?: unknown) =>
    new IbexError('IBEX_ERR_CATALOG', `capability catalog: ${reason}`, { cause }),
  /** contract.md §8 step 9: total_tokens > budget is an internal error. */
  budgetExceeded: (total: number, budget: number) =>
    new IbexError('IBEX_ERR_BUDGET_EXCEEDED', `packer selected ${total} tokens over a budget of ${budget}`),
  /** Flow control under load: built {@link stackless}. */
  poolSaturated: () => stackless(() => new IbexError('IBEX_ERR_POOL_SATURATED', 'worker pool queue is full')),
  /**
   * The CPU stage missed its deadline; `reason` says whether the task ever ran. Flow
   * control under load: {@link stackless}.
   */
  poolDeadline: (reason: PoolDeadlineReason, cause?: unknown) =>
    stackless(
      () =>
        new IbexError('IBEX_ERR_POOL_DEADLINE', 'CPU stage could not finish before the deadline', {
          cause,
          poolReason: reason,
        }),
    ),
  poolTaskFailed: (cause: unknown) =>
    new IbexError(
      'IBEX_ERR_POOL_TASK_FAILED',
      `worker task failed: ${String((cause as Error)?.message ?? cause)}`,
      {
        cause,
      },
    ),
  /** The request deadline D passed before the answer was ready (contract.md §10). */
  /** The call's deadline passed (contract.md §10); {@link stackless}: an overloaded process raises it by the thousand. */
  deadlineExceeded: () => stackless(() => new IbexError('IBEX_ERR_DEADLINE_EXCEEDED', 'deadline exceeded')),
  /** The caller cancelled the call (contract.md §10); nobody is left to answer. {@link stackless}. */
  cancelled: () => stackless(() => new IbexError('IBEX_ERR_CANCELLED', 'call cancelled')),
  unauthenticated: (reason: string) => new IbexError('IBEX_ERR_UNAUTHENTICATED', reason),
  permissionDenied: (reason: string) => new IbexError('IBEX_ERR_PERMISSION_DENIED', reason),
  /** Request metadata over `grpc.max_metadata_size`, which grpc-js does not enforce itself. */
  metadataTooLarge: (sizeBytes: number, maxBytes: number) =>
    new IbexError(
      'IBEX_ERR_METADATA_TOO_LARGE',
      `request metadata of ${sizeBytes} bytes exceeds ${maxBytes}`,
    ),
  /** A method of the service contract this server does not implement. */
  unimplemented: (details: string) => new IbexError('IBEX_ERR_UNIMPLEMENTED', details),
  /** A store a call needs (not a degradable branch) failed or timed out; the caller may retry. */
  unavailable: (reason: string, cause?: unknown) => new IbexError('IBEX_ERR_UNAVAILABLE', reason, { cause }),
  internal: (reason: string, cause?: unknown) => new IbexError('IBEX_ERR_INTERNAL', reason, { cause }),
} as const;

/** True for an {@link IbexError} with the given code. */
export function isIbexError(err: unknown, code?: IbexErrorCode): err is IbexError {
  return err instanceof IbexError && (code === undefined || err.code === code);
}

/** A gRPC status as grpc-js's unary `callback` and `sendStatus` both take it (no trailers of its own). */
export interface StatusObject {
  code: status;
  details: string;
}

/**
 * The one way a status is built from an error (nice-grpc's `createErrorStatusObject`):
 * an {@link IbexError} gets its code from {@link GRPC_STATUS_BY_CODE} and its message as details;
 * anything else is a bug and becomes INTERNAL `internal error`, its text never sent to the caller.
 */
export function toStatusObject(err: unknown): StatusObject {
  if (err instanceof IbexError) return { code: GRPC_STATUS_BY_CODE[err.code], details: err.message };
  return { code: status.INTERNAL, details: 'internal error' };
}
