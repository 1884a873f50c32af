/**
 * Directive store on Redis (contract.md §4.2). A down or slow Redis costs one branch outcome, never a hung
 * call or a crashed process: no offline queue, a bounded command queue, capped reconnects, an `error`
 * listener, and a PING watchdog for half-open connections (docs/design/retrieval.md).
 */
import {
  ClientClosedError,
  ClientOfflineError,
  createClient,
  DisconnectsClientError,
  ErrorReply,
  RESP_TYPES,
  SocketTimeoutError,
  TimeoutError,
} from 'redis';
import type { Directive } from '../../wire/types.js';
import { BranchErrors } from '../branch-error.js';
import { directiveKey, parseDirectiveValue } from '../directive.js';
import { type RetrievalLogger, silentLogger } from '../logger.js';
import type { DirectiveSource } from '../ports.js';

export interface RedisDirectiveSourceOptions {
  /** May carry credentials: never logged. */
  url: string;
  connectTimeoutMs?: number;
  initialWaitMs?: number;
  maxReconnectDelayMs?: number;
  pingIntervalMs?: number;
  pingTimeoutMs?: number;
  logger?: RetrievalLogger;
}

// Buffers, so the UTF-8 check of contract.md §4.2 sees the stored bytes.
const BUFFER_REPLIES = { [RESP_TYPES.BLOB_STRING]: Buffer } as const;

/** An outage emits one `error` per reconnect attempt. */
const ERROR_LOG_INTERVAL_MS = 10_000;
/** Past it node-redis refuses with a plain `Error`, so refusals are told by counting our commands. */
const COMMANDS_QUEUE_MAX = 10_000;

function errorName(err: unknown): string {
  if (!(err instanceof Error)) return 'unknown';
  return err.name !== 'Error' ? err.name : err.constructor.name;
}

export class RedisDirectiveSource implements DirectiveSource {
  readonly #client: ReturnType<typeof createClient>;
  #closed = false;
  #watchdog: NodeJS.Timeout | undefined;
  #inFlight = 0;

  private constructor(client: ReturnType<typeof createClient>) {
    this.#client = client;
  }

  /** Never rejects for an unreachable Redis (it keeps reconnecting); @throws only for a malformed URL. */
  static async connect(options: RedisDirectiveSourceOptions): Promise<RedisDirectiveSource> {
    const logger = options.logger ?? silentLogger;
    const maxDelay = options.maxReconnectDelayMs ?? 2000;
    const pingInterval = options.pingIntervalMs ?? 2000;
    let lastLog = Number.NEGATIVE_INFINITY;
    const client = createClient({
      url: options.url,
      disableOfflineQueue: true,
      commandsQueueMaxLength: COMMANDS_QUEUE_MAX,
      socket: {
        connectTimeout: options.connectTimeoutMs ?? 1000,
        socketTimeout: 3 * pingInterval,
        // Jittered so a fleet restarting together does not reconnect in lockstep.
        reconnectStrategy: (retries) =>
          Math.min(maxDelay, 50 * 2 ** Math.min(retries, 10)) + Math.random() * 50,
      },
    });
    let resyncing = false;
    const replaceConnection = () => {
      if (resyncing) return;
      resyncing = true;
      try {
        client.destroy();
      } catch {
        // already closed
      }
      if (source.#closed) {
        resyncing = false;
        return;
      }
      client
        .connect()
        .catch(() => {})
        .finally(() => {
          resyncing = false;
        });
    };
    client.on('error', (err: unknown) => {
      // node-redis resets its decoder but keeps the socket and the waiting commands, so later replies
      // would go to the wrong command: another agent's directive to this one.
      if (isReplyStreamError(err)) replaceConnection();
      const now = performance.now();
      if (now - lastLog < ERROR_LOG_INTERVAL_MS) return;
      lastLog = now;
      logger.warn(
        { err_name: errorName(err), err_code: (err as { code?: unknown })?.code },
        'directive store (redis) error; reads fail until it reconnects',
      );
    });
    client.on('ready', () => logger.info({}, 'directive store (redis) ready'));
    const source = new RedisDirectiveSource(client);
    const pingTimeout = options.pingTimeoutMs ?? 3000;
    let pinging = false;
    source.#watchdog = setInterval(() => {
      if (pinging || resyncing || !client.isReady) return;
      pinging = true;
      const timer = setTimeout(() => {
        logger.warn(
          { ping_timeout_ms: pingTimeout },
          'directive store (redis) PING unanswered; reconnecting',
        );
        replaceConnection();
      }, pingTimeout);
      client
        .sendCommand(['PING'])
        .catch(() => {})
        .finally(() => {
          clearTimeout(timer);
          pinging = false;
        });
    }, pingInterval);
    source.#watchdog.unref();
    const first = client.connect().then(
      () => true,
      () => false,
    );
    let timer: NodeJS.Timeout | undefined;
    const waited = new Promise<false>((resolve) => {
      timer = setTimeout(() => resolve(false), options.initialWaitMs ?? 1000);
    });
    const ready = await Promise.race([first, waited]);
    clearTimeout(timer);
    if (!ready)
      logger.warn({}, 'directive store (redis) not reachable at start-up; retrying in the background');
    return source;
  }

  get isReady(): boolean {
    return this.#client.isReady;
  }

  /** contract.md §4.2; @throws BranchError `redis unavailable (…)`, `redis error (…)`, `bad directive: …`. */
  async get(orgId: string, agentId: string, signal: AbortSignal): Promise<Directive | null> {
    if (this.#closed) throw BranchErrors.unavailable('redis', 'closed');
    let raw: unknown;
    const queueFull = this.#inFlight >= COMMANDS_QUEUE_MAX - 1;
    this.#inFlight++;
    try {
      raw = await this.#client.sendCommand(['GET', directiveKey(orgId, agentId)], {
        abortSignal: signal,
        typeMapping: BUFFER_REPLIES,
      });
    } catch (err) {
      if (signal.aborted) throw err;
      const code = replyCode(err);
      if (code !== null) throw BranchErrors.storeReply('redis', code, err);
      const reason = redisReason(err);
      throw BranchErrors.unavailable('redis', reason === 'error' && queueFull ? 'queue full' : reason, err);
    } finally {
      this.#inFlight--;
    }
    if (raw === null || raw === undefined) return null;
    if (!(raw instanceof Uint8Array) && typeof raw !== 'string') {
      throw BranchErrors.badDirective('not a string value');
    }
    return parseDirectiveValue(raw);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#watchdog);
    try {
      this.#client.destroy();
    } catch {
      // Already closed by node-redis itself.
    }
  }
}

function replyCode(err: unknown): string | null {
  if (!(err instanceof ErrorReply)) return null;
  // Only the leading code: the rest of a reply may echo arguments.
  return /^[A-Z][A-Z_]*/.exec(err.message)?.[0] ?? 'reply';
}

/** A reply-stream decode error: a plain `Error` without `code`, unlike transport errors. */
function isReplyStreamError(err: unknown): boolean {
  return (
    err instanceof Error &&
    Object.getPrototypeOf(err) === Error.prototype &&
    (err as { code?: unknown }).code === undefined
  );
}

function redisReason(err: unknown): string {
  if (err instanceof ClientOfflineError) return 'offline';
  if (err instanceof ClientClosedError || err instanceof DisconnectsClientError) return 'closed';
  if (err instanceof TimeoutError || err instanceof SocketTimeoutError) return 'timeout';
  return 'error';
}
