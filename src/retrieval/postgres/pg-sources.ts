/** Memory and directive sources on the PostgreSQL store (contract.md §4.3). */
import type { Directive } from '../../wire/types.js';
import { BranchError, BranchErrors } from '../branch-error.js';
import { parseDirectiveObject } from '../directive.js';
import type { DirectiveSource, MemorySource } from '../ports.js';
import type { RawHits, ValidatedHits } from '../validate.js';
import { PgStatementTimeout } from './pg-pool.js';
import type { PgStore } from './pg-store.js';

/** Branch times, ms; a statement never gets more than `wallMs`. */
export interface PgBranchTimes {
  directiveMs: number;
  hotMs: number;
  coldMs: number;
  wallMs: number;
}

function failure(branch: 'directive' | 'hot' | 'cold', err: unknown, signal: AbortSignal): never {
  if (signal.aborted) throw signal.reason;
  if (err instanceof BranchError) throw err;
  if (err instanceof PgStatementTimeout)
    throw new BranchError('IBEX_RETRIEVAL_UNAVAILABLE', 'timeout', `${branch}_timeout`, err);
  const code = (err as { code?: unknown })?.code;
  // Codes only: a message may quote memory text.
  throw BranchErrors.unavailable('postgres', typeof code === 'string' ? code : 'error', err);
}

/** Hot (limit 20) and search (limit 10), size-capped in SQL. */
export class PgMemorySource implements MemorySource {
  readonly #store: PgStore;
  readonly #times: PgBranchTimes;
  readonly #maxChars: number;
  readonly #neighbours: number;
  /** @param neighbours `IBEX_CONTEXT_NEIGHBOUR_HITS` (retrieval/neighbours.ts); default 0. */
  constructor(store: PgStore, times: PgBranchTimes, maxChars: number, neighbours = 0) {
    this.#store = store;
    this.#times = times;
    this.#maxChars = maxChars;
    this.#neighbours = neighbours;
  }
  /** @throws BranchError `hot_timeout` (statement_timeout) or `postgres unavailable (<code>)`. */
  async hot(orgId: string, agentId: string, signal: AbortSignal): Promise<RawHits> {
    try {
      return await this.#store.hot(orgId, agentId, {
        timeoutMs: Math.min(this.#times.hotMs, this.#times.wallMs),
        signal,
        maxChars: this.#maxChars,
      });
    } catch (err) {
      failure('hot', err, signal);
    }
  }
  /** @throws as {@link PgMemorySource.hot}, with `cold_timeout`. */
  async search(
    orgId: string,
    agentId: string,
    query: string,
    signal: AbortSignal,
    limit?: number,
  ): Promise<ValidatedHits> {
    try {
      return await this.#store.searchHits(orgId, agentId, query, {
        timeoutMs: Math.min(this.#times.coldMs, this.#times.wallMs),
        signal,
        maxChars: this.#maxChars,
        limit,
        neighbours: this.#neighbours,
      });
    } catch (err) {
      failure('cold', err, signal);
    }
  }
  async close(): Promise<void> {}
}

/** {@link DirectiveSource} on a {@link PgStore}, with the same contract.md §4.2 rules as Redis values. */
export class PgDirectiveSource implements DirectiveSource {
  readonly #store: PgStore;
  readonly #times: PgBranchTimes;
  constructor(store: PgStore, times: PgBranchTimes) {
    this.#store = store;
    this.#times = times;
  }
  /** @throws BranchError `bad directive: …`, `directive_timeout` or `postgres unavailable (<code>)`. */
  async get(orgId: string, agentId: string, signal: AbortSignal): Promise<Directive | null> {
    let envelope: Awaited<ReturnType<PgStore['getDirective']>>;
    try {
      envelope = await this.#store.getDirective(orgId, agentId, {
        timeoutMs: Math.min(this.#times.directiveMs, this.#times.wallMs),
        signal,
      });
    } catch (err) {
      failure('directive', err, signal);
    }
    return envelope === null ? null : parseDirectiveObject(envelope);
  }
  async close(): Promise<void> {}
}
