// Where load requests come from; the synthetic source is seeded, so a seed gives the same sequence.
import { CapabilityCatalog } from '../../budget/catalog.js';
import type { AssembleContextRequestInput, Message } from '../../wire/proto.js';

export interface RequestSource {
  /** Short description for reports (`synthetic(seed=1)`). */
  readonly name: string;
  /** The next request; do not mutate it (sources hand out the same object again). */
  next(): AssembleContextRequestInput;
  readonly requests?: readonly AssembleContextRequestInput[];
}

export interface SyntheticSourceOptions {
  seed?: number;
  models?: readonly string[];
  orgs?: number;
  agentsPerOrg?: number;
  /** Distinct requests generated up front and then cycled (default 1024). */
  distinct?: number;
}

/** mulberry32: small, fast, good enough for test data; not for anything secret. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function randomUuid(rand: () => number): string {
  const hex = Array.from({ length: 32 }, () => Math.floor(rand() * 16).toString(16));
  hex[12] = '4';
  hex[16] = ((Math.floor(rand() * 4) & 0x3) | 0x8).toString(16);
  const h = hex.join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

const WORDS = (
  'what when where did we decide about the project deadline budget meeting trip family dog garden ' +
  'book recipe painting concert hiking camp school job interview promotion friend sister brother ' +
  'weekend plan remember last time said favourite color movie song city beach mountain coffee ' +
  'morning evening birthday gift doctor running race marathon guitar lesson class support group ' +
  'adoption counseling career volunteer shelter photo pottery workshop vacation summer winter'
).split(' ');

function sentence(rand: () => number, min: number, max: number): string {
  const n = min + Math.floor(rand() * (max - min + 1));
  const words: string[] = [];
  for (let i = 0; i < n; i++) words.push(WORDS[Math.floor(rand() * WORDS.length)]!);
  const text = words.join(' ');
  return `${text.charAt(0).toUpperCase()}${text.slice(1)}?`;
}

/** Synthetic requests from a fixed org/agent pool and the seeded generator, all made up front. */
export function syntheticSource(opts: SyntheticSourceOptions = {}): RequestSource {
  const seed = opts.seed ?? 1;
  const rand = seededRandom(seed);
  const models = opts.models ?? CapabilityCatalog.create().modelIds();
  if (models.length === 0) throw new Error('syntheticSource: no models to rotate over');
  const pairs: { org: string; agent: string }[] = [];
  for (let o = 0; o < (opts.orgs ?? 2); o++) {
    const org = randomUuid(rand);
    for (let a = 0; a < (opts.agentsPerOrg ?? 4); a++) pairs.push({ org, agent: randomUuid(rand) });
  }
  if (pairs.length === 0) throw new Error('syntheticSource: the org/agent pool is empty');
  const distinct = Math.max(1, opts.distinct ?? 1024);
  const requests: AssembleContextRequestInput[] = [];
  for (let i = 0; i < distinct; i++) {
    const pair = pairs[Math.floor(rand() * pairs.length)]!;
    const history: Message[] = [];
    const turns = Math.floor(rand() * 5);
    for (let t = 0; t < turns; t++) {
      history.push({ role: t % 2 === 0 ? 'user' : 'assistant', content: sentence(rand, 5, 30) });
    }
    requests.push({
      org_id: pair.org,
      agent_id: pair.agent,
      session_id: `synthetic-${seed}-${i % 64}`,
      query: sentence(rand, 3, 12),
      model: models[i % models.length]!,
      recent_messages: history,
    });
  }
  let i = 0;
  return {
    name: `synthetic(seed=${seed}, ${pairs.length} agents)`,
    requests,
    next: () => requests[i++ % requests.length]!,
  };
}

export function cyclingSource(name: string, requests: readonly AssembleContextRequestInput[]): RequestSource {
  if (requests.length === 0) throw new Error(`${name}: no requests`);
  let i = 0;
  return { name, requests, next: () => requests[i++ % requests.length]! };
}
