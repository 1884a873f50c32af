/** The assembly pipeline (contract.md §1): retrieval, rank, CPU stage, answer. */
import type { Logger } from 'pino';
import type { CapabilityCatalog, ResolvedModel } from '../budget/catalog.js';
import type { Settings } from '../config/settings.js';
import { encodeCandidates } from '../cpu-stage/cpu-batch-encode.js';
import type { CandidateFields, CpuTaskInput } from '../cpu-stage/cpu-task.js';
import type { CpuPool, CpuStageResult } from '../pool/pool-client.js';
import { CandidateLimit } from '../ranking/candidate-limit.js';
import { rankCandidates } from '../ranking/rank-stage.js';
import { type RetrievalResult, type RetrievalSources, retrieve } from '../retrieval/retrieve.js';
import { registerAdmissionMetrics } from '../telemetry/admission-metrics.js';
import { degradedAssemblyLog } from '../telemetry/logger.js';
import type { Metrics } from '../telemetry/metrics.js';
import { generateNonce } from '../text/nonce.js';
import { monotonicNow } from '../util/clock.js';
import { Errors, isIbexError } from '../wire/errors.js';
import type { DegradationLevel } from '../wire/proto.js';
import type { BranchOutcome } from '../wire/types.js';
import { AdaptiveConcurrencyLimit, type AdmissionSample } from './admission.js';
import {
  answerFromStage,
  degradationLevel,
  degradationReasons,
  degradedAnswer,
  historyLost,
  warmDegradedAnswer,
} from './answers.js';
import { CpuStageRunner } from './assemble-cpu-stage.js';
import type { AssembleFn, AssembleResult } from './assemble-fn.js';
import { type AssemblyObserver, metricsObserver, NO_OBSERVER, unlessQuiet } from './assembly-observer.js';
import { type CallContext, type Gathered, throwIfAborted } from './call-context.js';
import type { Assembly } from './response-parts.js';
import { PER_MIB_FROM_BYTES, StageReserve } from './stage-reserve.js';
import type { ValidatedRequest } from './validate.js';
import { CONTENT_OVER, checkHistoryContents } from './wire-request.js';

export { degradationLevel } from './answers.js';
export { roundMs } from './response-parts.js';

export interface AssemblerDeps {
  settings: Settings;
  catalog: CapabilityCatalog;
  sources: RetrievalSources;
  pool: CpuPool;
  logger: Logger;
  metrics?: Metrics;
  observer?: AssemblyObserver;
  /** Counts every answer's included memories toward their frequency; absent, nothing is counted. */
  inclusions?: { record(orgId: string, memoryIds: Iterable<string>): void };
  /**
   * While this returns true (the start-up warm-up) the assembler reports nothing: no observer event (no
   * metric), no degraded-answer log line, no inclusion count.
   */
  quiet?: () => boolean;
}

function historyByteLength(req: ValidatedRequest): number {
  const { spans, count } = req.history;
  let bytes = 0;
  for (let i = 0; i < 4 * count; i += 2) bytes += spans[i + 1]! - spans[i]!;
  return bytes;
}

/** Calls given less than this (ms from arrival to D) get DEADLINE_EXCEEDED at D, not an answer (contract.md §10). */
export const DEADLINE_ANSWER_MIN_MS = 10;

/** A retrieval still running at D: the directive if its branch ended, every other branch timed out. */
function unfinishedRetrieval(
  req: ValidatedRequest,
  latencyMs: number,
  read?: Gathered['directive'],
): RetrievalResult {
  const branch = (name: 'directive' | 'hot' | 'cold', skipped: boolean): BranchOutcome =>
    skipped
      ? { name, status: 'skipped', latency_ms: 0, detail: '' }
      : { name, status: 'timeout', latency_ms: latencyMs, detail: 'deadline' };
  return {
    directive: read?.directive ?? null,
    hot: [],
    cold: [],
    branches: [
      read?.outcome ?? branch('directive', false),
      branch('hot', req.skipHot),
      branch('cold', req.skipCold),
    ],
    dropped: { invalid: 0, foreign: 0 },
    bounded: { oversize: 0, ignored: 0 },
  };
}

/** An array, not a generator: the counter walks it once per answer, ~450 ids for an unlimited call. */
function includedIds(kept: readonly { memory_id: string }[], selected: Int32Array): string[] {
  const ids: string[] = [];
  for (let k = 0; k < selected.length; k++) {
    const c = kept[selected[k]!];
    if (c !== undefined) ids.push(c.memory_id);
  }
  return ids;
}

/**
 * Builds the AssembleContext pipeline. Its result rejects only with `IBEX_ERR_UNKNOWN_MODEL`,
 * `IBEX_ERR_INVALID_ARGUMENT`, `IBEX_ERR_DEADLINE_EXCEEDED` or `IBEX_ERR_CANCELLED`.
 */
export function createAssembler(deps: AssemblerDeps): AssembleFn {
  const { settings, catalog, sources, pool } = deps;
  const quiet = deps.quiet;
  const reported = deps.observer ?? (deps.metrics ? metricsObserver(deps.metrics) : NO_OBSERVER);
  const observer = quiet ? unlessQuiet(quiet, reported) : reported;
  const logger = deps.logger.child({ component: 'assemble' });
  const logLine = degradedAssemblyLog(logger);
  const logDegraded: typeof logLine = (line) => {
    if (!quiet?.()) logLine(line);
  };
  const reserve = new StageReserve(settings.cpuStageReserveMs);
  const candidateLimit = new CandidateLimit(settings.ranking.maxCandidates, settings.ranking.relevanceFloor);
  // A memory service's hot hits carry no query relevance: the CPU stage measures it lexically.
  const lexicalHot = sources.kind.memory === 'http';
  warmDegradedAnswer(catalog.resolve(catalog.modelIds()[0]!));

  // Past the adaptive limit a call is answered at once with L2 `shed` (docs/overload.md).
  const admission = new AdaptiveConcurrencyLimit({ maxLimit: settings.maxInFlight });
  if (deps.metrics) registerAdmissionMetrics(deps.metrics.registry, admission);
  const cpu = new CpuStageRunner({ pool, reserve, observer, logger, dpCellCeiling: settings.dpCellCeiling });
  const assemble: AssembleFn = async (req: ValidatedRequest, ctx: CallContext) => {
    observer.callStarted();
    const admitted = admission.tryAcquire();
    const taught: { sample: AdmissionSample | null } = { sample: null };
    try {
      return await assembleOne(req, ctx, !admitted, taught);
    } catch (err) {
      if (isIbexError(err, 'IBEX_ERR_DEADLINE_EXCEEDED')) taught.sample = { latencyMs: 0, dropped: true };
      throw err;
    } finally {
      if (admitted) admission.release(taught.sample);
      observer.callEnded();
    }
  };
  assemble.atDeadline = atDeadline;
  return assemble;

  function atDeadline(req: ValidatedRequest, ctx: CallContext): AssembleResult | null {
    // A large history has its own refusal before D (degradedTooLate): its answer is not built late.
    const historyBytes = historyByteLength(req);
    if (ctx.deadline - ctx.arrival < DEADLINE_ANSWER_MIN_MS || historyBytes >= PER_MIB_FROM_BYTES)
      return null;
    if (historyLost(req.history)) return null;
    try {
      const resolved = catalog.resolve(req.model);
      const retrieval =
        ctx.gathered.retrieval ??
        unfinishedRetrieval(req, monotonicNow() - ctx.arrival, ctx.gathered.directive);
      const assembly: Assembly = {
        req,
        ctx,
        retrieval,
        kept: [],
        columns: [],
        filtered: [],
        nonce: generateNonce(settings.nonceBytes),
        rankingMs: 0,
        historyBytes,
      };
      return answer(assembly, resolved, null, 'deadline');
    } catch {
      // An unknown model or an over-long content: the pipeline's own error was never reached in time.
      return null;
    }
  }

  async function assembleOne(
    req: ValidatedRequest,
    ctx: CallContext,
    shed: boolean,
    taught: { sample: AdmissionSample | null },
  ) {
    const resolved = resolveModel(req);
    const historyBytes = historyByteLength(req);
    // Not even the degraded answer could be ready before D: do no work for an answer nobody reads.
    if (reserve.degradedTooLate(ctx.deadline - monotonicNow(), historyBytes)) throw refuseTooLate();
    const plan = candidateLimit.planFor(
      req.availableTokens > 0 ? req.availableTokens : resolved.model.context_window,
    );
    const { retrieval, shareMs } = await retrieveStage(req, ctx, shed, historyBytes, plan.limit);
    const ownStart = monotonicNow();
    const { assembly, input } = rankStage(req, ctx, retrieval, resolved, historyBytes, plan.floor);
    const { stage, poolReason } =
      !shed && cpu.cannotFit(req, ctx, input, shareMs, historyBytes)
        ? { stage: null, poolReason: 'pool_deadline' }
        : await cpu.run(req, ctx, input, shed, historyBytes);
    throwIfAborted(ctx);
    if (!stage && reserve.degradedTooLate(ctx.deadline - monotonicNow(), historyBytes)) throw refuseTooLate();
    const answered = answer(assembly, resolved, stage, poolReason);
    // The admission limit learns from this process's own stages only.
    const dropped = poolReason === 'pool_deadline' || poolReason === 'pool_saturated';
    taught.sample = { latencyMs: monotonicNow() - ownStart, dropped };
    return answered;
  }

  function refuseTooLate() {
    observer.refusedTooLate();
    return Errors.deadlineExceeded();
  }

  /** `unknown model` comes after every §11 check, so a pending history content is decided first. */
  function resolveModel(req: ValidatedRequest): ResolvedModel {
    try {
      return catalog.resolve(req.model);
    } catch (err) {
      if (checkHistoryContents(req.history)) throw Errors.invalidArgument('message.content', CONTENT_OVER);
      throw err;
    }
  }

  /** The three branches under the wall, which leaves the CPU stage and degraded answer their share of D. */
  async function retrieveStage(
    req: ValidatedRequest,
    ctx: CallContext,
    shed: boolean,
    historyBytes: number,
    coldLimit: number,
  ): Promise<{ retrieval: RetrievalResult; shareMs: number }> {
    const start = monotonicNow();
    const left = ctx.deadline - start;
    const shareMs = reserve.cpuShareMs(left, historyBytes);
    const wallMs = Math.max(0, Math.min(settings.wallMs, left - shareMs));
    const retrieval = await retrieve(
      sources,
      {
        orgId: req.orgId,
        agentId: req.agentId,
        query: req.query,
        skipHot: req.skipHot || shed,
        skipCold: req.skipCold || shed,
        coldLimit,
        onDirective: (directive, outcome) => {
          ctx.gathered.directive = { directive, outcome };
        },
      },
      {
        wallMs,
        directiveMs: settings.directiveTimeoutMs,
        hotMs: settings.hotTimeoutMs,
        coldMs: settings.coldTimeoutMs,
      },
      ctx.signal,
      settings.maxMemoryChars,
      monotonicNow,
      ctx.timer,
    );
    ctx.gathered.retrieval = retrieval;
    reserve.wallOverrun.record(Math.max(0, monotonicNow() - start - wallMs));
    throwIfAborted(ctx);
    if (shed) {
      for (const b of retrieval.branches) {
        if (b.name !== 'directive' && b.status === 'skipped') b.detail = 'shed';
      }
    }
    observer.retrieved(retrieval);
    ctx.trace?.retrieved(start, monotonicNow(), retrieval.branches);
    return { retrieval, shareMs: Math.min(shareMs, left) };
  }

  /** Dedupe, score and cut on the main thread, then encode for the CPU stage (contract.md §1). */
  function rankStage(
    req: ValidatedRequest,
    ctx: CallContext,
    retrieval: RetrievalResult,
    resolved: ResolvedModel,
    historyBytes: number,
    floor: number,
  ): { assembly: Assembly; input: CpuTaskInput } {
    const start = monotonicNow();
    const directive = retrieval.directive?.content ?? null;
    candidateLimit.observe(retrieval.cold);
    const rankReq = { maxMemories: req.maxMemories, weights: req.weights, query: req.query, floor };
    const ranked = rankCandidates(rankReq, retrieval, settings.ranking, Date.now(), lexicalHot);
    const { kept, filtered, scoreSchema } = ranked;
    // The CPU stage applies max_memories itself, after dropping history repeats (cpu-filters.ts).
    const candidates: readonly CandidateFields[] =
      ranked.belowFloor.length === 0 ? ranked.eligible : ranked.eligible.concat(ranked.belowFloor);
    const nonce = generateNonce(settings.nonceBytes);
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
        deadline: cpu.deadline(ctx, historyBytes),
        budgetModel: resolved,
        nonceBytes: settings.nonceBytes,
        availableTokens: req.availableTokens,
        packCount: ranked.eligible.length,
        filters: {
          history: true,
          query: req.query,
          relevanceFloor: ranked.floor,
          relevanceWeight: ranked.relevanceWeight,
          relevanceExponent: settings.ranking.relevanceExponent,
          maxMemories: req.maxMemories,
        },
        memoryDates: settings.memoryDates,
      },
      req.history,
    );
    const rankingMs = monotonicNow() - start;
    return {
      assembly: {
        req,
        ctx,
        retrieval,
        kept,
        columns: candidates,
        filtered,
        nonce,
        rankingMs,
        historyBytes,
        scoreSchema,
      },
      input,
    };
  }

  /** The answer; shed calls keep no memories (must cost nothing), nor failed stages (cause may be there). */
  function answer(
    a: Assembly,
    resolved: ResolvedModel,
    stage: CpuStageResult | null,
    poolReason: string | null,
  ) {
    const { req, retrieval } = a;
    a.ctx.trace?.assembled(a.rankingMs, stage, poolReason, a.kept.length, a.filtered.length);
    const response = stage
      ? answerFromStage(a, stage)
      : degradedAnswer(a, {
          resolved,
          nonceBytes: settings.nonceBytes,
          reserve,
          keepMemories: poolReason === 'pool_deadline' || poolReason === 'pool_saturated',
        });
    const level: DegradationLevel = stage
      ? degradationLevel(retrieval.branches)
      : response.memories_included > 0
        ? 'L1'
        : 'L2';
    // Counts toward frequency (contract.md §7): a map update, no I/O.
    if (stage && deps.inclusions && stage.output.selected.length > 0 && !quiet?.()) {
      deps.inclusions.record(req.orgId, includedIds(a.columns, stage.output.selected));
    }
    response.degradation = {
      level,
      intentional: req.skipHot || req.skipCold,
      reasons: degradationReasons(retrieval.branches, poolReason),
      branches: retrieval.branches.map((b) => ({ ...b })),
    };
    if (response.degradation.reasons.length > 0) {
      observer.degraded(level, response.degradation.reasons);
      logDegraded({
        degradation_level: level,
        reasons: response.degradation.reasons,
        branches: retrieval.branches,
        intentional: response.degradation.intentional,
        request_id: req.requestId || undefined,
        ...a.ctx.trace?.logIds(),
      });
    }
    return { response, level };
  }
}
