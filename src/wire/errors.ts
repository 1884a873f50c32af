/** Every error the service raises: a stable `code` (callers branch on it, never on text), factories and a status table. */
import { status } from '@grpc/grpc-js';
import { stackless } from '../util/stackless.js';

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

/** `withdrawn`: still queued, never ran; `abandoned`: its thread finishes it and the result is discarded. */
export type PoolDeadlineReason = 'withdrawn' | 'abandoned';

export class IbexError extends Error {
  readonly code: IbexErrorCode;
  /** Validation errors: the field the message names. */
  readonly field: string | undefined;
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

/** contract.md §11: client errors are INVALID_ARGUMENT, bugs INTERNAL. */
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

/** The only way errors are built, so messages stay the contract's exact strings. */
export const Errors = {
  invalidArgument: (field: string, message: string) =>
    new IbexError('IBEX_ERR_INVALID_ARGUMENT', message, { field }),
  unknownModel: (model: string) =>
    new IbexError('IBEX_ERR_UNKNOWN_MODEL', `unknown model '${model}'`, { field: 'model' }),
  estimateKindMismatch: (a: string, b: string) =>
    new IbexError('IBEX_ERR_ESTIMATE_KIND_MISMATCH', `cannot combine token counts of kinds ${a} and ${b}`),
  config: (variable: string, reason: string) =>
    new IbexError('IBEX_ERR_CONFIG', `${variable}: ${reason}`, { field: variable }),
  catalog: (reason: string, cause?: unknown) =>
    new IbexError('IBEX_ERR_CATALOG', `capability catalog: ${reason}`, { cause }),
  /** contract.md §8 step 9: an internal error. */
  budgetExceeded: (total: number, budget: number) =>
    new IbexError('IBEX_ERR_BUDGET_EXCEEDED', `packer selected ${total} tokens over a budget of ${budget}`),
  /** Stackless: flow control under load. */
  poolSaturated: () => stackless(() => new IbexError('IBEX_ERR_POOL_SATURATED', 'worker pool queue is full')),
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
  /** Stackless: an overloaded process raises it by the thousand. */
  deadlineExceeded: () => stackless(() => new IbexError('IBEX_ERR_DEADLINE_EXCEEDED', 'deadline exceeded')),
  cancelled: () => stackless(() => new IbexError('IBEX_ERR_CANCELLED', 'call cancelled')),
  unauthenticated: (reason: string) => new IbexError('IBEX_ERR_UNAUTHENTICATED', reason),
  permissionDenied: (reason: string) => new IbexError('IBEX_ERR_PERMISSION_DENIED', reason),
  /** grpc-js does not enforce `grpc.max_metadata_size` itself. */
  metadataTooLarge: (sizeBytes: number, maxBytes: number) =>
    new IbexError(
      'IBEX_ERR_METADATA_TOO_LARGE',
      `request metadata of ${sizeBytes} bytes exceeds ${maxBytes}`,
    ),
  unimplemented: (details: string) => new IbexError('IBEX_ERR_UNIMPLEMENTED', details),
  /** A non-degradable store failed or timed out; the caller may retry. */
  unavailable: (reason: string, cause?: unknown) => new IbexError('IBEX_ERR_UNAVAILABLE', reason, { cause }),
  internal: (reason: string, cause?: unknown) => new IbexError('IBEX_ERR_INTERNAL', reason, { cause }),
} as const;

export function isIbexError(err: unknown, code?: IbexErrorCode): err is IbexError {
  return err instanceof IbexError && (code === undefined || err.code === code);
}

export interface StatusObject {
  code: status;
  details: string;
}

/** A non-{@link IbexError} is a bug: INTERNAL `internal error`, its text never sent to the caller. */
export function toStatusObject(err: unknown): StatusObject {
  if (err instanceof IbexError) return { code: GRPC_STATUS_BY_CODE[err.code], details: err.message };
  return { code: status.INTERNAL, details: 'internal error' };
}
