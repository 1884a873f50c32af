// gRPC boundary (contract.md §2, §10, §11): handlers, health, reflection, channel limits and drain. The
// pipeline is injected; no handler error ever escapes into grpc-js.
import path from 'node:path';
import {
  type ChannelOptions,
  Metadata,
  Server,
  ServerCredentials,
  type ServerErrorResponse,
  type ServerInterceptor,
  type ServerUnaryCall,
  type sendUnaryData,
  status,
} from '@grpc/grpc-js';
import { ReflectionService } from '@grpc/reflection';
import { HealthImplementation, protoPath as healthProtoPath, type ServingStatus } from 'grpc-health-check';
import type { Settings } from '../config/settings.js';
import type { AssembleFn, AssembleResult } from '../request/assemble-fn.js';
import { authorizeRequest } from '../request/authorize-request.js';
import {
  type AbortSignalLike,
  abortCause,
  type CallContext,
  type CallContextHandle,
  createCallContext,
  monotonicNow,
} from '../request/call-context.js';
import type { MemoryRpcDeps } from '../request/memory-rpcs.js';
import { RequestPrefixScanner } from '../request/request-prefix-scanner.js';
import { type ValidatedRequest, validateWireRequest } from '../request/validate.js';
import { decodeAssembleRequest, type WireAssembleRequest } from '../request/wire-request.js';
import type { Logger } from '../telemetry/logger.js';
import { callLogger } from '../telemetry/tracing/call-logger.js';
import type { CallTrace } from '../telemetry/tracing/call-trace.js';
import type { CallTraces } from '../telemetry/tracing/tracing.js';
import { MESSAGE_BUFFERS, releaseMessageBuffer } from '../util/message-buffers.js';
import { Errors, IbexError, isIbexError, toStatusObject } from '../wire/errors.js';
import {
  type AssembleContextResponse,
  CONTEXT_SERVICE_NAME,
  contextServiceDefinition,
  gatheredAnswer,
  PROTO_DIR,
  PROTO_FILES,
  serializeAssembleResponse,
  splicedOn,
} from '../wire/proto.js';
import { DEGRADED_HEADER, LEVEL_HEADER } from '../wire/wire-headers.js';
import { largeAnswerNotice } from './large-answer.js';
import { memoryRpcHandlers } from './memory-handlers.js';
import { metadataLimitInterceptor } from './metadata-limit.js';
import { exposeDuplicateAuthorization } from './patches/duplicate-authorization.js';
import { decideRequestsOnTheWire } from './patches/early-decision.js';
import { sendGatheredMessages } from './patches/gathered-send.js';
import { alignHeaderPairLimit } from './patches/header-pair-limit.js';
import { assembleLargeMessagesIn } from './patches/pooled-message-decoder.js';
import { takeUploadTurns } from './patches/upload-turns.js';
import { reflectionPackageDefinition } from './reflection-descriptors.js';
import { UploadTurns } from './upload-turns.js';

/** The AssembleContext request's prefix scanner (one factory, not one closure per call). */
const newPrefixScanner = () => new RequestPrefixScanner();

export type { AssembleFn, AssembleResult } from '../request/assemble-fn.js';

/** Options of {@link createGrpcServer}. */
export interface GrpcServerOptions {
  assemble: AssembleFn;
  logger: Logger;
  settings: Pick<Settings, 'timeoutMs' | 'maxReceiveMessageBytes' | 'maxMetadataBytes'>;
  /** Extra server interceptors (e.g. authentication), run after the built-in metadata-size check. */
  interceptors?: ServerInterceptor[];
  /** Overrides of the default channel options (keepalive, connection age, …). */
  channelOptions?: ChannelOptions;
  /** Each call's trace, when tracing is on (its interceptor must be among `interceptors`). */
  traces?: CallTraces;
  /** What the memory methods run on; absent (in front of a memory service), both answer UNIMPLEMENTED. */
  memoryRpcs?: MemoryRpcDeps;
  /** Told of each answer sent after D (the event loop ran late), with how late, ms. */
  onLateAnswer?: (path: LateAnswerPath, lateMs: number) => void;
}

/**
 * How an answer came to be sent after D: `ready_after_deadline` (the pipeline's answer, resolved once the
 * clock had passed D) or `deadline_answer` (built when D's timer fired with no answer yet).
 */
export type LateAnswerPath = 'ready_after_deadline' | 'deadline_answer';

/** A created, not yet bound, server. */
export interface GrpcServer {
  readonly server: Server;
  /** Binds and listens; resolves with the bound port (the real one for `:0`). Insecure by default. */
  bind(addr: string, credentials?: ServerCredentials): Promise<number>;
  /** Health → SERVING for "" and the service. Call once the pool is warm; ignored once draining. */
  markServing(): void;
  /** Health → NOT_SERVING, stop accepting, in-flight calls get `graceMs`, then forceShutdown. Idempotent. */
  drain(graceMs: number): Promise<void>;
  inFlight(): number;
}

// Keepalive finds half-open connections behind L4 proxies; a bounded connection age lets clients rebalance
// onto new replicas, with a grace far above any deadline.
const DEFAULT_CHANNEL_OPTIONS: ChannelOptions = {
  'grpc.keepalive_time_ms': 60_000,
  'grpc.keepalive_timeout_ms': 20_000,
  'grpc.keepalive_permit_without_calls': 1,
  'grpc.max_connection_idle_ms': 5 * 60_000,
  'grpc.max_connection_age_ms': 10 * 60_000,
  'grpc.max_connection_age_grace_ms': 30_000,
  // Channelz bookkeeping (per-call counters and traces) is never read here; off.
  'grpc.enable_channelz': 0,
};

/** Our protos plus the health proto, as real file descriptors (src/grpc/reflection-descriptors.ts). */
function reflectionDefinition() {
  const healthRoot = path.resolve(path.dirname(healthProtoPath), '../..');
  return reflectionPackageDefinition([
    { dir: PROTO_DIR, files: PROTO_FILES },
    { dir: healthRoot, files: [path.relative(healthRoot, healthProtoPath)] },
  ]);
}

type Outcome =
  | { kind: 'ok'; result: AssembleResult }
  | { kind: 'error'; error: Partial<ServerErrorResponse> & { code: status; details: string } }
  | { kind: 'cancelled' };

/**
 * Creates the server with ContextAssemblyService, health (NOT_SERVING until {@link GrpcServer.markServing})
 * and reflection; receive and metadata limits from `settings` (larger requests get RESOURCE_EXHAUSTED).
 */
export function createGrpcServer(opts: GrpcServerOptions): GrpcServer {
  const { assemble, settings } = opts;
  const logger = opts.logger.child({ component: 'grpc' });
  const noteAnswerBytes = largeAnswerNotice(logger);

  const server = new Server({
    ...DEFAULT_CHANNEL_OPTIONS,
    'grpc.max_receive_message_length': settings.maxReceiveMessageBytes,
    'grpc.max_metadata_size': settings.maxMetadataBytes,
    ...opts.channelOptions,
    interceptors: [metadataLimitInterceptor(settings.maxMetadataBytes), ...(opts.interceptors ?? [])],
  });

  alignHeaderPairLimit(server, settings.maxMetadataBytes);
  assembleLargeMessagesIn(MESSAGE_BUFFERS);
  sendGatheredMessages(gatheredAnswer);
  // Keyed by the deserializer, not the path: the scanner's stopping points are decodeAssembleRequest's.
  decideRequestsOnTheWire((handler) =>
    handler.deserialize === decodeAssembleRequest ? newPrefixScanner : null,
  );
  takeUploadTurns(new UploadTurns());

  const health = new HealthImplementation({ '': 'NOT_SERVING', [CONTEXT_SERVICE_NAME]: 'NOT_SERVING' });
  const setHealth = (s: ServingStatus) => {
    health.setStatus('', s);
    health.setStatus(CONTEXT_SERVICE_NAME, s);
  };
  health.addToServer(server);
  new ReflectionService(reflectionDefinition()).addToServer(server);

  let active = 0;
  let draining = false;
  /** Every bound address with its real port: what `server.drain` takes. */
  const boundAddrs: string[] = [];
  let drainPromise: Promise<void> | undefined;

  const toError = (err: unknown, trace?: CallTrace): Extract<Outcome, { kind: 'error' }> => {
    const error = toStatusObject(err);
    const log = callLogger(logger, trace);
    if (!(err instanceof IbexError)) log.error({ err }, 'AssembleContext handler error');
    else if (error.code === status.INTERNAL) log.error({ err }, 'AssembleContext failed');
    else log.debug({ code: err.code, field: err.field, reason: err.message }, 'AssembleContext rejected');
    return { kind: 'error', error };
  };

  const deadlineExceeded: Outcome = { kind: 'error', error: toStatusObject(Errors.deadlineExceeded()) };

  /** The pipeline's answer at D, or null (none may be built, or building it failed). */
  const answerAtDeadline = (req: ValidatedRequest, ctx: CallContext): AssembleResult | null => {
    try {
      return assemble.atDeadline?.(req, ctx) ?? null;
    } catch (err) {
      logger.error({ err }, 'answer at the deadline failed');
      return null;
    }
  };

  const handleAssemble = (
    call: ServerUnaryCall<WireAssembleRequest, AssembleContextResponse>,
    callback: sendUnaryData<AssembleContextResponse>,
  ): void => {
    const arrival = monotonicNow();
    active++;
    const trace = opts.traces?.of(call.metadata);
    trace?.handled(arrival);
    let handle: CallContextHandle | undefined;
    let settled = false;

    // Every path ends here exactly once; grpc-js never sees a throw from this handler.
    const settle = (outcome: Outcome) => {
      if (settled) return;
      settled = true;
      active--;
      handle?.dispose();
      try {
        if (outcome.kind === 'ok') {
          const md = new Metadata();
          md.set(LEVEL_HEADER, outcome.result.level);
          // A missing directive leaves the level alone but still degrades the answer (contract.md §10).
          const degraded =
            outcome.result.level !== 'L0' || outcome.result.response.degradation.reasons.length > 0;
          md.set(DEGRADED_HEADER, degraded ? 'true' : 'false');
          call.sendMetadata(md);
          callback(null, outcome.result.response);
        } else if (outcome.kind === 'error') {
          callback(outcome.error);
        }
        // 'cancelled': grpc-js has already ended the stream; there is no one to answer.
      } catch (err) {
        callLogger(logger, trace).error({ err }, 'failed to send AssembleContext answer');
      } finally {
        // Every outcome hands the recycled request buffer back, except an answer spliced on it: its
        // serializer releases it once written (released now, the next request could overwrite it mid-write).
        const source = call.request?.history?.source;
        if (outcome.kind !== 'ok' || !splicedOn(outcome.result.response, source))
          releaseMessageBuffer(source);
      }
    };

    // Past D with no answer: the one built at D, unless grpc-js already ended the call (the caller's deadline).
    const settleAtDeadline = (req?: ValidatedRequest) => {
      const ctx = handle?.ctx;
      const result = req && ctx && !call.cancelled ? answerAtDeadline(req, ctx) : null;
      if (!result || !ctx) {
        settle(deadlineExceeded);
        return;
      }
      opts.onLateAnswer?.('deadline_answer', monotonicNow() - ctx.deadline);
      settle({ kind: 'ok', result });
    };
    const onAbort = (signal: AbortSignalLike, req?: ValidatedRequest) => {
      if (abortCause(signal) === 'deadline') settleAtDeadline(req);
      else settle({ kind: 'cancelled' });
    };

    try {
      handle = createCallContext(call, { timeoutMs: settings.timeoutMs, arrival, trace });
      const { ctx } = handle;
      if (ctx.signal.aborted) {
        onAbort(ctx.signal);
        return;
      }
      const req = validateWireRequest(call.request);
      // Needs the decoded org_id, so it cannot live in the authentication interceptor.
      authorizeRequest(req, ctx);
      ctx.signal.addEventListener('abort', () => onAbort(ctx.signal, req), { once: true });
      assemble(req, ctx).then(
        (result) => {
          if (ctx.signal.aborted) return;
          // A late event loop can resolve the answer past D before D's timer fires: an answer beats an error.
          const lateMs = monotonicNow() - ctx.deadline;
          if (lateMs >= 0) opts.onLateAnswer?.('ready_after_deadline', lateMs);
          settle({ kind: 'ok', result });
        },
        (err: unknown) => {
          if (settled) {
            callLogger(logger, trace).debug(
              { err },
              'AssembleContext pipeline ended after the call was answered',
            );
            return;
          }
          // The pipeline saw the clock pass D before D's timer fired (a refusal before D stays an error).
          if (isIbexError(err, 'IBEX_ERR_DEADLINE_EXCEEDED') && monotonicNow() >= ctx.deadline)
            settleAtDeadline(req);
          else settle(toError(err, trace));
        },
      );
    } catch (err) {
      settle(toError(err, trace));
    }
  };

  const memoryHandlers = memoryRpcHandlers(opts.memoryRpcs, logger);

  // AssembleContext is decoded on the wire: grpc-js passes whatever requestDeserialize returns.
  const serviceDefinition = {
    ...contextServiceDefinition,
    AssembleContext: {
      ...contextServiceDefinition.AssembleContext!,
      requestDeserialize: decodeAssembleRequest,
      // Serializing the answer is the request buffer's last use: back to the pool then.
      responseSerialize: (response: AssembleContextResponse) => {
        const out = serializeAssembleResponse(response, releaseMessageBuffer);
        // A spliced answer is a SplicedMessage, which has `byteLength` and no `length`; a Buffer has both.
        noteAnswerBytes(out.byteLength);
        return out;
      },
    },
  };
  server.addService(serviceDefinition, {
    AssembleContext: handleAssemble,
    ...memoryHandlers,
  });

  return {
    server,
    bind(addr, credentials = ServerCredentials.createInsecure()) {
      return new Promise<number>((resolve, reject) => {
        server.bindAsync(addr, credentials, (err, port) => {
          if (err) reject(err);
          else {
            boundAddrs.push(addr.replace(/:0$/, `:${port}`));
            try {
              exposeDuplicateAuthorization(server);
            } catch (hookErr) {
              reject(hookErr);
              return;
            }
            logger.info({ addr, port }, 'gRPC server listening');
            resolve(port);
          }
        });
      });
    },
    markServing() {
      if (draining) return;
      setHealth('SERVING');
    },
    drain(graceMs) {
      if (drainPromise) return drainPromise;
      draining = true;
      setHealth('NOT_SERVING');
      logger.info({ graceMs, inFlight: active }, 'gRPC server draining');
      drainPromise = new Promise<void>((resolve) => {
        let done = false;
        const finish = (forced: boolean) => {
          if (done) return;
          done = true;
          clearTimeout(timer);
          // The sessions were cancelled by server.drain's own timer, set first for the same grace.
          if (forced) server.forceShutdown();
          logger.info({ forced, inFlight: active }, 'gRPC server stopped');
          resolve();
        };
        // Long-lived streams (health Watch, reflection) never end on their own; the grace bounds them. With
        // channelz off forceShutdown cancels no session, so each port's drain cancels them after the grace.
        for (const bound of boundAddrs) {
          try {
            server.drain(bound, graceMs);
          } catch (err) {
            logger.warn({ err, addr: bound }, 'gRPC drain of a bound address failed');
          }
        }
        const timer = setTimeout(() => finish(true), graceMs);
        server.tryShutdown(() => finish(false));
      });
      return drainPromise;
    },
    inFlight: () => active,
  };
}
