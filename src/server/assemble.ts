/**
 * The assembly pipeline (SPEC §1): retrieval under the wall, budget, dedupe/score/cut, CPU stage in the
 * pool, response with its degradation record. Dependency failures degrade the answer (L0/L1/L2); only
 * client errors (unknown model) and the caller's own deadline or cancellation end the call otherwise.
 */
import type { Logger } from 'pino';
import { calculateBudget, type TokenBudget, wrappedBlockTokens } from '../budget/budget-calculator.js';
import type { CapabilityCatalog } from '../budget/catalog.js';
import { estimateTokens } from '../budget/estimate.js';
import type { Settings } from '../config/settings.js';
import { Errors, isIbexError } from '../errors.js';
import { formatContext } from '../format/formatter.js';
import { generateNonce, nonceLength } from '../format/nonce.js';
import { type CpuCandidate, encodeCandidates } from '../pool/cpu-task.js';
import type { CpuPool, CpuStageResult } from '../pool/pool-client.js';
import { applyMaxMemories, dedupeAndScore, SCORE_SCHEMA } from '../ranking/score.js';
import { type RetrievalResult, type RetrievalSources, retrieve } from '../retrieval/retrieve.js';
import type { Metrics } from '../telemetry/metrics.js';
import type { BranchOutcome, ScoredCandidate } from '../types.js';
import { abortCause, type CallContext, monotonicNow } from './call-context.js';
import type { AssembleFn } from './grpc-server.js';
import type { AssembleContextResponse, DegradationLevel, MemoryUsed } from './proto.js';
import type { ValidatedRequest } from './validate.js';

/** What the pipeline needs; built once at start-up. */
export interface AssemblerDeps {
  settings: Settings;
  catalog: CapabilityCatalog;
  sources: RetrievalSources;
  pool: CpuPool;
  logger: Logger;
  metrics?: Metrics;
}

/** Time kept between the CPU task's deadline and D for encoding and sending the answer, ms. */
const ANSWER_MARGIN_MS = 1;

/** Rounds ms half-to-even to a non-negative integer (SPEC §2 AssemblyMetrics). */
export function roundMs(ms: number): number {
  if (!(ms > 0)) return 0;
  const floor = Math.floor(ms);
  const diff = ms - floor;
  if (diff > 0.5) return floor + 1;
  if (diff < 0.5) return floor;
  return floor % 2 === 0 ? floor : floor + 1;
}

/**
 * Degradation level (SPEC §10): a memory source is usable iff not skipped and `success` (zero hits count).
 * Both usable ⇒ L0, one ⇒ L1, none ⇒ L2. The directive never changes the level.
 */
export function degradationLevel(branches: readonly BranchOutcome[]): DegradationLevel {
  const usable = branches.filter((b) => b.name !== 'directive' && b.status === 'success').length;
  return usable === 2 ? 'L0' : usable === 1 ? 'L1' : 'L2';
}

/**
 * Reasons for a degraded answer: each branch that did not succeed (a failed or timed-out directive too,
 * `directive_error:…` / `directive_timeout:…`, SPEC §10 as updated by issue 11), plus the pool's reason.
 */
function degradationReasons(branches: readonly BranchOutcome[], poolReason: string | null): string[] {
  const reasons: string[] = [];
  for (const b of branches) {
    if (b.status === 'success') continue;
    if (b.name === 'directive' && b.status === 'skipped') continue;
    reasons.push(b.status === 'skipped' ? `${b.name}_skipped` : `${b.name}_${b.status}:${b.detail}`);
  }
  if (poolReason) reasons.push(poolReason);
  return reasons;
}

/**
 * Stops the pipeline once the caller's deadline has passed or it cancelled. Throws IbexErrors so the
 * server answers DEADLINE_EXCEEDED / CANCELLED, never INTERNAL, even when the clock passes D a tick
 * before the deadline timer aborts the signal.
 */
function throwIfAborted(ctx: CallContext): void {
  if (abortCause(ctx.signal) === 'cancelled') throw Errors.cancelled();
  if (ctx.signal.aborted || monotonicNow() >= ctx.deadline) throw Errors.deadlineExceeded();
}

function poolReasonOf(err: unknown): string {
  if (isIbexError(err, 'IBEX_ERR_POOL_SATURATED')) return 'pool_saturated';
  if (isIbexError(err, 'IBEX_ERR_POOL_DEADLINE')) return 'pool_deadline';
  return 'pool_failed';
}

/**
 * Builds the AssembleContext pipeline.
 * @returns an {@link AssembleFn}: resolves with the response and its level (dependency failures, pool
 *   trouble and load shedding degrade it); rejects only with IbexError `IBEX_ERR_UNKNOWN_MODEL`
 *   (INVALID_ARGUMENT), `IBEX_ERR_DEADLINE_EXCEEDED` once D has passed, or `IBEX_ERR_CANCELLED` when the
 *   caller cancelled (SPEC §10, §11).
 */
export function createAssembler(deps: AssemblerDeps): AssembleFn {
  const { settings, catalog, sources, pool, metrics } = deps;
  const logger = deps.logger.child({ component: 'assemble' });
  const nonceChars = nonceLength(settings.nonceBytes);

  let inFlight = 0;
  return async (req: ValidatedRequest, ctx: CallContext) => {
    metrics?.inFlight.inc();
    inFlight++;
    try {
      // Load shedding: past the in-flight limit the service answers at once from what costs nothing
      // (directive + history, L2 `overloaded`), so that an overloaded process still answers in time
      // instead of letting every call wait out the retrieval wall.
      // Duration and count of every call: src/telemetry/assembly-metrics.ts (the interceptor).
      return await assembleOne(req, ctx, inFlight > settings.maxInFlight);
    } finally {
      inFlight--;
      metrics?.inFlight.dec();
    }
  };

  async function assembleOne(req: ValidatedRequest, ctx: CallContext, shed: boolean) {
    const resolved = catalog.resolve(req.model);
    const kind = resolved.policy.estimate_kind;

    // The wall ends early enough to leave the CPU stage its share of D (SPEC §10).
    const wallMs = Math.max(
      0,
      Math.min(settings.wallMs, ctx.deadline - monotonicNow() - settings.cpuStageReserveMs),
    );
    const retrieval = await retrieve(
      sources,
      {
        orgId: req.orgId,
        agentId: req.agentId,
        query: req.query,
        skipHot: req.skipHot || shed,
        skipCold: req.skipCold || shed,
      },
      {
        wallMs,
        directiveMs: settings.directiveTimeoutMs,
        hotMs: settings.hotTimeoutMs,
        coldMs: settings.coldTimeoutMs,
      },
      ctx.signal,
    );
    throwIfAborted(ctx);
    if (shed) {
      for (const b of retrieval.branches) {
        if (b.name !== 'directive' && b.status === 'skipped') b.detail = 'overloaded';
      }
    }
    recordRetrieval(retrieval);

    const budgetStart = monotonicNow();
    const directive = retrieval.directive?.content ?? null;
    const budget = calculateBudget({
      model: resolved,
      directive,
      recentMessages: req.recentMessages,
      toolSchemas: [],
      nonceBytes: settings.nonceBytes,
      availableTokens: req.availableTokens,
    });
    const budgetMs = monotonicNow() - budgetStart;

    const rankingStart = monotonicNow();
    const scored = dedupeAndScore(retrieval.hot, retrieval.cold);
    const { kept, filtered } = applyMaxMemories(scored, req.maxMemories);
    // Each candidate's wrapped-block cost is computed once: the packer charges it, the response reports it.
    const costs = kept.map((c) => wrappedBlockTokens(c, nonceChars, kind));
    const candidates: CpuCandidate[] = kept.map((c, i) => ({
      memory_id: c.memory_id,
      category: c.category,
      content: c.content,
      score: c.score,
      similarity: c.similarity,
      confidence: c.confidence,
      rank: c.rank,
      tokens: costs[i]!,
    }));
    const nonce = generateNonce(settings.nonceBytes);
    const input = encodeCandidates(candidates, {
      budget: budget.usable_budget,
      dpCellCeiling: settings.dpCellCeiling,
      maxConsecutiveSkips: settings.maxConsecutiveSkips,
      nonce,
      directive,
      recentMessages: req.recentMessages,
      toolSchemas: [],
      deadline: ctx.deadline - ANSWER_MARGIN_MS,
    });
    const rankingMs = monotonicNow() - rankingStart;

    let stage: CpuStageResult | null = null;
    let poolReason: string | null = shed ? 'overloaded' : null;
    try {
      if (shed) throw Errors.poolSaturated();
      stage = await pool.run(input, { signal: ctx.signal });
      metrics?.poolWait.observe(stage.wait_us / 1e6);
      metrics?.poolRun.observe(stage.run_us / 1e6);
      metrics?.packerPath.inc({
        path: stage.output.pack.path,
        reason: stage.output.pack.greedy_reason ?? 'none',
      });
      if (stage.output.pack.path === 'greedy') {
        logger.warn(
          {
            n: stage.output.pack.candidates_evaluated,
            buckets: Math.max(1, Math.floor(budget.usable_budget / 16)),
            cells: stage.output.pack.cells,
            ceiling: settings.dpCellCeiling,
            reason: stage.output.pack.greedy_reason,
          },
          'packer fell back to greedy',
        );
      }
    } catch (err) {
      throwIfAborted(ctx);
      poolReason ??= poolReasonOf(err);
      if (poolReason === 'pool_failed') logger.error({ err }, 'CPU stage failed; answering without memories');
    }
    throwIfAborted(ctx);

    const level: DegradationLevel = stage ? degradationLevel(retrieval.branches) : 'L2';
    const response = buildResponse(req, ctx, retrieval, budget, kept, costs, filtered, stage, nonce, kind, {
      budgetMs,
      rankingMs,
    });
    response.degradation = {
      level,
      intentional: req.skipHot || req.skipCold,
      reasons: degradationReasons(retrieval.branches, poolReason),
      branches: retrieval.branches.map((b) => ({ ...b })),
    };
    if (response.degradation.reasons.length > 0) {
      for (const reason of response.degradation.reasons)
        metrics?.degraded.inc({ level, reason: reason.split(':')[0]! });
      logger.info(
        {
          level,
          reasons: response.degradation.reasons,
          branches: retrieval.branches,
          intentional: response.degradation.intentional,
          request_id: req.requestId || undefined,
        },
        'degraded assembly',
      );
    }
    return { response, level };
  }

  function recordRetrieval(r: RetrievalResult): void {
    if (!metrics) return;
    for (const b of r.branches) {
      metrics.branchOutcomes.inc({ branch: b.name, status: b.status });
      if (b.status !== 'skipped')
        metrics.branchDuration.observe({ branch: b.name, status: b.status }, b.latency_ms / 1000);
    }
    if (r.dropped.invalid > 0) metrics.droppedHits.inc({ reason: 'invalid' }, r.dropped.invalid);
    if (r.dropped.foreign > 0) metrics.droppedHits.inc({ reason: 'foreign' }, r.dropped.foreign);
  }

  function buildResponse(
    req: ValidatedRequest,
    ctx: CallContext,
    retrieval: RetrievalResult,
    budget: TokenBudget,
    kept: readonly ScoredCandidate[],
    costs: readonly number[],
    filtered: readonly ScoredCandidate[],
    stage: CpuStageResult | null,
    nonce: string,
    kind: TokenBudget['estimate_kind'],
    times: { budgetMs: number; rankingMs: number },
  ): AssembleContextResponse {
    const row = (c: ScoredCandidate, exclusion: MemoryUsed['exclusion'], tokens: number): MemoryUsed => ({
      memory_id: c.memory_id,
      composite_score: c.score,
      relevance_score: c.similarity,
      recency_score: 0,
      usefulness_score: 0,
      rank: c.rank,
      category: c.category,
      exclusion,
      similarity: c.similarity,
      confidence: c.confidence,
      token_estimate: tokens,
    });
    const costOf = (c: ScoredCandidate) => wrappedBlockTokens(c, nonceChars, kind);
    const rows: MemoryUsed[] = [];
    let assembled: string;
    let memoryTokens = 0;
    if (stage) {
      const out = stage.output;
      for (const i of out.selected) rows.push(row(kept[i]!, 'included', costs[i]!));
      for (const i of out.excluded) rows.push(row(kept[i]!, 'budget', costs[i]!));
      assembled = out.assembled_context;
      memoryTokens = out.pack.total_tokens;
    } else {
      // Degraded answer formatted on the main thread: directive + history, no memories (SPEC §10).
      kept.forEach((c, i) => {
        rows.push(row(c, 'failed', costs[i]!));
      });
      assembled = formatContext({
        directive: retrieval.directive?.content ?? null,
        recentMessages: req.recentMessages,
        memories: [],
        toolSchemas: [],
        nonce,
      }).assembled_context;
    }
    for (const c of filtered) rows.push(row(c, 'filter', costOf(c)));
    const branch = (name: string) => retrieval.branches.find((b) => b.name === name)?.latency_ms ?? 0;
    const packUs = stage?.output.pack_us ?? 0;
    const formatUs = stage?.output.format_us ?? 0;
    return {
      assembled_context: assembled,
      tokens_used: estimateTokens(assembled, kind),
      memories_included: stage?.output.memories_included ?? 0,
      memories_used: rows,
      directive_tokens: budget.directive_tokens,
      history_tokens: budget.messages_tokens,
      memory_tokens: memoryTokens,
      metrics: {
        budget_calculation_ms: roundMs(times.budgetMs),
        directive_load_ms: roundMs(branch('directive')),
        hot_memory_retrieval_ms: roundMs(branch('hot')),
        cold_memory_retrieval_ms: roundMs(branch('cold')),
        ranking_ms: roundMs(times.rankingMs),
        packing_ms: roundMs(packUs / 1000),
        formatting_ms: roundMs(formatUs / 1000),
        total_ms: roundMs(monotonicNow() - ctx.arrival),
        candidates_evaluated: stage?.output.pack.candidates_evaluated ?? kept.length,
        pool_wait_us: Math.min(2 ** 31 - 1, Math.max(0, Math.round(stage?.wait_us ?? 0))),
        pool_run_us: Math.min(2 ** 31 - 1, Math.max(0, Math.round(stage?.run_us ?? 0))),
      },
      request_id: req.requestId,
      trace_id: req.traceId,
      span_id: req.spanId,
      score_schema: SCORE_SCHEMA,
      degradation: { level: 'L0', intentional: false, reasons: [], branches: [] },
    };
  }
}
