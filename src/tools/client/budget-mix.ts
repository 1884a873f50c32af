/**
 * The budget mix of `load` and `replay`: LoCoMo calls always fit their model's window, so
 * without it no load figure runs the packer on a real choice. A seeded share of the calls carries an
 * `available_tokens` (contract.md §6: it caps usable_budget) drawn so that 30–80 % of the candidates' tokens fit.
 *
 * "The candidates' tokens" of an agent come from a probe: a few unconstrained calls per agent, whose
 * `memories_used` rows carry every scored candidate's `token_estimate` (read from the response bytes by
 * {@link summarizeResponse}); the agent's median is used for all of its requests.
 */
import type { AssembleContextRequestInput } from '../../wire/proto.js';
import type { ConnectionOptions } from './context-client.js';
import { encodeRequestFrame, summarizeResponse } from './grpc-frames.js';
import { RawChannel, type RawOutcome } from './raw-grpc.js';
import { type RequestSource, seededRandom } from './request-source.js';
import { medianOfSorted } from './stats.js';

/** Share of the candidates' tokens that fits a constrained call: drawn uniformly in [LOW, HIGH). */
export const FIT_LOW = 0.3;
export const FIT_HIGH = 0.8;

/** Key of an agent's candidates: org and agent. */
export function agentKey(req: AssembleContextRequestInput): string {
  return `${req.org_id ?? ''}/${req.agent_id ?? ''}`;
}

/** Options of {@link probeCandidateTokens}. */
export interface ProbeOptions {
  /** Unconstrained calls per agent (default 3). */
  perAgent?: number;
  /** Per-call deadline, ms (default 2000). */
  timeoutMs?: number;
  /** Connection wait, ms (default 5000). */
  connectTimeoutMs?: number;
}

/**
 * Candidates' tokens per agent (median over `perAgent` unconstrained calls, sequential on one connection).
 * Agents whose calls all failed or had no candidate are absent.
 * @throws Error when the service cannot be reached.
 */
export async function probeCandidateTokens(
  conn: ConnectionOptions,
  requests: readonly AssembleContextRequestInput[],
  opts: ProbeOptions = {},
): Promise<Map<string, number>> {
  const perAgent = opts.perAgent ?? 3;
  const timeoutMs = opts.timeoutMs ?? 2000;
  const byAgent = new Map<string, AssembleContextRequestInput[]>();
  for (const req of requests) {
    const list = byAgent.get(agentKey(req)) ?? [];
    if (list.length < perAgent) list.push({ ...req, available_tokens: 0 });
    byAgent.set(agentKey(req), list);
  }
  const channel = new RawChannel(conn);
  try {
    await channel.ready(conn.addr, opts.connectTimeoutMs ?? 5000);
    const out = new Map<string, number>();
    for (const [key, list] of byAgent) {
      const seen: number[] = [];
      for (const req of list) {
        const tokens = await new Promise<number>((resolve) => {
          const done = (o: RawOutcome) =>
            resolve(o.code !== 0 || o.body === null ? 0 : summarizeResponse(o.body).candidateTokens);
          channel.call(encodeRequestFrame(req), { timeoutMs, keepBody: true }, { done });
        });
        if (tokens > 0) seen.push(tokens);
      }
      if (seen.length > 0) out.set(key, Math.round(medianOfSorted(seen.sort((a, b) => a - b))));
    }
    return out;
  } finally {
    channel.close();
  }
}

/** Options of {@link budgetMix}. */
export interface BudgetMixOptions {
  /** Share of calls that are constrained, 0..1. */
  share: number;
  /** PRNG seed of the draws (default 1). */
  seed?: number;
}

/** Draws, per call, whether it is constrained and, per distinct request, its `available_tokens`. */
export interface BudgetMix {
  /** `req` as sent: the same object, or its constrained twin (one per distinct request, reused). */
  apply(req: AssembleContextRequestInput): AssembleContextRequestInput;
  /** The constrained twin of `req` (drawn on first use, then reused). */
  twin(req: AssembleContextRequestInput): AssembleContextRequestInput;
  /** Agents with a known candidates' token count. */
  readonly agents: number;
}

/**
 * A seeded budget mix over per-agent candidates' tokens (`tokens`, e.g. from {@link probeCandidateTokens}).
 * Agents missing from `tokens` use the median of the others.
 * @throws RangeError when `share` is outside 0..1; Error when `share` > 0 and no agent has candidates.
 */
export function budgetMix(tokens: ReadonlyMap<string, number>, opts: BudgetMixOptions): BudgetMix {
  const share = opts.share;
  if (!(share >= 0 && share <= 1)) throw new RangeError(`budget mix: share must be in 0..1, got ${share}`);
  const known = [...tokens.values()].filter((t) => t > 0).sort((a, b) => a - b);
  if (share > 0 && known.length === 0) {
    throw new Error(
      'budget mix: no agent has candidates to constrain (the store holds no memories for these requests)',
    );
  }
  const fallback = Math.round(medianOfSorted(known));
  const rand = seededRandom(opts.seed ?? 1);
  const fitRand = seededRandom((opts.seed ?? 1) ^ 0x5eed);
  const twins = new WeakMap<object, AssembleContextRequestInput>();
  const twin = (req: AssembleContextRequestInput) => {
    let t = twins.get(req);
    if (t === undefined) {
      const candidates = tokens.get(agentKey(req)) ?? fallback;
      const fit = FIT_LOW + fitRand() * (FIT_HIGH - FIT_LOW);
      t = { ...req, available_tokens: Math.max(1, Math.floor(candidates * fit)) };
      twins.set(req, t);
    }
    return t;
  };
  return {
    agents: known.length,
    twin,
    apply: (req) => (share === 0 || rand() >= share ? req : twin(req)),
  };
}

/**
 * `base` with a budget mix applied to every request it hands out. When `base` lists its requests, their
 * twins are drawn up front (in list order, so the same seed gives the same twins) and listed too, so the
 * driver can encode them before the run.
 */
export function mixedSource(base: RequestSource, mix: BudgetMix, share: number): RequestSource {
  const twins = base.requests?.map((r) => mix.twin(r));
  return {
    name: `${base.name}, ${Math.round(share * 100)} % constrained`,
    requests: base.requests && twins ? [...base.requests, ...twins] : undefined,
    next: () => mix.apply(base.next()),
  };
}
