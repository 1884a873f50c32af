/**
 * The retrieval ports: what the retrieval stage (retrieve.ts) and the service read through, and what each
 * backend (redis/, http/, sqlite/, postgres/) implements. Backends import this file, never each other.
 */
import type { Directive } from '../wire/types.js';
import type { FeedbackStore } from './feedback.js';
import type { DirectiveRow, MemoryRow } from './store-rows.js';
import type { RawHits, ValidatedHits } from './validate.js';

/** What a memory source answers: raw items (validated here) or hits it already validated and bounded. */
export type SourceHits = RawHits | ValidatedHits;

/** Where directives come from (Redis or the embedded store). */
export interface DirectiveSource {
  /**
   * @param signal aborts when the branch must stop (own timeout, wall, caller); the read is abandoned.
   * @returns the directive after the contract.md §4.2 rules, or `null` (missing key / empty content).
   * @throws BranchError for a bad envelope or an unavailable store; any error becomes branch `error`.
   */
  get(orgId: string, agentId: string, signal: AbortSignal): Directive | null | Promise<Directive | null>;
  close(): Promise<void>;
}

/** Where memories come from (memory service over HTTP, or the embedded store). */
export interface MemorySource {
  /**
   * Hot memories of the agent: raw items (contract.md §4.1 item shape; retrieve keeps the first 20 and validates
   * them) or hits the source validated, scoped and bounded itself (the HTTP source).
   * @throws BranchError (`memory service HTTP 503`, `invalid JSON`, `bad shape: …`, `response too large`, …).
   */
  hot(orgId: string, agentId: string, signal: AbortSignal): SourceHits | Promise<SourceHits>;
  /**
   * Cold search for `query`; as {@link MemorySource.hot}, first `limit` items (default 10; a source may
   * answer fewer than asked for, never more).
   */
  search(
    orgId: string,
    agentId: string,
    query: string,
    signal: AbortSignal,
    limit?: number,
  ): SourceHits | Promise<SourceHits>;
  close(): Promise<void>;
}

/** Store-read figures for metrics. */
export interface StoreReadStats {
  /** Reads waiting for a store-read thread. */
  queueSize: number;
  /** Reads refused at once because that queue was full (cold branch `error`, code `busy`). */
  busyRejections: number;
}

/** What {@link RoutedMemorySource.stats} reports (metrics). */
export interface MemoryThreadStats {
  /** Reads sent to the memory-fetch thread since start. */
  threadReads: number;
  /** Orgs whose reads go to the thread now. */
  heavyOrgs: number;
}

/** The sources one service instance reads from. */
export interface RetrievalSources {
  directive: DirectiveSource;
  memory: MemorySource;
  /** Closes every source and the embedded store; idempotent. */
  close(): Promise<void>;
  kind: { memory: 'http' | 'postgres' | 'embedded'; directive: 'redis' | 'postgres' | 'embedded' };
  /** Store-read thread figures for metrics; absent without store-read threads. */
  storeReads?: () => StoreReadStats;
  /** Memory-fetch thread figures for metrics; absent unless a memory service is read through it. */
  memoryThread?: () => MemoryThreadStats;
  /**
   * Feedback and inclusion writes of the store serving memories (embedded or PostgreSQL); absent in front
   * of a memory service, which has no such operation (contract.md §2).
   */
  feedback?: FeedbackStore;
}

/**
 * Where a bulk import (the LoCoMo importer) writes: the embedded store or PostgreSQL, chosen by whoever
 * composes the import (the CLI). The importer only converts its data into rows and hands them over.
 */
export interface AgentWriter {
  /**
   * Replaces everything the store holds for one org+agent (its memories, and its directive when given)
   * in one transaction: re-running an import is idempotent and readers never see a half-written agent.
   * @param rows memories of that org+agent only (`created_at` epoch ms, confidence in [0,1]).
   * @returns how many memories were written.
   * @throws IbexError `IBEX_ERR_INVALID_ARGUMENT` for a non-UUID id, a confidence outside [0,1], a
   *   non-finite `created_at` or a row of another org/agent (nothing written); the store's error when the
   *   write fails (that agent rolled back).
   */
  replaceAgent(
    orgId: string,
    agentId: string,
    rows: readonly MemoryRow[],
    directive?: DirectiveRow,
  ): number | Promise<number>;
  /**
   * Called once after the last {@link AgentWriter.replaceAgent} of an import, to leave the store fast
   * to read (the embedded store merges its full-text index, PostgreSQL refreshes its planner statistics).
   * @throws the store's error.
   */
  finishImport(): void | Promise<void>;
}
