/**
 * Cross-replica invalidation of the PostgreSQL read cache through LISTEN/NOTIFY (docs/postgres.md). While
 * the LISTEN connection is down notifications may be missed, so the feed is not `live` and reads go through.
 */
import pg from 'pg';
import { PG_EVENTS } from './pg-stats.js';

/** The payload is the schema, so several schemas share one channel. */
export const CHANGE_CHANNEL = 'ibex_context';

const RECONNECT_MS = 500;

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

  /** Resolves once the first LISTEN is in place or failed (then retries in the background). Never throws. */
  static async start(url: string, schema: string, applicationName: string): Promise<PgChangeFeed> {
    const feed = new PgChangeFeed(url, schema, applicationName);
    await feed.#connect();
    return feed;
  }

  /** Only while notifications are received may reads be served from a cache. */
  get live(): boolean {
    return this.#live;
  }

  stamp(): number {
    return this.#stamp;
  }

  /** Call after this process commits a write, which must not wait for its notification. */
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
      // Anything cached before this connection may predate a write it did not hear about.
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

  async close(): Promise<void> {
    this.#closed = true;
    this.#live = false;
    if (this.#retry) clearTimeout(this.#retry);
    const client = this.#client;
    this.#client = undefined;
    await client?.end().catch(() => undefined);
  }
}
