/**
 * Directive store on Redis (contract.md §4.2) through node-redis. A Redis that is down or slow must cost one
 * branch outcome, never a hung call or a crashed process, hence: no offline queue (a command while
 * disconnected fails at once), a bounded command queue, capped exponential reconnects, an `error`
 * listener (an unhandled `error` event would kill the process), and the request's AbortSignal on every GET.
 *
 * Half-open connections: a NAT or load balancer that forgets the flow leaves the socket
 * open while nothing comes back, and abandoned GETs never fail it. node-redis cannot see that by itself:
 * its command `timeout` and AbortSignals only cover commands not yet written, and its `pingInterval`
 * PING, once written, waits for a reply for ever (and no PING follows it). So a watchdog of ours sends a
 * PING every `pingIntervalMs` and, when one gets no reply within `pingTimeoutMs`, replaces the
 * connection (node-redis `destroy` + `connect`, which retries with the `reconnectStrategy` backoff):
 * a dead flow is gone within pingIntervalMs + pingTimeoutMs + one connect (≈ 5 s with the defaults; the
 * issue asks ≤ 10 s). node-redis's `socketTimeout` (3 ping intervals without any traffic) is the second
 * line, for a watchdog that could not write at all.
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

/** Options of {@link RedisDirectiveSource.connect}. */
export interface RedisDirectiveSourceOptions {
  /** `redis://…` or `rediss://…`; may carry credentials, so it is never logged. */
  url: string;
  /** TCP connect timeout, ms. Default 1000. */
  connectTimeoutMs?: number;
  /** How long {@link RedisDirectiveSource.connect} waits for the first connection, ms. Default 1000. */
  initialWaitMs?: number;
  /** Reconnect backoff ceiling, ms. Default 2000. */
  maxReconnectDelayMs?: number;
  /** Interval of the watchdog PING, ms. Default 2000. */
  pingIntervalMs?: number;
  /** A watchdog PING with no reply after this many ms replaces the connection. Default 3000. */
  pingTimeoutMs?: number;
  logger?: RetrievalLogger;
}

// Replies as Buffers so that the UTF-8 check of contract.md §4.2 sees the stored bytes, not a lossy decode.
const BUFFER_REPLIES = { [RESP_TYPES.BLOB_STRING]: Buffer } as const;

/** Error logs are rate-limited: a Redis outage emits one `error` per reconnect attempt. */
const ERROR_LOG_INTERVAL_MS = 10_000;
/**
 * node-redis's `commandsQueueMaxLength`: past it a command is refused with a plain `Error` that has no
 * class or code of its own, so a refusal is told apart by counting our own commands, not by its text.
 */
const COMMANDS_QUEUE_MAX = 10_000;

/** Class name for logs: node-redis errors leave `name` as plain `Error`. */
function errorName(err: unknown): string {
  if (!(err instanceof Error)) return 'unknown';
  return err.name !== 'Error' ? err.name : err.constructor.name;
}

/** {@link DirectiveSource} reading `{org_id}:directive:{agent_id}` from Redis. */
export class RedisDirectiveSource implements DirectiveSource {
  readonly #client: ReturnType<typeof createClient>;
  #closed = false;
  #watchdog: NodeJS.Timeout | undefined;
  /** GETs sent and not yet settled (with the watchdog's PING, all that is in node-redis's queue). */
  #inFlight = 0;

  private constructor(client: ReturnType<typeof createClient>) {
    this.#client = client;
  }

  /**
   * Creates the client and waits up to `initialWaitMs` for the first connection. It never rejects for an
   * unreachable Redis: the client keeps reconnecting in the background and reads fail (branch `error`)
   * until it is back.
   * @throws TypeError / node-redis errors only for a malformed URL.
   */
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
    /** Drops the connection and everything waiting on it (those reads fail), then reconnects. */
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
      // node-redis resets its decoder but keeps the socket and the commands waiting for replies, so
      // every later reply would go to the command sent before it: another agent's directive to this one.
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

  /** True while the connection is up. */
  get isReady(): boolean {
    return this.#client.isReady;
  }

  /**
   * contract.md §4.2 read. `signal` abandons the wait (the command is dropped from the queue or its reply ignored).
   * @returns the directive, or `null` for a missing key or empty content.
   * @throws BranchError `redis unavailable (…)` when disconnected or on a reply error; `bad directive: …`
   *   for a value breaking the envelope rules; the abort error when `signal` fires.
   */
  async get(orgId: string, agentId: string, signal: AbortSignal): Promise<Directive | null> {
    if (this.#closed) throw BranchErrors.unavailable('redis', 'closed');
    let raw: unknown;
    // A PING of the watchdog may hold one more place in the queue.
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

  /** Disconnects at once (pending reads reject) and stops reconnecting; idempotent. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#watchdog);
    try {
      this.#client.destroy();
    } catch {
      // Already closed by node-redis itself (reconnect strategy gave up): nothing left to release.
    }
  }
}

/** The code word of a Redis error reply (`WRONGTYPE`, `NOAUTH`, …), or null when `err` is not a reply. */
function replyCode(err: unknown): string | null {
  if (!(err instanceof ErrorReply)) return null;
  // Only the leading upper-case code: the rest of a reply may echo arguments.
  return /^[A-Z][A-Z_]*/.exec(err.message)?.[0] ?? 'reply';
}

/**
 * True for an error thrown while decoding the reply stream (an unknown RESP type byte, …). node-redis
 * raises those as plain `Error`s with no `code`, unlike its socket errors (own classes) and Node's
 * transport errors (`code`), so the class and the missing code tell them apart without reading messages.
 */
function isReplyStreamError(err: unknown): boolean {
  return (
    err instanceof Error &&
    Object.getPrototypeOf(err) === Error.prototype &&
    (err as { code?: unknown }).code === undefined
  );
}

/** node-redis errors do not set `name`, so they are told apart by class. */
function redisReason(err: unknown): string {
  if (err instanceof ClientOfflineError) return 'offline';
  if (err instanceof ClientClosedError || err instanceof DisconnectsClientError) return 'closed';
  if (err instanceof TimeoutError || err instanceof SocketTimeoutError) return 'timeout';
  return 'error';
}
