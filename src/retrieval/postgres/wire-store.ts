/** The PostgreSQL store as the dev memory server's backend (no org on the wire: every org's rows). */
import type { ReadOptions, StoreHit } from '../store-rows.js';
import { PgStore } from './pg-store.js';

/** A backstop, ms; the context service's HTTP timeouts come first. */
const WIRE_STATEMENT_TIMEOUT_MS = 5000;

export interface WireStore {
  hot(orgId: null, agentId: string, options: ReadOptions): StoreHit[] | Promise<StoreHit[]>;
  search(orgId: null, agentId: string, query: string, options: ReadOptions): StoreHit[] | Promise<StoreHit[]>;
  close(): void | Promise<void>;
}

/** Opens (and migrates) the store for the memory wire; @throws the connection or migration error. */
export async function openPgWireStore(pg: { url: string; schema: string }): Promise<WireStore> {
  const store = await PgStore.open({
    url: pg.url,
    schema: pg.schema,
    applicationName: 'ibex-memory-server',
    statementTimeoutMs: WIRE_STATEMENT_TIMEOUT_MS,
  });
  return {
    hot: (_org, agentId, o) => store.hot(null, agentId, { ...o, timeoutMs: WIRE_STATEMENT_TIMEOUT_MS }),
    search: (_org, agentId, query, o) =>
      store.search(null, agentId, query, { ...o, timeoutMs: WIRE_STATEMENT_TIMEOUT_MS }),
    close: () => store.close(),
  };
}
