/**
 * Memory service client over HTTP/1.1 (SPEC §4.1): one undici keep-alive pool per origin, no retries,
 * a capped response body, the request's AbortSignal wired into every call.
 */
import { Pool } from 'undici';
import { BranchErrors, isBranchError } from './branch-error.js';
import type { MemorySource } from './retrieve.js';
import { HOT_LIMIT, type RawHits, SEARCH_LIMIT, unwrapMemoryResponse } from './validate.js';

/** Default cap on a response body: 8 MiB, far above 20 hits, far below what could hurt the process. */
export const DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024;

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
  /** Response bodies beyond this many bytes fail the branch with `response too large`. Default 8 MiB. */
  maxResponseBytes?: number;
  /** Max sockets to the origin. Default 128. */
  connections?: number;
  /** TCP connect timeout, ms. Default 1000. */
  connectTimeoutMs?: number;
  /** Idle keep-alive socket lifetime, ms (the server's `Keep-Alive: timeout` hint wins when lower). Default 30000. */
  keepAliveTimeoutMs?: number;
}

type Branch = 'hot' | 'cold';

function jsonString(value: string): string {
  return JSON.stringify(value);
}

/** {@link MemorySource} over the memory service wire (SPEC §4.1). */
export class HttpMemorySource implements MemorySource {
  readonly #pool: Pool;
  readonly #prefix: string;
  readonly #auth: string;
  readonly #hotTimeoutMs: number;
  readonly #coldTimeoutMs: number;
  readonly #maxBytes: number;

  /** @throws TypeError when `baseUrl` is not an absolute http(s) URL. */
  constructor(options: HttpMemorySourceOptions) {
    const url = new URL(options.baseUrl);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw new TypeError('memory base URL must be http or https');
    }
    this.#prefix = url.pathname.replace(/\/+$/, '');
    this.#auth = `Bearer ${options.token}`;
    this.#hotTimeoutMs = options.hotTimeoutMs;
    this.#coldTimeoutMs = options.coldTimeoutMs;
    this.#maxBytes = options.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES;
    this.#pool = new Pool(url.origin, {
      connections: options.connections ?? 128,
      pipelining: 1,
      connectTimeout: options.connectTimeoutMs ?? 1000,
      keepAliveTimeout: options.keepAliveTimeoutMs ?? 30_000,
      // Defence in depth: undici enforces the cap itself too, whatever path reads the body.
      maxResponseSize: this.#maxBytes,
    });
  }

  /** `GET /v1/memories/hot?agent_id=<uuid>&limit=20&min_confidence=0.0` → the `results` items. */
  hot(_orgId: string, agentId: string, signal: AbortSignal): Promise<RawHits> {
    const path = `${this.#prefix}/v1/memories/hot?agent_id=${encodeURIComponent(agentId)}&limit=${HOT_LIMIT}&min_confidence=0.0`;
    return this.#call('hot', 'GET', path, undefined, this.#hotTimeoutMs, signal);
  }

  /** `POST /v1/memories/search` with `{"agent_id","query","limit":10,"min_confidence":0.0}`. */
  search(_orgId: string, agentId: string, query: string, signal: AbortSignal): Promise<RawHits> {
    // Built by hand so the wire carries `0.0` exactly as SPEC §4.1 writes it (JSON.stringify prints `0`).
    const body = `{"agent_id":${jsonString(agentId)},"query":${jsonString(query)},"limit":${SEARCH_LIMIT},"min_confidence":0.0}`;
    return this.#call(
      'cold',
      'POST',
      `${this.#prefix}/v1/memories/search`,
      body,
      this.#coldTimeoutMs,
      signal,
    );
  }

  /** Closes the pool; sockets still busy after 1 s are destroyed so shutdown cannot hang. */
  async close(): Promise<void> {
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
    method: 'GET' | 'POST',
    path: string,
    body: string | undefined,
    timeoutMs: number,
    signal: AbortSignal,
  ): Promise<RawHits> {
    const headers: Record<string, string> = { authorization: this.#auth, accept: 'application/json' };
    if (body !== undefined) headers['content-type'] = 'application/json';
    let text: string;
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
      if (Number.isFinite(declared) && declared > this.#maxBytes) {
        res.body.destroy();
        throw BranchErrors.tooLarge();
      }
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const chunk of res.body) {
        size += (chunk as Buffer).length;
        // Leaving the loop by throwing destroys the body, which stops reading from the socket.
        if (size > this.#maxBytes) throw BranchErrors.tooLarge();
        chunks.push(chunk as Buffer);
      }
      text = chunks.length === 1 ? chunks[0]!.toString('utf8') : Buffer.concat(chunks, size).toString('utf8');
    } catch (err) {
      throw classify(branch, err, signal);
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch (err) {
      throw BranchErrors.invalidJson(err);
    }
    return unwrapMemoryResponse(parsed);
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
