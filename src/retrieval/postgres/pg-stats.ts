/** Process-wide PostgreSQL counters for `ibex_context_postgres_events_total` (docs/postgres.md). */

export interface PgEventCounts {
  /** Each is a backend start-up on the server. */
  connections_opened: number;
  connections_closed: number;
  /** Branch gave up; the statement was left to the server's statement_timeout. */
  reads_abandoned: number;
  reads_retried: number;
  cancels_sent: number;
  listen_connections_opened: number;
  /** Each empties that store's hot and directive caches. */
  cache_invalidations: number;
  /** Inclusion-count writes, which notify nobody. */
  unannounced_writes: number;
}

/** Incremented by pg-pool.ts, pg-store.ts and pg-change-feed.ts only. */
export const PG_EVENTS: PgEventCounts = {
  connections_opened: 0,
  connections_closed: 0,
  reads_abandoned: 0,
  reads_retried: 0,
  cancels_sent: 0,
  listen_connections_opened: 0,
  cache_invalidations: 0,
  unannounced_writes: 0,
};

export function pgEvents(): PgEventCounts {
  return { ...PG_EVENTS };
}
