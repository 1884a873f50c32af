// Promise client of ContextAssemblyService (contract.md §2) and Health over grpc-js. Calls never reject on a
// gRPC status: they resolve with the response (or null), headers and status, so callers branch on the code.
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

/** Client receive cap, above the largest valid answer (the service's CLIENT_RECEIVE_BYTES_NEEDED). */
export const MAX_RECEIVE_MESSAGE_BYTES = 16 * 1024 * 1024;

/**
 * HTTP/2 receive window of the clients' channels, per stream and per connection, bytes. grpc-js keeps
 * HTTP/2's 64 KiB otherwise: an answer of ~600 memories (~170 KB) then waits for window updates from this
 * process's event loop two or three times, and answers in flight together share one 64 KiB connection
 * window, so at a replay's pace answers the service had sent in ~30 ms reached the caller hundreds of ms
 * later (docs/deploy.md, "Clients").
 */
export const RECEIVE_WINDOW_BYTES = MAX_RECEIVE_MESSAGE_BYTES;

export interface CallOptions {
  /** Caller deadline, ms from now (sent as grpc-timeout). Omitted = no deadline. */
  deadlineMs?: number;
  metadata?: Metadata | Record<string, string>;
  /** Aborting it cancels the call (outcome CANCELLED). */
  signal?: AbortSignal;
}

export interface CallOutcome<T> {
  response: T | null;
  /** Response headers; empty for a trailers-only answer. */
  metadata: Metadata;
  status: StatusObject;
}

export type HealthStatus = 'UNKNOWN' | 'SERVING' | 'NOT_SERVING' | 'SERVICE_UNKNOWN';

/** TLS settings of a channel; absent = insecure (plaintext HTTP/2). */
export interface TlsOptions {
  ca?: Buffer;
  /** Name to verify the server certificate against, when not the address's host. */
  serverName?: string;
  /** PEM client certificate chain for mutual TLS (with `key`). */
  cert?: Buffer;
  key?: Buffer;
  /** Skip verifying the server: only for `healthcheck --local` (own container, loopback, no token). */
  skipVerify?: boolean;
}

export interface ConnectionOptions {
  /** `host:port` (or any grpc-js target such as `dns:///host:port`). */
  addr: string;
  /** `true` = TLS with the system roots; absent/false = insecure. */
  tls?: TlsOptions | boolean;
  /** Bearer token for every call; kept only in a closure, never in any output. */
  token?: string;
  channelOptions?: ChannelOptions;
}

export interface ContextClient {
  /** The underlying grpc-js client, for calls not wrapped here. */
  readonly raw: Client;
  assemble(
    req: AssembleContextRequestInput,
    opts?: CallOptions,
  ): Promise<CallOutcome<AssembleContextResponse>>;
  searchMemories(
    req: SearchMemoriesRequestInput,
    opts?: CallOptions,
  ): Promise<CallOutcome<SearchMemoriesResponse>>;
  recordMemoryFeedback(
    req: RecordMemoryFeedbackRequestInput,
    opts?: CallOptions,
  ): Promise<CallOutcome<RecordMemoryFeedbackResponse>>;
  /** Health/Check for `service` ("" = the whole server). */
  healthCheck(service?: string, opts?: CallOptions): Promise<CallOutcome<{ status: HealthStatus }>>;
  /** Resolves once connected; rejects with an Error naming the address after `timeoutMs`. */
  waitForReady(timeoutMs: number): Promise<void>;
  /** The metadata every call starts from (a fresh copy). */
  baseMetadata(): Metadata;
  close(): void;
}

export type UnaryMethod = MethodDefinition<unknown, unknown>;

/** Looks a method up in a service definition. @throws Error when it has none. */
export function methodOf(def: ServiceDefinition | Record<string, unknown>, name: string): UnaryMethod {
  const m = (def as Record<string, UnaryMethod | undefined>)[name];
  if (!m) throw new Error(`no method ${name}`);
  return m;
}

export const ASSEMBLE_METHOD: UnaryMethod = methodOf(contextServiceDefinition, 'AssembleContext');
export const HEALTH_CHECK_METHOD: UnaryMethod = methodOf(
  healthService as unknown as ServiceDefinition,
  'Check',
);

export function toMetadata(md: CallOptions['metadata']): Metadata {
  if (md instanceof Metadata) return md;
  const out = new Metadata();
  for (const [k, v] of Object.entries(md ?? {})) out.set(k, v);
  return out;
}

export function channelCredentials(tls: ConnectionOptions['tls']): ChannelCredentials {
  if (!tls) return credentials.createInsecure();
  if (tls === true) return credentials.createSsl();
  const verify = tls.skipVerify ? { rejectUnauthorized: false, checkServerIdentity: () => undefined } : {};
  return credentials.createSsl(tls.ca ?? null, tls.key ?? null, tls.cert ?? null, verify);
}

/** Reads a PEM file (`what` names it in the error). @throws Error naming the file when it cannot be read. */
export function readPemFile(file: string, what = 'CA'): Buffer {
  try {
    return readFileSync(file);
  } catch (err) {
    throw new Error(`cannot read TLS ${what} file ${file}: ${(err as Error).message}`);
  }
}

export type UnaryDone<Res> = (outcome: CallOutcome<Res>) => void;

/**
 * Starts a unary call without a promise (the load driver's hot path); `done` runs once, at the final status.
 * @param deadline epoch ms, or undefined for none.
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

/** One unary call resolving with its outcome, whatever the status; `opts.metadata` is merged over `base`. */
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
 * A grpc-js `Client` with the 16 MiB receive cap and a receive window of the same size
 * ({@link RECEIVE_WINDOW_BYTES}); `extra` and `conn.channelOptions` override them
 * (`grpc.use_local_subchannel_pool: 1`: own connection).
 */
export function createRawClient(conn: ConnectionOptions, extra: ChannelOptions = {}): Client {
  const options: ChannelOptions = {
    'grpc.max_receive_message_length': MAX_RECEIVE_MESSAGE_BYTES,
    'grpc-node.flow_control_window': RECEIVE_WINDOW_BYTES,
    ...extra,
    ...conn.channelOptions,
  };
  if (typeof conn.tls === 'object' && conn.tls.serverName) {
    options['grpc.ssl_target_name_override'] = conn.tls.serverName;
    options['grpc.default_authority'] = conn.tls.serverName;
  }
  return new Client(conn.addr, channelCredentials(conn.tls), options);
}

export function connectionMetadata(conn: Pick<ConnectionOptions, 'token'>): Metadata {
  const md = new Metadata();
  if (conn.token) md.set('authorization', `Bearer ${conn.token}`);
  return md;
}

export function waitForReady(client: Client, addr: string, timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    client.waitForReady(Date.now() + timeoutMs, (err) => {
      if (err) reject(new Error(`cannot connect to ${addr} within ${timeoutMs} ms: ${err.message}`));
      else resolve();
    });
  });
}

/** A client for one channel (`extra` options go before `conn.channelOptions`); close it with `close()`. */
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
