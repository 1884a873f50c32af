// The budget mix of `load` and `replay`: LoCoMo calls always fit, so a seeded share carries an
// `available_tokens` (contract.md §6) fitting 30–80 % of the agent's candidates' tokens, the median of a
// few unconstrained probe calls' `memories_used` rows. Without it no load figure makes the packer choose.
import type { AssembleContextRequestInput } from '../../wire/proto.js';
import type { ConnectionOptions } from './context-client.js';
import { encodeRequestFrame, summarizeResponse } from './grpc-frames.js';
import { RawChannel, type RawOutcome } from './raw-grpc.js';
import { type RequestSource, seededRandom } from './request-source.js';
import { medianOfSorted } from './stats.js';

/** Share of the candidates' tokens that fits a constrained call: drawn uniformly in [LOW, HIGH). */
export const FIT_LOW = 0.3;
export const FIT_HIGH = 0.8;

export function agentKey(req: AssembleContextRequestInput): string {
  return `${req.org_id ?? ''}/${req.agent_id ?? ''}`;
}

export interface ProbeOptions {
  perAgent?: number;
  timeoutMs?: number;
  connectTimeoutMs?: number;
}

/**
 * Candidates' tokens per agent: median over `perAgent` unconstrained calls (absent when all failed).
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

export interface BudgetMixOptions {
  share: number;
  seed?: number;
}

export interface BudgetMix {
  /** `req` as sent: itself, or its constrained twin (one per distinct request, reused). */
  apply(req: AssembleContextRequestInput): AssembleContextRequestInput;
  twin(req: AssembleContextRequestInput): AssembleContextRequestInput;
  readonly agents: number;
}

/**
 * A seeded budget mix over per-agent candidates' tokens (missing agents: the others' median).
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

/** `base` with the mix applied; a listed source's twins are drawn up front in order and listed too. */
export function mixedSource(base: RequestSource, mix: BudgetMix, share: number): RequestSource {
  const twins = base.requests?.map((r) => mix.twin(r));
  return {
    name: `${base.name}, ${Math.round(share * 100)} % constrained`,
    requests: base.requests && twins ? [...base.requests, ...twins] : undefined,
    next: () => mix.apply(base.next()),
  };
}
