/**
 * Promise-based client of `ibex.context.v1.ContextAssemblyService` (contract.md §2) and `grpc.health.v1.Health`
 * over @grpc/grpc-js. Calls never reject on a gRPC status: they resolve with the decoded response (or
 * null), the response headers and the final status, so tools and tests branch on `status.code`.
 */
import { readFileSync } from 'node:fs';
import {
  type ChannelCredentials,
  type ChannelOptions,
  Client,
  type ClientUnaryCall,
  credentials,
  type CallOptions as GrpcCallOptions,
  Metadata,
  type MethodDefinition,
  type ServiceDefinition,
  type StatusObject,
} from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';
import type { RecordMemoryFeedbackRequest as RecordMemoryFeedbackRequestInput } from '../../generated/proto/ibex/context/v1/RecordMemoryFeedbackRequest.js';
import type { SearchMemoriesRequest as SearchMemoriesRequestInput } from '../../generated/proto/ibex/context/v1/SearchMemoriesRequest.js';
import {
  type AssembleContextRequestInput,
  type AssembleContextResponse,
  contextServiceDefinition,
  type RecordMemoryFeedbackResponse,
  type SearchMemoriesResponse,
} from '../../wire/proto.js';

/** Environment variable holding the caller's bearer token (sent as `authorization: Bearer …`). */
export const TOKEN_ENV = 'IBEX_CONTEXT_TOKEN';

/**
 * Inbound message cap of client channels: 16 MiB, above the largest valid answer (the answer echoes the
 * history, so a request near contract.md §11's 13.2 MB limit gets an answer as large; gRPC's 4 MiB default
 * would fail it with RESOURCE_EXHAUSTED). Same value as the service's CLIENT_RECEIVE_BYTES_NEEDED.
 */
export const MAX_RECEIVE_MESSAGE_BYTES = 16 * 1024 * 1024;

/** Per-call options. */
export interface CallOptions {
  /** Caller deadline, ms from now (sent as grpc-timeout). Omitted = no deadline. */
  deadlineMs?: number;
  /** Request metadata, merged over the client's own (e.g. the bearer token). */
  metadata?: Metadata | Record<string, string>;
  /** Aborting it cancels the call (the server sees `cancelled`, the outcome is CANCELLED). */
  signal?: AbortSignal;
}

/** Result of one unary call. */
export interface CallOutcome<T> {
  /** The decoded response, or null when the status is not OK. */
  response: T | null;
  /** Response headers (initial metadata); empty for a trailers-only answer. */
  metadata: Metadata;
  /** Final status: code, details, trailers. */
  status: StatusObject;
}

/** Health status as grpc.health.v1 names it. */
export type HealthStatus = 'UNKNOWN' | 'SERVING' | 'NOT_SERVING' | 'SERVICE_UNKNOWN';

/** TLS settings of a channel; absent = insecure (plaintext HTTP/2). */
export interface TlsOptions {
  /** PEM root certificates; absent = the system roots. */
  ca?: Buffer;
  /** Name to verify the server certificate against, when it differs from the address's host. */
  serverName?: string;
  /** PEM client certificate chain for mutual TLS (with {@link TlsOptions.key}). */
  cert?: Buffer;
  /** PEM private key of {@link TlsOptions.cert}. */
  key?: Buffer;
  /**
   * Skip verifying the server certificate. Only for `healthcheck --local`, which probes its own
   * container's process on loopback and sends no token.
   */
  skipVerify?: boolean;
}

/** How to reach the service. */
export interface ConnectionOptions {
  /** `host:port` (or any grpc-js target such as `dns:///host:port`). */
  addr: string;
  /** TLS settings; `true` = TLS with the system roots; absent/false = insecure. */
  tls?: TlsOptions | boolean;
  /**
   * Bearer token sent as `authorization: Bearer <token>` on every call. Kept only in a closure and
   * never included in any output.
   */
  token?: string;
  /** Extra channel options (they override the defaults). */
  channelOptions?: ChannelOptions;
}

/** A client bound to one channel. */
export interface ContextClient {
  /** The underlying grpc-js client, for calls this interface does not wrap (streams, reflection). */
  readonly raw: Client;
  /** `AssembleContext` (contract.md §2). */
  assemble(
    req: AssembleContextRequestInput,
    opts?: CallOptions,
  ): Promise<CallOutcome<AssembleContextResponse>>;
  /** `SearchMemories` (deferred: UNIMPLEMENTED, ADR-0038). */
  searchMemories(
    req: SearchMemoriesRequestInput,
    opts?: CallOptions,
  ): Promise<CallOutcome<SearchMemoriesResponse>>;
  /** `RecordMemoryFeedback` (deferred: UNIMPLEMENTED, ADR-0038). */
  recordMemoryFeedback(
    req: RecordMemoryFeedbackRequestInput,
    opts?: CallOptions,
  ): Promise<CallOutcome<RecordMemoryFeedbackResponse>>;
  /** `grpc.health.v1.Health/Check` for `service` ("" = the whole server). */
  healthCheck(service?: string, opts?: CallOptions): Promise<CallOutcome<{ status: HealthStatus }>>;
  /**
   * Resolves once the channel is connected, or rejects with an Error naming the address when it is not
   * within `timeoutMs`.
   */
  waitForReady(timeoutMs: number): Promise<void>;
  /** The metadata every call starts from (a fresh copy: callers may add to it). */
  baseMetadata(): Metadata;
  close(): void;
}

/** A unary method of a grpc-js service definition. */
export type UnaryMethod = MethodDefinition<unknown, unknown>;

/**
 * Looks a method up in a service definition.
 * @throws Error when the service has no such method.
 */
export function methodOf(def: ServiceDefinition | Record<string, unknown>, name: string): UnaryMethod {
  const m = (def as Record<string, UnaryMethod | undefined>)[name];
  if (!m) throw new Error(`no method ${name}`);
  return m;
}

/** `ContextAssemblyService/AssembleContext` method definition. */
export const ASSEMBLE_METHOD: UnaryMethod = methodOf(contextServiceDefinition, 'AssembleContext');
/** `grpc.health.v1.Health/Check` method definition. */
export const HEALTH_CHECK_METHOD: UnaryMethod = methodOf(
  healthService as unknown as ServiceDefinition,
  'Check',
);

/** Builds a Metadata from a plain object (or returns the Metadata as is). */
export function toMetadata(md: CallOptions['metadata']): Metadata {
  if (md instanceof Metadata) return md;
  const out = new Metadata();
  for (const [k, v] of Object.entries(md ?? {})) out.set(k, v);
  return out;
}

/** Channel credentials for `tls` (insecure when absent or false). */
export function channelCredentials(tls: ConnectionOptions['tls']): ChannelCredentials {
  if (!tls) return credentials.createInsecure();
  if (tls === true) return credentials.createSsl();
  const verify = tls.skipVerify ? { rejectUnauthorized: false, checkServerIdentity: () => undefined } : {};
  return credentials.createSsl(tls.ca ?? null, tls.key ?? null, tls.cert ?? null, verify);
}

/**
 * Reads a PEM file for {@link TlsOptions} (`what` names it in the error: `CA`, `certificate`, `key`).
 * @throws Error naming the file when it cannot be read.
 */
export function readPemFile(file: string, what = 'CA'): Buffer {
  try {
    return readFileSync(file);
  } catch (err) {
    throw new Error(`cannot read TLS ${what} file ${file}: ${(err as Error).message}`);
  }
}

/** Callback of {@link startUnary}: the whole outcome, once, after the final status. */
export type UnaryDone<Res> = (outcome: CallOutcome<Res>) => void;

/**
 * Starts one unary call without a promise (the load driver's hot path) and returns the grpc-js call,
 * so the caller can `cancel()` it. `done` runs exactly once, when the final status arrives.
 * @param deadline absolute deadline in epoch ms (`Date.now()` clock), or undefined for none.
 */
export function startUnary<Res>(
  client: Client,
  m: UnaryMethod,
  req: unknown,
  metadata: Metadata,
  deadline: number | undefined,
  done: UnaryDone<Res>,
): ClientUnaryCall {
  let response: Res | null = null;
  let headers: Metadata | undefined;
  const options: GrpcCallOptions = deadline === undefined ? {} : { deadline };
  const call = client.makeUnaryRequest(
    m.path,
    m.requestSerialize,
    m.responseDeserialize,
    req,
    metadata,
    options,
    (err, value) => {
      response = err ? null : ((value as Res | undefined) ?? null);
    },
  );
  call.on('metadata', (md: Metadata) => {
    headers = md;
  });
  // grpc-js calls the callback before emitting `status`, so the response is known here.
  call.on('status', (st: StatusObject) =>
    done({ response, metadata: headers ?? new Metadata(), status: st }),
  );
  return call;
}

/**
 * One unary call as a promise that resolves with the outcome, whatever the status.
 * @param base metadata the call starts from (copied; `opts.metadata` is merged over it).
 */
export function unaryCall<Res>(
  client: Client,
  m: UnaryMethod,
  req: unknown,
  opts: CallOptions = {},
  base?: Metadata,
): Promise<CallOutcome<Res>> {
  const metadata = base ? base.clone() : new Metadata();
  if (opts.metadata !== undefined) metadata.merge(toMetadata(opts.metadata));
  return new Promise((resolve) => {
    const deadline = opts.deadlineMs === undefined ? undefined : Date.now() + opts.deadlineMs;
    const call = startUnary<Res>(client, m, req, metadata, deadline, resolve);
    const signal = opts.signal;
    if (signal) {
      if (signal.aborted) call.cancel();
      else signal.addEventListener('abort', () => call.cancel(), { once: true });
    }
  });
}

/**
 * Creates a grpc-js `Client` for `conn` with the 16 MiB receive cap and `extra` channel options.
 * Pass `{'grpc.use_local_subchannel_pool': 1}` to get a connection of its own (the load driver does).
 */
export function createRawClient(conn: ConnectionOptions, extra: ChannelOptions = {}): Client {
  const options: ChannelOptions = {
    'grpc.max_receive_message_length': MAX_RECEIVE_MESSAGE_BYTES,
    ...extra,
    ...conn.channelOptions,
  };
  if (typeof conn.tls === 'object' && conn.tls.serverName) {
    options['grpc.ssl_target_name_override'] = conn.tls.serverName;
    options['grpc.default_authority'] = conn.tls.serverName;
  }
  return new Client(conn.addr, channelCredentials(conn.tls), options);
}

/** The metadata every call of `conn` carries (the bearer token, when there is one). */
export function connectionMetadata(conn: Pick<ConnectionOptions, 'token'>): Metadata {
  const md = new Metadata();
  if (conn.token) md.set('authorization', `Bearer ${conn.token}`);
  return md;
}

/** Resolves when `client`'s channel is connected; rejects after `timeoutMs` with the address named. */
export function waitForReady(client: Client, addr: string, timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    client.waitForReady(Date.now() + timeoutMs, (err) => {
      if (err) reject(new Error(`cannot connect to ${addr} within ${timeoutMs} ms: ${err.message}`));
      else resolve();
    });
  });
}

/**
 * Creates a client for one channel. Close it with `close()`.
 * @param extra channel options applied before `conn.channelOptions`.
 */
export function createContextClient(conn: ConnectionOptions, extra: ChannelOptions = {}): ContextClient {
  const client = createRawClient(conn, extra);
  const base = connectionMetadata(conn);
  const def = contextServiceDefinition;
  return {
    raw: client,
    assemble: (req, opts) => unaryCall(client, ASSEMBLE_METHOD, req, opts, base),
    searchMemories: (req, opts) => unaryCall(client, methodOf(def, 'SearchMemories'), req, opts, base),
    recordMemoryFeedback: (req, opts) =>
      unaryCall(client, methodOf(def, 'RecordMemoryFeedback'), req, opts, base),
    healthCheck: (service = '', opts) => unaryCall(client, HEALTH_CHECK_METHOD, { service }, opts, base),
    waitForReady: (timeoutMs) => waitForReady(client, conn.addr, timeoutMs),
    baseMetadata: () => base.clone(),
    close: () => client.close(),
  };
}
