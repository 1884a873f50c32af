import type { AssembleResult } from '../../../src/grpc/grpc-server.js';
import type { ValidatedRequest } from '../../../src/request/validate.js';
import { Errors } from '../../../src/wire/errors.js';
import type {
  AssembleContextRequestInput,
  AssembleContextResponse,
  DegradationLevel,
} from '../../../src/wire/proto.js';
import { startAssembleServer } from '../../helpers/assemble-server.js';
import { usedRow, ZERO_METRICS } from '../../helpers/stub-response.js';

export const ORG = '0b8f8c1e-6a5e-4c3b-9d7e-1f2a3b4c5d6e';
export const AGENTS = ['a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d', 'b1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5e'];
/** Candidates per answer and their token estimates: agent 0 has 4 × 100, agent 1 has 4 × 250. */
export const CANDIDATE_TOKENS = [100, 250];

function metrics() {
  return { ...ZERO_METRICS, total_ms: 1, candidates_evaluated: 4 };
}

/** A packer stand-in: candidates in order while they fit `availableTokens` (0 = all fit). */
export function answer(req: ValidatedRequest, level: DegradationLevel, bodyLevel = level): AssembleResult {
  const each = CANDIDATE_TOKENS[AGENTS.indexOf(req.agentId)] ?? 100;
  let room = req.availableTokens > 0 ? req.availableTokens : Number.POSITIVE_INFINITY;
  const rows = [0, 1, 2, 3].map((i) => {
    const fits = each <= room;
    if (fits) room -= each;
    return usedRow({
      memory_id: `m${i}`,
      rank: i + 1,
      category: 'fact',
      exclusion: fits ? 'included' : 'budget',
      confidence: 1,
      token_estimate: each,
    });
  });
  const included = rows.filter((r) => r.exclusion === 'included').length;
  const response: AssembleContextResponse = {
    // The walker must not be fooled by the word in the text.
    assembled_context: `budget budget user: ${req.query}`,
    tokens_used: 3 + included * each,
    memories_included: included,
    memories_used: rows,
    directive_tokens: 0,
    history_tokens: 3,
    memory_tokens: included * each,
    metrics: metrics(),
    request_id: req.requestId,
    trace_id: req.traceId,
    span_id: req.spanId,
    score_schema: 'interim_v1',
    degradation: { level: bodyLevel, intentional: false, reasons: [], branches: [] },
  };
  return { response, level };
}

export interface Tally {
  calls: number;
  constrained: number;
  budgetAnswers: number;
  available: { agent: string; tokens: number }[];
}

export async function startFake(
  b: {
    l1Every?: number;
    lieEvery?: number;
    deadlineFirstOf?: number;
    bare?: boolean;
    /** Answer after this many ms, reporting them as `metrics.total_ms` (else at once, total_ms 1). */
    serviceMs?: number;
  } = {},
): Promise<{ addr: string; tally: Tally }> {
  const tally: Tally = { calls: 0, constrained: 0, budgetAnswers: 0, available: [] };
  const seenQueries = new Map<string, number>();
  const assemble = async (req: ValidatedRequest): Promise<AssembleResult> => {
    const n = ++tally.calls;
    const attempt = (seenQueries.get(req.query) ?? 0) + 1;
    seenQueries.set(req.query, attempt);
    // Every n-th distinct query misses the deadline on its first attempt: an overloaded server.
    if (b.deadlineFirstOf && attempt === 1 && Number(req.query.slice(1)) % b.deadlineFirstOf === 0) {
      throw Errors.deadlineExceeded();
    }
    if (req.availableTokens > 0) {
      tally.constrained++;
      tally.available.push({ agent: req.agentId, tokens: req.availableTokens });
    }
    const level: DegradationLevel = b.l1Every && n % b.l1Every === 0 ? 'L1' : 'L0';
    const result = answer(req, level, b.lieEvery && n % b.lieEvery === 0 ? 'L2' : level);
    // Replay checks memory blocks against memories_used: a bare answer has neither.
    if (b.bare) Object.assign(result.response, { memories_used: [], memories_included: 0, memory_tokens: 0 });
    if (result.response.memories_used.some((r) => r.exclusion === 'budget')) tally.budgetAnswers++;
    if (b.serviceMs !== undefined) {
      await new Promise((resolve) => setTimeout(resolve, b.serviceMs));
      result.response.metrics = { ...result.response.metrics!, total_ms: b.serviceMs };
    }
    return result;
  };
  const { addr } = await startAssembleServer(assemble);
  return { addr, tally };
}

export function requests(n: number): AssembleContextRequestInput[] {
  return Array.from({ length: n }, (_, i) => ({
    org_id: ORG,
    agent_id: AGENTS[i % AGENTS.length]!,
    query: `q${i}`,
    model: 'gpt-4o',
  }));
}
