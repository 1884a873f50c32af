/**
 * Cross-replica invalidation of the PostgreSQL store's read cache: every content write transaction runs
 * `pg_notify('ibex_context', <schema>)`, delivered at commit to every replica LISTENing on a dedicated
 * connection. The feed's {@link PgChangeFeed.stamp} moves on each such notification (and on this process's
 * own commits at once), which empties the caches before their next read (read-cache.ts).
 *
 * While the LISTEN connection is down a notification may be missed, so the feed is not `live` and the
 * store reads through; it reconnects in the background and, once listening again, moves the stamp (anything
 * cached before the gap is dropped). LISTEN needs a session: through a transaction-pooling PgBouncer give
 * the feed a direct URL, or go without the cache.
 */
import pg from 'pg';
import { PG_EVENTS } from './pg-stats.js';

/** The NOTIFY channel; the payload is the schema, so stores of several schemas share one channel. */
export const CHANGE_CHANNEL = 'ibex_context';

/** Delay before reconnecting a lost LISTEN connection, ms. */
const RECONNECT_MS = 500;

/** The stamp source of a {@link ReadCache} over PostgreSQL reads. */
export class PgChangeFeed {
  readonly #url: string;
  readonly #schema: string;
  readonly #applicationName: string;
  #client: pg.Client | undefined;
  #stamp = 0;
  #live = false;
  #closed = false;
  #retry: NodeJS.Timeout | undefined;

  private constructor(url: string, schema: string, applicationName: string) {
    this.#url = url;
    this.#schema = schema;
    this.#applicationName = applicationName;
  }

  /**
   * Starts listening; resolves once the first LISTEN is in place or has failed (then it retries in the
   * background and the feed stays not `live` until it succeeds). Never throws.
   */
  static async start(url: string, schema: string, applicationName: string): Promise<PgChangeFeed> {
    const feed = new PgChangeFeed(url, schema, applicationName);
    await feed.#connect();
    return feed;
  }

  /** Whether notifications are being received now: only then may reads be served from a cache. */
  get live(): boolean {
    return this.#live;
  }

  /** Changes whenever the schema may have been written since the last call (never goes back). */
  stamp(): number {
    return this.#stamp;
  }

  /** Call after this process commits a write: its own caches must not wait for the notification. */
  noteWrite(): void {
    this.#stamp++;
  }

  async #connect(): Promise<void> {
    if (this.#closed) return;
    const client = new pg.Client({
      connectionString: this.#url,
      application_name: `${this.#applicationName}-listen`,
      connectionTimeoutMillis: 2000,
      keepAlive: true,
    });
    const lost = () => {
      if (this.#client !== client) return;
      this.#client = undefined;
      this.#live = false;
      this.#stamp++;
      client.end().catch(() => undefined);
      this.#schedule();
    };
    client.on('error', lost);
    client.on('end', lost);
    client.on('notification', (n) => {
      if (n.channel === CHANGE_CHANNEL && n.payload === this.#schema) {
        PG_EVENTS.cache_invalidations++;
        this.#stamp++;
      }
    });
    this.#client = client;
    try {
      PG_EVENTS.listen_connections_opened++;
      await client.connect();
      await client.query(`LISTEN ${CHANGE_CHANNEL}`);
      if (this.#client !== client || this.#closed) return;
      // Whatever was cached before this connection may predate a write it did not hear about.
      this.#stamp++;
      this.#live = true;
    } catch {
      lost();
    }
  }

  #schedule(): void {
    if (this.#closed || this.#retry) return;
    this.#retry = setTimeout(() => {
      this.#retry = undefined;
      void this.#connect();
    }, RECONNECT_MS);
    this.#retry.unref();
  }

  /** Stops listening; idempotent. */
  async close(): Promise<void> {
    this.#closed = true;
    this.#live = false;
    if (this.#retry) clearTimeout(this.#retry);
    const client = this.#client;
    this.#client = undefined;
    await client?.end().catch(() => undefined);
  }
}
