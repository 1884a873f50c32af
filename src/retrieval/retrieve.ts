/** The retrieval stage (contract.md §4); never throws for a dependency failure. */

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

/** `orgId`/`agentId` are UUIDs validated upstream (any case). */
export interface RetrievalRequest {
  orgId: string;
  agentId: string;
  query: string;
  skipHot: boolean;
  skipCold: boolean;
  /** Most cold hits to ask for and keep (default {@link SEARCH_LIMIT}); see ranking/candidate-limit.ts. */
  coldLimit?: number;
  /** Told as soon as the directive branch ends, before the memory branches do (an answer at D keeps it). */
  onDirective?: (directive: Directive | null, outcome: BranchOutcome) => void;
}

/** ms (contract.md §3, §4). */
export interface RetrievalTimeouts {
  /** Already capped by the deadline minus the CPU-stage reserve (§10). */
  wallMs: number;
  directiveMs: number;
  hotMs: number;
  coldMs: number;
}

export interface RetrievalResult {
  directive: Directive | null;
  hot: MemoryHit[];
  cold: MemoryHit[];
  branches: BranchOutcome[];
  dropped: { invalid: number; foreign: number };
  /** Dropped over `IBEX_CONTEXT_MAX_MEMORY_CHARS` (`oversize`) and items past the limit (`ignored`). */
  bounded: { oversize: number; ignored: number };
}

function isRawHits(value: SourceHits): value is RawHits {
  return Array.isArray(value);
}

/** A frozen answer (cached hot read) cannot change, so its validation is done once and reused. */
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
 * Runs the three branches of contract.md §4: unfinished ones are aborted at the wall, finished ones kept.
 * Returns about 1 ms after the wall at the latest, provided sources never block on their signal.
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
  const race = new BranchRace(t.wallMs, signal, clock, timer);

  try {
    const dP = race.run('directive', t.directiveMs, (s) => sources.directive.get(orgId, agentId, s));
    const onDirective = req.onDirective;
    if (onDirective) {
      const tell = (d: Settled<Directive | null>) =>
        onDirective(d.value ?? null, {
          ...d.outcome,
          detail: d.outcome.status === 'success' && d.value == null ? 'no directive' : d.outcome.detail,
        });
      if (dP instanceof Promise) void dP.then(tell);
      else tell(dP);
    }
    const hP = req.skipHot
      ? skipped('hot', 'skip_hot_memories')
      : race.run('hot', t.hotMs, (s) => sources.memory.hot(orgId, agentId, s));
    const coldLimit = req.coldLimit ?? SEARCH_LIMIT;
    const cP = req.skipCold
      ? skipped('cold', 'skip_cold_memories')
      : req.query.trim() === ''
        ? skipped('cold', 'empty_query')
        : race.run('cold', t.coldMs, (s) => sources.memory.search(orgId, agentId, req.query, s, coldLimit));
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
