// SearchMemories, RecordMemoryFeedback (contract.md §2): on a store, else UNIMPLEMENTED (memory service).
import { type ServerUnaryCall, type sendUnaryData, status } from '@grpc/grpc-js';
import { type MemoryRpcDeps, recordMemoryFeedback, searchMemories } from '../request/memory-rpcs.js';
import type { Logger } from '../telemetry/logger.js';
import { Errors, IbexError, toStatusObject } from '../wire/errors.js';
import type {
  RecordMemoryFeedbackRequest,
  RecordMemoryFeedbackResponse,
  SearchMemoriesRequest,
  SearchMemoriesResponse,
} from '../wire/proto.js';

/** Details of the methods in front of a store without them (contract.md §2; U+2014 dash). */
export const UNIMPLEMENTED_DETAILS = {
  SearchMemories: 'SearchMemories deferred — ADR-0038',
  RecordMemoryFeedback: 'RecordMemoryFeedback deferred — ADR-0038',
} as const;

const unimplemented =
  (details: string) =>
  (_call: unknown, callback: sendUnaryData<never>): void => {
    callback(toStatusObject(Errors.unimplemented(details)));
  };

/** Runs `work` with a signal aborted when the caller goes away; INTERNAL for anything not an IbexError. */
function memoryRpc<Req, Res>(
  deps: MemoryRpcDeps,
  logger: Logger,
  method: keyof typeof UNIMPLEMENTED_DETAILS,
  work: (deps: MemoryRpcDeps, call: ServerUnaryCall<Req, Res>, signal: AbortSignal) => Promise<Res>,
) {
  return (call: ServerUnaryCall<Req, Res>, callback: sendUnaryData<Res>): void => {
    const aborter = new AbortController();
    call.on('cancelled', () => aborter.abort(Errors.cancelled()));
    const done = (code: status) => deps.metrics.call(method, status[code] ?? String(code));
    work(deps, call, aborter.signal).then(
      (response) => {
        done(status.OK);
        callback(null, response);
      },
      (err: unknown) => {
        const error = toStatusObject(err);
        if (!(err instanceof IbexError) || error.code === status.INTERNAL)
          logger.error({ err, method }, 'memory call failed');
        else
          logger.debug(
            { code: err.code, field: err.field, reason: err.message, method },
            'memory call refused',
          );
        done(error.code);
        if (!aborter.signal.aborted) callback(error);
      },
    );
  };
}

/** The memory methods' handlers: on `memoryRpcs`, else UNIMPLEMENTED with {@link UNIMPLEMENTED_DETAILS}. */
export function memoryRpcHandlers(memoryRpcs: MemoryRpcDeps | undefined, logger: Logger) {
  if (!memoryRpcs) {
    return {
      SearchMemories: unimplemented(UNIMPLEMENTED_DETAILS.SearchMemories),
      RecordMemoryFeedback: unimplemented(UNIMPLEMENTED_DETAILS.RecordMemoryFeedback),
    };
  }
  return {
    SearchMemories: memoryRpc<SearchMemoriesRequest, SearchMemoriesResponse>(
      memoryRpcs,
      logger,
      'SearchMemories',
      (deps, call, signal) => searchMemories(deps, call.request, call.metadata, signal),
    ),
    RecordMemoryFeedback: memoryRpc<RecordMemoryFeedbackRequest, RecordMemoryFeedbackResponse>(
      memoryRpcs,
      logger,
      'RecordMemoryFeedback',
      (deps, call) => recordMemoryFeedback(deps, call.request, call.metadata),
    ),
  };
}
