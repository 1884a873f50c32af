/**
 * Connection and read counters of every PostgreSQL store in this process, read by the metrics at scrape
 * time (`ibex_context_postgres_events_total`). Process-wide like the other scrape-time counters: a
 * replica opens one store, and tests read differences.
 */

/** What the PostgreSQL stores of this process have done since it started. */
export interface PgEventCounts {
  /** Connections opened by the read/write pools (each is a backend start-up on the server). */
  connections_opened: number;
  /** Pool connections closed: broken by the server, idle above the minimum, or at close. */
  connections_closed: number;
  /** Reads whose branch gave up (client-side timer or abort) while their statement ran on: the statement
   * was left to end under the server-side statement_timeout, and its connection went back to the pool. */
  reads_abandoned: number;
  /** Reads run a second time on another connection after a connection-level error. */
  reads_retried: number;
  /** Cancel requests sent: only for an abandoned statement still running well past the server-side bound
   * (a server without statement_timeout); each costs a short-lived connection. */
  cancels_sent: number;
  /** Change-feed (LISTEN) connections opened, the first and every reconnect. */
  listen_connections_opened: number;
  /** Change notifications heard for the store's schema: each empties that store's hot and directive caches. */
  cache_invalidations: number;
  /** Write transactions that sent no notification (inclusion counts): no read cache was emptied. */
  unannounced_writes: number;
}

/** The counters; incremented by pg-pool.ts, pg-store.ts and pg-change-feed.ts only. */
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

/** A copy of the counters now (tests take differences). */
export function pgEvents(): PgEventCounts {
  return { ...PG_EVENTS };
}
