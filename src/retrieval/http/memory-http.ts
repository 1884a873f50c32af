/** Memory service client over HTTP/1.1 (contract.md §4.1): keep-alive, no retries, bounded answers. */
import { Pool } from 'undici';
import { MESSAGE_BUFFERS, releaseMessageBuffer } from '../../util/message-buffers.js';
import { BranchErrors, isBranchError } from '../branch-error.js';
import type { MemorySource } from '../ports.js';
import {
  DEFAULT_MAX_MEMORY_CHARS,
  type HitLimits,
  HOT_LIMIT,
  maxBodyBytes,
  SEARCH_LIMIT,
  type ValidatedHits,
} from '../validate.js';
import { BodyDecoder } from './body-decoder.js';

export interface HttpMemorySourceOptions {
  baseUrl: string;
  /** Secret: sent, never logged nor put in an error or detail. */
  token: string;
  /** undici's own timeouts, ms: a safety net, its timers have ~1 s resolution. */
  hotTimeoutMs: number;
  coldTimeoutMs: number;
  /** Code points; longer memories are dropped (`oversize`). Default 65,536. */
  maxMemoryChars?: number;
  /** Bytes; lowers the cap derived from {@link maxBodyBytes} (tests only). */
  maxResponseBytes?: number;
  decoder?: BodyDecoder;
  connections?: number;
  connectTimeoutMs?: number;
  /** Idle socket lifetime, ms (a lower server `Keep-Alive: timeout` wins). Default 30000. */
  keepAliveTimeoutMs?: number;
  /** Told each body's size (or refused size) per org, for RoutedMemorySource's routing. */
  onBodyBytes?: (orgId: string, bytes: number) => void;
}

type Branch = 'hot' | 'cold';

/** @throws TypeError unless an absolute http(s) URL. */
export function memoryBaseUrl(baseUrl: string): URL {
  const url = new URL(baseUrl);
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new TypeError('memory base URL must be http or https');
  }
  return url;
}

function jsonString(value: string): string {
  return JSON.stringify(value);
}

export class HttpMemorySource implements MemorySource {
  readonly #pool: Pool;
  readonly #prefix: string;
  readonly #auth: string;
  readonly #hotTimeoutMs: number;
  readonly #coldTimeoutMs: number;
  readonly #hot: { limits: HitLimits; maxBytes: number };
  readonly #cold: { limits: HitLimits; maxBytes: number };
  readonly #decoder: BodyDecoder;
  readonly #ownsDecoder: boolean;
  readonly #onBodyBytes: ((orgId: string, bytes: number) => void) | undefined;

  constructor(options: HttpMemorySourceOptions) {
    const url = memoryBaseUrl(options.baseUrl);
    this.#prefix = url.pathname.replace(/\/+$/, '');
    this.#auth = `Bearer ${options.token}`;
    this.#hotTimeoutMs = options.hotTimeoutMs;
    this.#coldTimeoutMs = options.coldTimeoutMs;
    const maxChars = options.maxMemoryChars ?? DEFAULT_MAX_MEMORY_CHARS;
    const capped = (limit: number) => ({
      limits: { limit, maxChars },
      maxBytes: Math.min(maxBodyBytes(limit, maxChars), options.maxResponseBytes ?? Number.POSITIVE_INFINITY),
    });
    this.#hot = capped(HOT_LIMIT);
    this.#cold = capped(SEARCH_LIMIT);
    this.#onBodyBytes = options.onBodyBytes;
    this.#ownsDecoder = options.decoder === undefined;
    this.#decoder = options.decoder ?? new BodyDecoder();
    this.#pool = new Pool(url.origin, {
      connections: options.connections ?? 128,
      pipelining: 1,
      connectTimeout: options.connectTimeoutMs ?? 1000,
      keepAliveTimeout: options.keepAliveTimeoutMs ?? 30_000,
      // Defence in depth: undici enforces the larger cap itself too.
      maxResponseSize: Math.max(this.#hot.maxBytes, this.#cold.maxBytes),
    });
  }

  /** `GET /v1/memories/hot?…&limit=20&min_confidence=0.0`. */
  hot(orgId: string, agentId: string, signal: AbortSignal): Promise<ValidatedHits> {
    const path = `${this.#prefix}/v1/memories/hot?agent_id=${encodeURIComponent(agentId)}&limit=${HOT_LIMIT}&min_confidence=0.0`;
    return this.#call('hot', orgId, agentId, 'GET', path, undefined, this.#hotTimeoutMs, signal);
  }

  /** `POST /v1/memories/search` (limit 10). */
  search(orgId: string, agentId: string, query: string, signal: AbortSignal): Promise<ValidatedHits> {
    // By hand, so the wire carries `0.0` as contract.md §4.1 writes it (JSON.stringify prints `0`).
    const body = `{"agent_id":${jsonString(agentId)},"query":${jsonString(query)},"limit":${SEARCH_LIMIT},"min_confidence":0.0}`;
    return this.#call(
      'cold',
      orgId,
      agentId,
      'POST',
      `${this.#prefix}/v1/memories/search`,
      body,
      this.#coldTimeoutMs,
      signal,
    );
  }

  /** Starts the body-decoder thread at start-up. */
  warm(): void {
    this.#decoder.warm();
  }

  /** Sockets still busy after 1 s are destroyed, so shutdown cannot hang. */
  async close(): Promise<void> {
    if (this.#ownsDecoder) await this.#decoder.close();
    let timer: NodeJS.Timeout | undefined;
    const grace = new Promise<'late'>((resolve) => {
      timer = setTimeout(() => resolve('late'), 1000);
    });
    try {
      const outcome = await Promise.race([this.#pool.close().then(() => 'closed' as const), grace]);
      if (outcome === 'late') await this.#pool.destroy();
    } finally {
      clearTimeout(timer);
    }
  }

  async #call(
    branch: Branch,
    orgId: string,
    agentId: string,
    method: 'GET' | 'POST',
    path: string,
    body: string | undefined,
    timeoutMs: number,
    signal: AbortSignal,
  ): Promise<ValidatedHits> {
    const { limits, maxBytes } = branch === 'hot' ? this.#hot : this.#cold;
    const headers: Record<string, string> = { authorization: this.#auth, accept: 'application/json' };
    if (body !== undefined) headers['content-type'] = 'application/json';
    let payload: Uint8Array;
    let sink: BodySink | undefined;
    try {
      const res = await this.#pool.request({
        method,
        path,
        headers,
        body,
        signal,
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
      });
      if (res.statusCode >= 400) {
        // Drain a little so the keep-alive socket can be reused.
        res.body.dump({ limit: 64 * 1024 }).catch(() => {});
        throw BranchErrors.httpStatus(res.statusCode);
      }
      const declared = Number(res.headers['content-length']);
      if (Number.isFinite(declared) && declared > maxBytes) {
        this.#onBodyBytes?.(orgId, declared);
        res.body.destroy();
        throw BranchErrors.tooLarge();
      }
      sink = new BodySink(Number.isFinite(declared) ? declared : 0);
      for await (const chunk of res.body) {
        // Throwing destroys the body, which stops reading from the socket.
        if (sink.size + (chunk as Buffer).length > maxBytes) {
          this.#onBodyBytes?.(orgId, sink.size + (chunk as Buffer).length);
          throw BranchErrors.tooLarge();
        }
        sink.add(chunk as Buffer);
      }
      payload = sink.bytes();
      this.#onBodyBytes?.(orgId, payload.byteLength);
    } catch (err) {
      // A pooled buffer goes back; a fresh one is left to the GC rather than kept at its grown size.
      if (sink?.pooled) releaseMessageBuffer(sink.bytes());
      throw classify(branch, err, signal);
    }
    return this.#decoder.decode(payload, orgId, agentId, limits, signal);
  }
}

/** Collects a body into one transferable ArrayBuffer, copying each chunk as it arrives. */
class BodySink {
  #buf: Uint8Array;
  size = 0;
  readonly pooled: boolean;
  constructor(expected: number) {
    // Reuses a pooled buffer when one fits: fresh multi-MB buffers are external memory V8 repays with GC.
    const reused = MESSAGE_BUFFERS.acquire(expected);
    this.pooled = reused !== null;
    this.#buf = reused ?? new Uint8Array(Math.max(expected, 16 * 1024));
  }
  add(chunk: Uint8Array): void {
    if (this.size + chunk.length > this.#buf.length) {
      const grown = new Uint8Array(Math.max(this.#buf.length * 2, this.size + chunk.length));
      grown.set(this.#buf.subarray(0, this.size));
      this.#buf = grown;
    }
    this.#buf.set(chunk, this.size);
    this.size += chunk.length;
  }
  bytes(): Uint8Array {
    return this.#buf.subarray(0, this.size);
  }
}

/** By undici / errno `code`, never by message text. */
function classify(branch: Branch, err: unknown, signal: AbortSignal): unknown {
  // An abort belongs to the caller's deadline bookkeeping (retrieve reads the signal's reason).
  if (signal.aborted || isBranchError(err)) return err;
  const code =
    typeof (err as { code?: unknown })?.code === 'string' ? (err as { code: string }).code : 'unknown';
  switch (code) {
    case 'UND_ERR_CONNECT_TIMEOUT':
    case 'UND_ERR_HEADERS_TIMEOUT':
    case 'UND_ERR_BODY_TIMEOUT':
      return BranchErrors.httpTimeout(branch, err);
    case 'UND_ERR_RES_EXCEEDED_MAX_SIZE':
      return BranchErrors.tooLarge();
    default:
      return BranchErrors.httpTransport(code, err);
  }
}
