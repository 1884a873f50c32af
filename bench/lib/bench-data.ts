/**
 * Generated bench data: a seeded embedded store of a few agents × a few hundred memories and the
 * requests that go with it, the same for every run of a seed.
 */

import { EmbeddedStore, type MemoryRow } from '../../src/retrieval/sqlite/embedded-store.js';
import { cyclingSource, type RequestSource } from '../../src/tools/client/request-source.js';
import type { AssembleContextRequestInput } from '../../src/wire/proto.js';
import { seededRandom } from './synthetic.js';

/** Shape of the generated data. */
export interface BenchDataOptions {
  seed?: number;
  orgs?: number;
  agentsPerOrg?: number;
  memoriesPerAgent?: number;
  /** Distinct requests, cycled by the driver. */
  requests?: number;
}

/** What was generated. */
export interface BenchData {
  agents: number;
  memories: number;
  requests: number;
  source: RequestSource;
  describe: string;
}

const WORDS = (
  'we planned the trip to the lake last summer and talked about sailing hiking camping with the kids ' +
  'budget deadline project meeting team launch release review design database migration backup ' +
  'birthday dinner recipe garden painting guitar concert marathon training doctor appointment school ' +
  'interview promotion volunteer shelter adoption family weekend morning evening coffee book movie ' +
  'music photo city beach mountain winter spring autumn friend sister brother mother father partner'
).split(' ');
const CATEGORIES = ['procedural', 'factual', 'preference', 'behavioral', 'episodic', 'notes'];
const MODELS = ['gpt-4o', 'gpt-4o-mini', 'claude-sonnet-4-5', 'claude-haiku-4-5'];

function uuid(rand: () => number): string {
  const h = Array.from({ length: 32 }, () => Math.floor(rand() * 16).toString(16));
  h[12] = '4';
  h[16] = (8 + Math.floor(rand() * 4)).toString(16);
  const s = h.join('');
  return `${s.slice(0, 8)}-${s.slice(8, 12)}-${s.slice(12, 16)}-${s.slice(16, 20)}-${s.slice(20)}`;
}

/**
 * Fills the embedded store `db` with `orgs × agentsPerOrg` agents of `memoriesPerAgent` memories each
 * (defaults 2 × 2 × 300: 20–80 words from a small vocabulary, so full-text search finds matches) plus a
 * directive per agent, and builds `requests` requests over those agents (query of 2–8 words, 0–4 turns of
 * history, models rotated). Same seed, same data.
 */
export function seedStore(db: string, opts: BenchDataOptions = {}): BenchData {
  const seed = opts.seed ?? 0x0fe1;
  const rand = seededRandom(seed);
  const between = (lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1));
  const words = (lo: number, hi: number) =>
    Array.from({ length: between(lo, hi) }, () => WORDS[Math.floor(rand() * WORDS.length)]!).join(' ');
  const perAgent = opts.memoriesPerAgent ?? 300;
  const tenants: { org: string; agent: string }[] = [];
  for (let o = 0; o < (opts.orgs ?? 2); o++) {
    const org = uuid(rand);
    for (let a = 0; a < (opts.agentsPerOrg ?? 2); a++) tenants.push({ org, agent: uuid(rand) });
  }
  const store = EmbeddedStore.open(db);
  try {
    for (const t of tenants) {
      const rows: MemoryRow[] = Array.from({ length: perAgent }, (_, i) => ({
        id: uuid(rand),
        org_id: t.org,
        agent_id: t.agent,
        content: `${words(20, 80)}.`,
        category: CATEGORIES[i % CATEGORIES.length]!,
        confidence: Math.round(rand() * 100) / 100,
        created_at: Date.UTC(2025, 0, 1) + i * 3_600_000,
      }));
      store.upsertMemories(rows);
      store.setDirective({
        org_id: t.org,
        agent_id: t.agent,
        content: `You are the assistant of agent ${t.agent.slice(0, 8)}. Answer briefly.`,
        injection_mode: 'system_first',
        version_id: uuid(rand),
      });
    }
  } finally {
    store.close();
  }
  const n = opts.requests ?? 1024;
  const requests: AssembleContextRequestInput[] = Array.from({ length: n }, (_, i) => {
    const t = tenants[Math.floor(rand() * tenants.length)]!;
    return {
      org_id: t.org,
      agent_id: t.agent,
      model: MODELS[i % MODELS.length]!,
      query: words(2, 8),
      recent_messages: Array.from({ length: between(0, 4) }, (_, k) => ({
        role: k % 2 === 0 ? 'user' : 'assistant',
        content: words(5, 30),
      })),
      request_id: `bench-${i}`,
    };
  });
  const describe = `synthetic(seed=${seed}, ${tenants.length} agents × ${perAgent} memories, ${n} requests)`;
  return {
    agents: tenants.length,
    memories: tenants.length * perAgent,
    requests: n,
    source: cyclingSource(describe, requests),
    describe,
  };
}
