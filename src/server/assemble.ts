/**
 * The assembly pipeline (SPEC §1): retrieval under the wall, budget, dedupe/score/cut, CPU stage in the
 * pool, response with its degradation record. Dependency failures degrade the answer (L0/L1/L2); only
 * client errors (unknown model) and the caller's own deadline or cancellation end the call otherwise.
 */
import type { Logger } from 'pino';
import { calculateBudget, type TokenBudget } from '../budget/budget-calculator.js';
import type { CapabilityCatalog, ResolvedModel } from '../budget/catalog.js';
import { codePointLength, estimateTokens } from '../budget/estimate.js';
import type { Settings } from '../config/settings.js';
import { Errors, isIbexError } from '../errors.js';
import { formatContext } from '../format/formatter.js';
import { generateNonce } from '../format/nonce.js';
import { type CpuCandidate, encodeCandidates } from '../pool/cpu-task.js';
import type { CpuPool, CpuStageResult } from '../pool/pool-client.js';
import { applyMaxMemories, dedupeAndScore } from '../ranking/score.js';
import { type RetrievalResult, type RetrievalSources, retrieve } from '../retrieval/retrieve.js';
import type { Metrics } from '../telemetry/metrics.js';
import type { BranchOutcome, ScoredCandidate } from '../types.js';
import { abortCause, type CallContext, monotonicNow } from './call-context.js';
import type { AssembleFn } from './grpc-server.js';
import { LIMITS } from './limits.js';
import {
  ASSEMBLED_UTF8,
  type AssembleContextResponse,
  type DegradationLevel,
  type MemoryUsed,
} from './proto.js';
import { baseResponse, roundMs, usedRow } from './response-parts.js';
import { StageReserve } from './stage-reserve.js';
import type { ValidatedRequest } from './validate.js';
import { CONTENT_OVER, checkHistoryContents, decodeHistory } from './wire-request.js';

/** What the pipeline needs; built once at start-up. */
export interface AssemblerDeps {
  settings: Settings;
  catalog: CapabilityCatalog;
  sources: RetrievalSources;
  pool: CpuPool;
  logger: Logger;
  metrics?: Metrics;
}

export { roundMs } from './response-parts.js';

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

/** UTF-8 bytes of the request's history (≤ 100 spans summed). */
function historyByteLength(req: ValidatedRequest): number {
  const { spans, count } = req.history;
  let bytes = 0;
  for (let i = 0; i < 4 * count; i += 2) bytes += spans[i + 1]! - spans[i]!;
  return bytes;
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
  const reserve = new StageReserve(settings.cpuStageReserveMs);

  let inFlight = 0;
  /** Calls waiting for their CPU-stage result (queued or running). */
  let awaitingPool = 0;
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

  /**
   * `unknown model` comes after every SPEC §11 check, so a pending history content is decided first (on
   * the main thread: only for a request that is refused either way).
   */
  function resolveModel(req: ValidatedRequest): ResolvedModel {
    try {
      return catalog.resolve(req.model);
    } catch (err) {
      if (checkHistoryContents(req.history)) throw Errors.invalidArgument('message.content', CONTENT_OVER);
      throw err;
    }
  }

  async function assembleOne(req: ValidatedRequest, ctx: CallContext, shed: boolean) {
    const resolved = resolveModel(req);

    // The wall ends early enough to leave the CPU stage and the degraded answer their measured share of D
    // (SPEC §10 answer guarantee): running p99s of this process's round-trips and degraded answers.
    const historyBytes = historyByteLength(req);
    const left = ctx.deadline - monotonicNow();
    const wallMs = Math.max(0, Math.min(settings.wallMs, left - reserve.cpuShareMs(left, historyBytes)));
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
      settings.maxMemoryChars,
    );
    throwIfAborted(ctx);
    if (shed) {
      for (const b of retrieval.branches) {
        if (b.name !== 'directive' && b.status === 'skipped') b.detail = 'overloaded';
      }
    }
    recordRetrieval(retrieval);

    const rankingStart = monotonicNow();
    const directive = retrieval.directive?.content ?? null;
    const scored = dedupeAndScore(retrieval.hot, retrieval.cold);
    const { kept, filtered } = applyMaxMemories(scored, req.maxMemories);
    // Budget, wrapped-block costs, pack, format and tokens_used are the CPU stage's (SPEC §1 isolation
    // rule): the main thread encodes bytes. Filtered candidates ride along only to be costed.
    const candidates: CpuCandidate[] = [...kept, ...filtered].map((c) => ({
      memory_id: c.memory_id,
      category: c.category,
      content: c.content,
      score: c.score,
      similarity: c.similarity,
      confidence: c.confidence,
      rank: c.rank,
      tokens: 0,
    }));
    const nonce = generateNonce(settings.nonceBytes);
    // Calls queued for the pool with ours may miss their deadlines at the same instant, and their degraded
    // answers are then built one after another on this thread: keep room for them too (at most half of
    // what is left, so a queue never starves the CPU stage of a short deadline).
    const queued = awaitingPool;
    const cpuDeadline =
      ctx.deadline -
      Math.min(
        reserve.degradedMs(historyBytes) * (1 + queued),
        Math.max(0, (ctx.deadline - monotonicNow()) / 2),
      );
    const input = encodeCandidates(
      candidates,
      {
        budget: 0,
        dpCellCeiling: settings.dpCellCeiling,
        maxConsecutiveSkips: settings.maxConsecutiveSkips,
        nonce,
        directive,
        recentMessages: [],
        toolSchemas: [],
        deadline: cpuDeadline,
        budgetModel: resolved,
        nonceBytes: settings.nonceBytes,
        availableTokens: req.availableTokens,
        packCount: kept.length,
      },
      req.history,
    );
    const rankingMs = monotonicNow() - rankingStart;

    let stage: CpuStageResult | null = null;
    let poolReason: string | null = shed ? 'overloaded' : null;
    try {
      if (shed) throw Errors.poolSaturated();
      awaitingPool++;
      try {
        stage = await pool.run(input, { signal: ctx.signal, orgId: req.orgId });
      } finally {
        awaitingPool--;
      }
      reserve.roundTrip.record(stage.round_trip_us / 1000);
      if (stage.output.invalid !== null)
        throw Errors.invalidArgument('message.content', stage.output.invalid);
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
            buckets: Math.max(1, Math.floor((stage.output.budget?.usable_budget ?? 0) / 16)),
            cells: stage.output.pack.cells,
            ceiling: settings.dpCellCeiling,
            reason: stage.output.pack.greedy_reason,
          },
          'packer fell back to greedy',
        );
      }
    } catch (err) {
      if (isIbexError(err, 'IBEX_ERR_INVALID_ARGUMENT')) throw err;
      if (isIbexError(err, 'IBEX_ERR_POOL_DEADLINE')) reserve.lateness.record(monotonicNow() - cpuDeadline);
      throwIfAborted(ctx);
      poolReason ??= poolReasonOf(err);
      if (poolReason === 'pool_failed') logger.error({ err }, 'CPU stage failed; answering without memories');
    }
    throwIfAborted(ctx);

    const level: DegradationLevel = stage ? degradationLevel(retrieval.branches) : 'L2';
    const response = stage
      ? buildResponse(req, ctx, retrieval, stage.output.budget!, kept, filtered, stage, rankingMs)
      : degradedResponse(req, ctx, retrieval, resolved, kept, filtered, nonce, rankingMs);
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
    if (r.bounded.oversize > 0) metrics.droppedHits.inc({ reason: 'oversize' }, r.bounded.oversize);
    if (r.bounded.ignored > 0) metrics.droppedHits.inc({ reason: 'past_limit' }, r.bounded.ignored);
  }

  /** The answer from a CPU-stage result: its budget, costs, pack, context and tokens_used. */
  function buildResponse(
    req: ValidatedRequest,
    ctx: CallContext,
    retrieval: RetrievalResult,
    budget: TokenBudget,
    kept: readonly ScoredCandidate[],
    filtered: readonly ScoredCandidate[],
    stage: CpuStageResult,
    rankingMs: number,
  ): AssembleContextResponse {
    const out = stage.output;
    const rows: MemoryUsed[] = [];
    for (const i of out.selected) rows.push(usedRow(kept[i]!, 'included', out.costs[i]!));
    for (const i of out.excluded) rows.push(usedRow(kept[i]!, 'budget', out.costs[i]!));
    filtered.forEach((c, j) => {
      rows.push(usedRow(c, 'filter', out.costs[kept.length + j]!));
    });
    const response = baseResponse(req, ctx, retrieval, budget, rows, rankingMs);
    response.assembled_context = out.assembled_context;
    if (out.assembled_utf8.length > 0) response[ASSEMBLED_UTF8] = out.assembled_utf8;
    response.tokens_used = out.tokens_used ?? 0;
    response.memories_included = out.memories_included;
    response.memory_tokens = out.pack.total_tokens;
    const m = response.metrics;
    m.budget_calculation_ms = roundMs(out.budget_us / 1000);
    m.packing_ms = roundMs(out.pack_us / 1000);
    m.formatting_ms = roundMs(out.format_us / 1000);
    m.candidates_evaluated = out.pack.candidates_evaluated;
    m.pool_wait_us = Math.min(2 ** 31 - 1, Math.max(0, Math.round(stage.wait_us)));
    m.pool_run_us = Math.min(2 ** 31 - 1, Math.max(0, Math.round(stage.run_us)));
    m.total_ms = roundMs(monotonicNow() - ctx.arrival);
    return response;
  }

  /**
   * The L2 degraded answer (SPEC §10): directive + history formatted on the main thread, no memories —
   * the one allowed main-thread pass over history, which is decoded for it (and its pending content
   * lengths decided: an over-long content is still INVALID_ARGUMENT). Memory rows are `failed` /
   * `filter` with token_estimate 0: their costs were the CPU stage's, which did not run. Its cost feeds
   * the measured reserve.
   * @throws IbexError `IBEX_ERR_INVALID_ARGUMENT` for a history content over 32,768 code points.
   */
  function degradedResponse(
    req: ValidatedRequest,
    ctx: CallContext,
    retrieval: RetrievalResult,
    resolved: ResolvedModel,
    kept: readonly ScoredCandidate[],
    filtered: readonly ScoredCandidate[],
    nonce: string,
    rankingMs: number,
  ): AssembleContextResponse {
    const start = monotonicNow();
    const messages = decodeHistory(req.history);
    if (req.history.contentPending) {
      for (const m of messages) {
        if (m.content.length > LIMITS.contentChars && codePointLength(m.content) > LIMITS.contentChars)
          throw Errors.invalidArgument('message.content', CONTENT_OVER);
      }
    }
    const directive = retrieval.directive?.content ?? null;
    const budget = calculateBudget({
      model: resolved,
      directive,
      recentMessages: messages,
      toolSchemas: [],
      nonceBytes: settings.nonceBytes,
      availableTokens: req.availableTokens,
    });
    const rows = [
      ...kept.map((c) => usedRow(c, 'failed', 0)),
      ...filtered.map((c) => usedRow(c, 'filter', 0)),
    ];
    const response = baseResponse(req, ctx, retrieval, budget, rows, rankingMs);
    response.assembled_context = formatContext({
      directive,
      recentMessages: messages,
      memories: [],
      toolSchemas: [],
      nonce,
    }).assembled_context;
    response.tokens_used = estimateTokens(response.assembled_context, budget.estimate_kind);
    response.metrics.candidates_evaluated = kept.length;
    const end = monotonicNow();
    reserve.recordDegraded(end - start, historyByteLength(req));
    response.metrics.total_ms = roundMs(end - ctx.arrival);
    return response;
  }
}
