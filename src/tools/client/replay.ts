// The engine of `ibex-context replay`: LoCoMo turns as AssembleContext calls, every answer checked.

import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { status } from '@grpc/grpc-js';
import { CapabilityCatalog } from '../../budget/catalog.js';
import { catalogFileSetting } from '../../config/settings.js';
import type { AssembleContextRequestInput } from '../../wire/proto.js';
import { LEVEL_HEADER } from '../../wire/wire-headers.js';
import type { LocomoConversation } from '../locomo/dataset.js';
import type { BudgetMix } from './budget-mix.js';
import { errorKey, statusName } from './cli-options.js';
import { type ConnectionOptions, createContextClient } from './context-client.js';
import { type LocomoRequestOptions, locomoRequests } from './locomo-requests.js';
import { checkResponse, type ViolationKind } from './response-checks.js';
import { medianOfSorted, percentilesOf, round } from './stats.js';

export interface ReplayOptions extends ConnectionOptions, LocomoRequestOptions {
  conversations: readonly LocomoConversation[];
  /** Calls in flight at most (default 4; with `rate`, a cap so a stalled server cannot pile up calls). */
  concurrency?: number;
  /** Calls/s, paced from the start (open loop, bounded by `concurrency`). Absent or 0 = unpaced. */
  rate?: number;
  /**
   * Retries of a call answered DEADLINE_EXCEEDED, UNAVAILABLE or RESOURCE_EXHAUSTED (default 0): on a busy
   * machine a missed deadline says nothing about the answers checked. The last attempt's status counts.
   */
  retries?: number;
  mix?: BudgetMix;
  limit?: number;
  timeoutMs?: number;
  /** Catalog for the budget check (default: built-in + `IBEX_CONTEXT_CATALOG_FILE`, like the server). */
  catalog?: CapabilityCatalog;
  connectTimeoutMs?: number;
  onProgress?: (done: number, total: number) => void;
  signal?: AbortSignal;
}

export interface Spread {
  min: number;
  median: number;
  max: number;
}

export interface ViolationSample {
  request_id: string;
  model: string;
  kinds: ViolationKind[];
  details: string[];
}

/** Result of {@link runReplay}; what `replay --json` prints (snake_case on purpose). */
export interface ReplayReport {
  target: string;
  rate: number | null;
  /** Constrained calls; of their OK answers, those where the packer chose and those over budget. */
  constrained: { calls: number; budget_choice: number; over_budget: number };
  calls: number;
  ok: number;
  /** Non-OK statuses (last attempt) by gRPC code name. */
  errors: Record<string, number>;
  retried: Record<string, number>;
  error_details: Record<string, string[]>;
  levels: { L0: number; L1: number; L2: number };
  memories_included: Spread;
  tokens_used: Spread & { total: number };
  /** Client latency of every attempt (any status, retries included), ms. */
  latency_ms: { p50: number; p99: number; max: number };
  server_total_ms: { p50: number; p99: number };
  invariant_violations: number;
  violations_by_kind: Record<ViolationKind, number>;
  /** OK answers whose fixed parts alone exceed the model's limit (budget invariant not applicable). */
  budget_unchecked: number;
  violation_samples: ViolationSample[];
  /** Conversations and later-session turns available (before `limit`). */
  conversations: number;
  turns_available: number;
  duration_s: number;
}

function spread(sorted: readonly number[]): Spread {
  return {
    min: sorted.length === 0 ? 0 : sorted[0]!,
    median: medianOfSorted(sorted),
    max: sorted.length === 0 ? 0 : sorted[sorted.length - 1]!,
  };
}

const MAX_SAMPLES = 10;
/** Statuses that say the server was overloaded or late, not that the request or answer was wrong. */
const TRANSIENT = new Set<number>([status.DEADLINE_EXCEEDED, status.UNAVAILABLE, status.RESOURCE_EXHAUSTED]);
const RETRY_PAUSE_MS = 50;

/**
 * Replays the later-session turns of `opts.conversations` over one channel and checks every answer.
 * @throws Error when the service cannot be reached within `connectTimeoutMs`; call statuses are counted.
 */
export async function runReplay(opts: ReplayOptions): Promise<ReplayReport> {
  const concurrency = Math.max(1, Math.floor(opts.concurrency ?? 4));
  const timeoutMs = opts.timeoutMs ?? 1000;
  const catalog = opts.catalog ?? CapabilityCatalog.load(catalogFileSetting());
  const all = locomoRequests(opts.conversations, {
    orgId: opts.orgId,
    historyTurns: opts.historyTurns,
    skipFraction: opts.skipFraction,
    models: opts.models ?? catalog.modelIds(),
  });
  const planned = opts.limit === undefined ? all : all.slice(0, Math.max(0, opts.limit));

  const errors: Record<string, number> = {};
  const errorDetails: Record<string, string[]> = {};
  const levels = { L0: 0, L1: 0, L2: 0 };
  const memoriesIncluded: number[] = [];
  const tokensUsed: number[] = [];
  const latencies: number[] = [];
  const serverTotals: number[] = [];
  const byKind: Record<ViolationKind, number> = {
    budget: 0,
    memory_ids: 0,
    included_count: 0,
    level: 0,
    unknown_model: 0,
  };
  const samples: ViolationSample[] = [];
  let calls = 0;
  let ok = 0;
  const constrained = { calls: 0, budget_choice: 0, over_budget: 0 };
  const retries = Math.max(0, Math.floor(opts.retries ?? 0));
  const retried: Record<string, number> = {};
  let violating = 0;
  let unchecked = 0;

  const client = createContextClient(opts);
  const started = performance.now();
  try {
    await client.waitForReady(opts.connectTimeoutMs ?? 5000);
    // Paced from the first call: the connect time would otherwise be caught up at once as a burst.
    const pacedFrom = performance.now();
    const timed = async (req: AssembleContextRequestInput) => {
      const t = performance.now();
      const outcome = await client.assemble(req, { deadlineMs: timeoutMs });
      latencies.push(performance.now() - t);
      return outcome;
    };
    const one = async (base: AssembleContextRequestInput) => {
      const req = opts.mix ? opts.mix.apply(base) : base;
      const limit = req.available_tokens ?? 0;
      if (limit > 0) constrained.calls++;
      let outcome = await timed(req);
      // Overload statuses are the machine's state, not the answer's: retried after a pause, and counted.
      for (let a = 0; a < retries && TRANSIENT.has(outcome.status.code) && !opts.signal?.aborted; a++) {
        const name = statusName(outcome.status.code);
        retried[name] = (retried[name] ?? 0) + 1;
        await sleep(RETRY_PAUSE_MS * (a + 1));
        outcome = await timed(req);
      }
      calls++;
      opts.onProgress?.(calls, planned.length);
      if (outcome.status.code !== status.OK || outcome.response === null) {
        const name = errorKey(outcome.status, latencies.at(-1), timeoutMs);
        errors[name] = (errors[name] ?? 0) + 1;
        const details = errorDetails[name] ?? [];
        errorDetails[name] = details;
        if (details.length < 3 && !details.includes(outcome.status.details)) {
          details.push(outcome.status.details);
        }
        return;
      }
      ok++;
      const res = outcome.response;
      const header = outcome.metadata.get(LEVEL_HEADER)[0];
      const check = checkResponse(
        catalog,
        req.model ?? '',
        res,
        typeof header === 'string' ? header : undefined,
      );
      const level = res.degradation?.level;
      if (level === 'L0' || level === 'L1' || level === 'L2') levels[level]++;
      memoriesIncluded.push(res.memories_included);
      tokensUsed.push(res.tokens_used);
      serverTotals.push(res.metrics?.total_ms ?? 0);
      if (!check.budgetChecked) unchecked++;
      if (limit > 0) {
        if ((res.memories_used ?? []).some((u) => u.exclusion === 'budget')) constrained.budget_choice++;
        // contract.md §6: available_tokens caps usable_budget, the memories' share of the window.
        if (res.memory_tokens > limit) {
          constrained.over_budget++;
          check.violations.push({
            kind: 'budget',
            detail: `memory_tokens ${res.memory_tokens} > available_tokens ${limit}`,
          });
        }
      }
      if (check.violations.length > 0) {
        violating++;
        for (const v of check.violations) byKind[v.kind]++;
        if (samples.length < MAX_SAMPLES) {
          samples.push({
            request_id: req.request_id ?? '',
            model: req.model ?? '',
            kinds: check.violations.map((v) => v.kind),
            details: check.violations.map((v) => v.detail),
          });
        }
      }
    };
    const interval = opts.rate ? 1000 / opts.rate : 0;
    const pending = new Set<Promise<void>>();
    for (let i = 0; i < planned.length && !opts.signal?.aborted; i++) {
      const wait = pacedFrom + i * interval - performance.now();
      if (wait >= 1) await sleep(wait);
      while (pending.size >= concurrency) await Promise.race(pending);
      if (opts.signal?.aborted) break;
      const p: Promise<void> = one(planned[i]!.request).finally(() => pending.delete(p));
      pending.add(p);
    }
    await Promise.all(pending);
  } finally {
    client.close();
  }

  const asc = (xs: number[]) => xs.sort((a, b) => a - b);
  const lat = asc(latencies);
  const srv = asc(serverTotals);
  const tok = asc(tokensUsed);
  const latAt = percentilesOf(lat);
  const srvAt = percentilesOf(srv);
  return {
    target: opts.addr,
    rate: opts.rate ? opts.rate : null,
    constrained,
    calls,
    ok,
    errors,
    retried,
    error_details: errorDetails,
    levels,
    memories_included: spread(asc(memoriesIncluded)),
    tokens_used: { ...spread(tok), total: tok.reduce((s, v) => s + v, 0) },
    latency_ms: {
      p50: round(latAt(50)),
      p99: round(latAt(99)),
      max: round(lat.length === 0 ? 0 : lat[lat.length - 1]!),
    },
    server_total_ms: { p50: srvAt(50), p99: srvAt(99) },
    invariant_violations: violating,
    violations_by_kind: byKind,
    budget_unchecked: unchecked,
    violation_samples: samples,
    conversations: opts.conversations.length,
    turns_available: all.length,
    duration_s: round((performance.now() - started) / 1000),
  };
}
