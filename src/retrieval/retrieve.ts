/**
 * The retrieval stage (contract.md §4): directive, hot and cold branches run concurrently under one wall, each
 * with its own timeout; whatever has not finished when the wall passes is aborted and recorded as
 * `timeout`/`outer_deadline`, while finished branches are kept. `retrieve` never throws for a
 * dependency failure and returns as soon as the wall (or the caller's signal) fires.
 */

import type { AbortSignalLike } from '../util/abort.js';
import { type Clock, monotonicNow, type Scheduler } from '../util/clock.js';
import type { BranchName, BranchOutcome, Directive, MemoryHit } from '../wire/types.js';
import { BranchRace, type Settled } from './branch-race.js';
import type { RetrievalSources, SourceHits } from './ports.js';
import {
  DEFAULT_MAX_MEMORY_CHARS,
  droppedDetail,
  type HitLimits,
  HOT_LIMIT,
  type RawHits,
  SEARCH_LIMIT,
  type ValidatedHits,
  validateHits,
} from './validate.js';

export type { DirectiveSource, MemorySource, RetrievalSources, SourceHits } from './ports.js';
export type { RawHits, ValidatedHits } from './validate.js';

/** One retrieval's inputs. `orgId`/`agentId` are UUIDs validated upstream (any case accepted). */
export interface RetrievalRequest {
  orgId: string;
  agentId: string;
  /** Raw query text; blank (after trim) skips cold search (`empty_query`). */
  query: string;
  /** `options.skip_hot_memories`: the hot source is not called. */
  skipHot: boolean;
  /** `options.skip_cold_memories`: the cold source is not called. */
  skipCold: boolean;
  /**
   * Most cold hits to ask for and keep (default {@link SEARCH_LIMIT}): sized to the call's budget by
   * the caller (ranking/candidate-limit.ts); sources without a sized search keep their own limit.
   */
  coldLimit?: number;
}

/** Timeouts in ms (contract.md §3, §4): the wall over all branches and each branch's own limit. */
export interface RetrievalTimeouts {
  /** Effective wall W, ms; already capped by the caller's deadline minus the CPU-stage reserve (§10). */
  wallMs: number;
  directiveMs: number;
  hotMs: number;
  coldMs: number;
}

/** What retrieval produced (contract.md §4). */
export interface RetrievalResult {
  /** `null` when missing, empty, or the branch failed/timed out. */
  directive: Directive | null;
  /** Validated hot hits of the request's org+agent, source order. */
  hot: MemoryHit[];
  /** Validated cold hits of the request's org+agent, source order. */
  cold: MemoryHit[];
  /** Always three, in the order directive, hot, cold. */
  branches: BranchOutcome[];
  /** Items dropped over hot+cold: wrong shape/values, or another org's/agent's. */
  dropped: { invalid: number; foreign: number };
  /**
   * What the bounds of contract.md §4.1 removed over hot+cold: hits whose content is over
   * `IBEX_CONTEXT_MAX_MEMORY_CHARS` (dropped, reason `oversize`), and items past the requested limit
   * (`ignored`: not validated, not scored).
   */
  bounded: { oversize: number; ignored: number };
}

function isRawHits(value: SourceHits): value is RawHits {
  return Array.isArray(value);
}

/**
 * Validations of frozen answers (the embedded store's cached hot reads, shared until a write): a frozen
 * answer cannot change, so it is validated once per org/agent/limits and the result, frozen too, is
 * reused (20 hits × 3 UUID checks were redone on every call).
 */
const validatedOnce = new WeakMap<RawHits, { key: string; hits: ValidatedHits }>();

function validateRaw(items: RawHits, orgId: string, agentId: string, limits: HitLimits): ValidatedHits {
  if (!Object.isFrozen(items)) return validateHits(items, orgId, agentId, limits);
  const key = `${orgId}|${agentId}|${limits.limit}|${limits.maxChars}`;
  const memo = validatedOnce.get(items);
  if (memo?.key === key) return memo.hits;
  const hits = validateHits(items, orgId, agentId, limits);
  for (const hit of hits.hits) Object.freeze(hit);
  Object.freeze(hits.hits);
  validatedOnce.set(items, { key, hits: Object.freeze(hits) });
  return hits;
}

function skipped(name: BranchName, detail: string): Settled<never> {
  return { outcome: { name, status: 'skipped', latency_ms: 0, detail }, value: undefined };
}

/**
 * Runs the three branches of contract.md §4 concurrently.
 *
 * - Wall `t.wallMs` (ms) over all branches; on expiry unfinished branches are aborted through their
 *   AbortSignal and recorded `timeout`/`outer_deadline`. Own timeouts give `directive_timeout`,
 *   `hot_timeout`, `cold_timeout`; the HTTP client's own timeouts `hot_http_timeout`/`cold_http_timeout`.
 * - Skip flags give `skipped` (`skip_hot_memories`/`skip_cold_memories`) and the source is not called;
 *   a blank query gives cold `skipped`/`empty_query`.
 * - Hits go through `validateHits`: invalid or foreign (other org/agent) items are dropped, counted in
 *   `dropped`, and named in the branch detail (`dropped 1 invalid, 1 foreign`).
 * - `signal` is the request's: when it aborts, every branch is aborted (`timeout`/`outer_deadline` when
 *   its reason is a TimeoutError, else `error`/`cancelled`).
 *
 * - Bounds (contract.md §4.1): only the first 20 hot / 10 cold items are looked at (the rest counted
 *   `ignored`); a hit longer than `maxMemoryChars` code points is dropped as `oversize`. Sources that
 *   validate themselves (HTTP) apply the same bounds before their hits reach this thread.
 *
 * Latencies are ms on `clock` (default the monotonic clock). Never throws for dependency failures; returns at
 * most about 1 ms after the wall (timer resolution), provided sources honour or ignore, but never block
 * on, their signal.
 * @param maxMemoryChars `IBEX_CONTEXT_MAX_MEMORY_CHARS`, code points (default 65,536).
 * @param clock the monotonic clock the wall and branch timeouts are on (tests inject a fake one).
 * @param timer where the wall and branch timeouts are armed: the call's one timer (`ctx.timer`, on the
 *   same clock); default a timer of the retrieval's own.
 */
export async function retrieve(
  sources: RetrievalSources,
  req: RetrievalRequest,
  t: RetrievalTimeouts,
  signal: AbortSignalLike,
  maxMemoryChars = DEFAULT_MAX_MEMORY_CHARS,
  clock: Clock = monotonicNow,
  timer?: Scheduler,
): Promise<RetrievalResult> {
  const orgId = req.orgId.toLowerCase();
  const agentId = req.agentId.toLowerCase();
  // One AbortController for the wall and all three branches, their deadlines on the call's timer.
  const race = new BranchRace(t.wallMs, signal, clock, timer);

  try {
    const dP = race.run('directive', t.directiveMs, (s) => sources.directive.get(orgId, agentId, s));
    const hP = req.skipHot
      ? skipped('hot', 'skip_hot_memories')
      : race.run('hot', t.hotMs, (s) => sources.memory.hot(orgId, agentId, s));
    const coldLimit = req.coldLimit ?? SEARCH_LIMIT;
    const cP = req.skipCold
      ? skipped('cold', 'skip_cold_memories')
      : req.query.trim() === ''
        ? skipped('cold', 'empty_query')
        : race.run('cold', t.coldMs, (s) => sources.memory.search(orgId, agentId, req.query, s, coldLimit));
    // Branches that answered synchronously are used as they are: no promise round for them.
    const d = dP instanceof Promise ? await dP : dP;
    const h = hP instanceof Promise ? await hP : hP;
    const c = cP instanceof Promise ? await cP : cP;
    const dropped = { invalid: 0, foreign: 0 };
    const bounded = { oversize: 0, ignored: 0 };
    const take = (settled: Settled<SourceHits>, limit: number): MemoryHit[] => {
      if (settled.outcome.status !== 'success' || settled.value === undefined) return [];
      const value = settled.value;
      const v = isRawHits(value)
        ? validateRaw(value, orgId, agentId, { limit, maxChars: maxMemoryChars })
        : value;
      dropped.invalid += v.invalid;
      dropped.foreign += v.foreign;
      bounded.oversize += v.oversize;
      bounded.ignored += v.ignored;
      settled.outcome.detail = droppedDetail(v.invalid, v.foreign, v.oversize, v.ignored);
      return v.hits;
    };
    const hot = take(h, HOT_LIMIT);
    const cold = take(c, coldLimit);
    if (d.outcome.status === 'success' && d.value == null) d.outcome.detail = 'no directive';
    return {
      directive: d.value ?? null,
      hot,
      cold,
      branches: [d.outcome, h.outcome, c.outcome],
      dropped,
      bounded,
    };
  } finally {
    race.finish();
  }
}
