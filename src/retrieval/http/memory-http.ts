/**
 * Memory service client over HTTP/1.1 (contract.md §4.1): one undici keep-alive pool per origin, no retries,
 * the request's AbortSignal wired into every call. Answers are bounded: the body is read
 * up to a cap derived from the requested `limit` and `IBEX_CONTEXT_MAX_MEMORY_CHARS` (beyond it the
 * connection is aborted and the branch fails `response too large`), items past `limit` are ignored and
 * counted, oversize memories dropped and counted, and a large body is decoded off the event loop
 * ({@link BodyDecoder}). The source returns hits already validated and scoped.
 */
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

/** Options of {@link HttpMemorySource}. */
export interface HttpMemorySourceOptions {
  /** Memory service origin, optionally with a path prefix; a trailing `/` is ignored. */
  baseUrl: string;
  /** Bearer token; secret: it is sent, never logged nor put in an error or detail. */
  token: string;
  /**
   * undici's own headers/body timeouts for the hot call, ms (surface as `hot_http_timeout`). undici runs
   * them on ~1 s resolution timers, so with the default 15/45 ms branch timeouts the branch timer fires
   * first; these are the safety net for long timeouts.
   */
  hotTimeoutMs: number;
  /** undici's own headers/body timeouts for the cold call, ms (surface as `cold_http_timeout`). */
  coldTimeoutMs: number;
  /** `IBEX_CONTEXT_MAX_MEMORY_CHARS`, code points: longer memories are dropped (`oversize`). Default 65,536. */
  maxMemoryChars?: number;
  /**
   * Lowers the body cap below the one derived from `limit` and `maxMemoryChars` ({@link maxBodyBytes}:
   * ~7.9 MB hot, ~4.0 MB cold by default), bytes. Tests use it; the service does not.
   */
  maxResponseBytes?: number;
  /** Where large bodies are decoded; default a {@link BodyDecoder} owned (and closed) by this source. */
  decoder?: BodyDecoder;
  /** Max sockets to the origin. Default 128. */
  connections?: number;
  /** TCP connect timeout, ms. Default 1000. */
  connectTimeoutMs?: number;
  /** Idle keep-alive socket lifetime, ms (the server's `Keep-Alive: timeout` hint wins when lower). Default 30000. */
  keepAliveTimeoutMs?: number;
  /**
   * Told the size of every body read, or refused for its size, bytes, with the org it was read for (the
   * routing of `RoutedMemorySource`, memory-http-thread.ts: an org with large bodies is read in the
   * memory-fetch thread).
   */
  onBodyBytes?: (orgId: string, bytes: number) => void;
}

type Branch = 'hot' | 'cold';

/**
 * The memory service's base URL, checked: an absolute http(s) URL (both memory clients build on it).
 * @throws TypeError for any other URL (or no URL).
 */
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

/** {@link MemorySource} over the memory service wire (contract.md §4.1). */
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

  /** @throws TypeError when `baseUrl` is not an absolute http(s) URL. */
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
      // Defence in depth: undici enforces the larger cap itself too, whatever path reads the body.
      maxResponseSize: Math.max(this.#hot.maxBytes, this.#cold.maxBytes),
    });
  }

  /**
   * `GET /v1/memories/hot?agent_id=<uuid>&limit=20&min_confidence=0.0` → the first 20 `results` items,
   * validated and scoped to `orgId`/`agentId`.
   */
  hot(orgId: string, agentId: string, signal: AbortSignal): Promise<ValidatedHits> {
    const path = `${this.#prefix}/v1/memories/hot?agent_id=${encodeURIComponent(agentId)}&limit=${HOT_LIMIT}&min_confidence=0.0`;
    return this.#call('hot', orgId, agentId, 'GET', path, undefined, this.#hotTimeoutMs, signal);
  }

  /**
   * `POST /v1/memories/search` with `{"agent_id","query","limit":10,"min_confidence":0.0}` → the first 10
   * items, validated and scoped.
   */
  search(orgId: string, agentId: string, query: string, signal: AbortSignal): Promise<ValidatedHits> {
    // Built by hand so the wire carries `0.0` exactly as contract.md §4.1 writes it (JSON.stringify prints `0`).
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

  /** Starts the body-decoder thread now (service start-up), so no branch pays for it. */
  warm(): void {
    this.#decoder.warm();
  }

  /** Closes the pool; sockets still busy after 1 s are destroyed so shutdown cannot hang. */
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
        // Drain a little so the keep-alive socket can be reused; undici destroys it past the limit.
        res.body.dump({ limit: 64 * 1024 }).catch(() => {});
        throw BranchErrors.httpStatus(res.statusCode);
      }
      const declared = Number(res.headers['content-length']);
      if (Number.isFinite(declared) && declared > maxBytes) {
        this.#onBodyBytes?.(orgId, declared);
        // Destroying the body aborts the connection: nothing more of it is read.
        res.body.destroy();
        throw BranchErrors.tooLarge();
      }
      sink = new BodySink(Number.isFinite(declared) ? declared : 0);
      for await (const chunk of res.body) {
        // Leaving the loop by throwing destroys the body, which stops reading from the socket.
        if (sink.size + (chunk as Buffer).length > maxBytes) {
          this.#onBodyBytes?.(orgId, sink.size + (chunk as Buffer).length);
          throw BranchErrors.tooLarge();
        }
        sink.add(chunk as Buffer);
      }
      payload = sink.bytes();
      this.#onBodyBytes?.(orgId, payload.byteLength);
    } catch (err) {
      // A pooled buffer abandoned half-way goes back; a fresh one (a chunked body grown past the cap, say)
      // is left to the GC rather than kept at whatever size it reached.
      if (sink?.pooled) releaseMessageBuffer(sink.bytes());
      throw classify(branch, err, signal);
    }
    return this.#decoder.decode(payload, orgId, agentId, limits, signal);
  }
}

/**
 * Collects a body into one ArrayBuffer of its own (undici's chunks may be views on shared slabs), so that a
 * large body can be transferred to the decoder thread. Each chunk is copied as it arrives: with a declared
 * length the buffer is allocated once, so no single step copies more than a chunk (no multi-MB memcpy
 * stalling the event loop at the end); a chunked body grows by doubling.
 */
class BodySink {
  #buf: Uint8Array;
  size = 0;
  /** Whether the buffer came from the process's message pool (then it must go back, read or not). */
  readonly pooled: boolean;
  constructor(expected: number) {
    // A large body reuses a buffer of the process's message pool when one fits (fresh multi-MB
    // buffers are new external memory, which V8 repays with collections on the event loop); the decoder
    // thread hands it back after decoding.
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
  /** The body: a view of exactly `size` bytes on a buffer nothing else references. */
  bytes(): Uint8Array {
    return this.#buf.subarray(0, this.size);
  }
}

/** Maps transport errors to branch errors by undici / errno `code`, never by message text. */
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
