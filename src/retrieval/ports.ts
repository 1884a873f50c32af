/** Retrieval ports: read by retrieve.ts, implemented by each backend; backends never import each other. */
import type { Directive } from '../wire/types.js';
import type { FeedbackStore } from './feedback.js';
import type { DirectiveRow, MemoryRow } from './store-rows.js';
import type { RawHits, ValidatedHits } from './validate.js';

/** Raw items (validated by retrieve) or hits the source already validated and bounded. */
export type SourceHits = RawHits | ValidatedHits;

export interface DirectiveSource {
  /** Directive after contract.md §4.2, or `null`; @throws BranchError (bad envelope, store unavailable). */
  get(orgId: string, agentId: string, signal: AbortSignal): Directive | null | Promise<Directive | null>;
  close(): Promise<void>;
}

export interface MemorySource {
  /** Raw items (contract.md §4.1) or already validated hits. */
  hot(orgId: string, agentId: string, signal: AbortSignal): SourceHits | Promise<SourceHits>;
  /** At most `limit` items (default 10). */
  search(
    orgId: string,
    agentId: string,
    query: string,
    signal: AbortSignal,
    limit?: number,
  ): SourceHits | Promise<SourceHits>;
  close(): Promise<void>;
}

export interface StoreReadStats {
  queueSize: number;
  /** Refused at once because the queue was full (cold `error`, code `busy`). */
  busyRejections: number;
}

export interface MemoryThreadStats {
  threadReads: number;
  heavyOrgs: number;
}

/** A stored agent and queries made of words of its own memories: what the start-up warm-up searches. */
export interface WarmTenant {
  orgId: string;
  agentId: string;
  queries: string[];
}

export interface RetrievalSources {
  directive: DirectiveSource;
  memory: MemorySource;
  /** Closes every source and the embedded store; idempotent. */
  close(): Promise<void>;
  kind: { memory: 'http' | 'postgres' | 'embedded'; directive: 'redis' | 'postgres' | 'embedded' };
  storeReads?: () => StoreReadStats;
  memoryThread?: () => MemoryThreadStats;
  /** Absent in front of a memory service (contract.md §2). */
  feedback?: FeedbackStore;
  /**
   * Up to `agents` recently written agents of the project's own store, each with up to `queries` queries
   * (see {@link WarmTenant}); absent in front of a memory service.
   */
  warmTenants?: (agents: number, queries: number) => Promise<WarmTenant[]>;
  /**
   * A number that changes when memories are written, read without I/O, for the watch that warms on agents
   * an import adds while the service runs: the embedded store's highest row key (`EmbeddedStore.rowStamp`),
   * or the PostgreSQL writes this replica has heard of (`PgStore.writeStamp`). Absent in front of a memory
   * service and on PostgreSQL without its change feed.
   */
  rowStamp?: () => number;
}

/** Where a bulk import writes: the embedded store or PostgreSQL. */
export interface AgentWriter {
  /**
   * Replaces one org+agent's memories (and directive) in one transaction: idempotent, never half-visible.
   * @throws IbexError `IBEX_ERR_INVALID_ARGUMENT` for a bad or foreign row (nothing written).
   */
  replaceAgent(
    orgId: string,
    agentId: string,
    rows: readonly MemoryRow[],
    directive?: DirectiveRow,
  ): number | Promise<number>;
  /** After the last replaceAgent of an import (FTS merge / ANALYZE). */
  finishImport(): void | Promise<void>;
}
