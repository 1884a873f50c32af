/**
 * The data a load bench runs on: an embedded store and the requests to drive against it.
 *
 * With a LoCoMo directory the conversations are ingested as `ibex-context ingest` would, and the requests
 * are their later-session turns (`load --locomo`'s source). Without one, a generated set of the same shape
 * and size stands in: 10 conversations of ~25 sessions × ~23 turns (~600 memories per agent with the
 * session summaries, LoCoMo has ~5,900 turns over 10 conversations), English-like text drawn from a Zipf
 * vocabulary so that full-text search matches as many rows as natural text does. It goes through the
 * same parser, ingest and request builder as LoCoMo, so the two runs differ only in the words.
 */

import path from 'node:path';
import { EmbeddedStore } from '../../src/retrieval/sqlite/embedded-store.js';
import { locomoRequests } from '../../src/tools/client/locomo-requests.js';
import { cyclingSource, type RequestSource } from '../../src/tools/client/request-source.js';
import {
  LOCOMO_ORG_ID,
  type LocomoConversation,
  parseLocomoSample,
  readLocomo,
} from '../../src/tools/locomo/dataset.js';
import { ingestLocomo } from '../../src/tools/locomo/ingest.js';
import { tempDir } from './bench-run.js';
import { seededRandom } from './synthetic.js';

/** The store and requests of a run. */
export interface LoadData {
  /** `locomo(<dir>)` or `synthetic(seed=…)`. */
  kind: string;
  agents: number;
  memories: number;
  requests: number;
  /** Requests for the driver (cycling). */
  source: RequestSource;
}

// The most frequent English words first (roughly by frequency), then topic words of chit-chat like
// LoCoMo's. Ranked Zipf sampling over this list makes short function words appear in most turns and the
// topic words in few, as in real dialogue.
const VOCABULARY = (
  "the i to and a you it of that is in my was for me so we have with but this on be just are it's " +
  "what do at really like that's so yeah all about they not your can how had been know one out if " +
  'get when up there some time would great good love it was think feel going much also make new ' +
  'thanks been lot glad things go from an always something by now see well really more awesome sounds ' +
  'our day last week weekend family kids friends work job school home trip fun amazing hope ' +
  'happy nice cool wow right way people life year years ago recently lately today tomorrow yesterday ' +
  'painting paint art class pottery camping hiking beach mountains lake park garden dog dogs cat pets ' +
  'book books reading novel music guitar piano concert band song songs movie movies game games ' +
  'running marathon race yoga gym workout dance dancing cooking recipe bake cake dinner lunch breakfast ' +
  'coffee tea wine restaurant travel vacation city country museum photo photos picture pictures ' +
  'volunteer shelter community support group counseling therapy career interview promotion boss ' +
  'project team meeting deadline business startup store shop sell selling market money budget ' +
  'car bike road road-trip flight plane hotel camp tent fire stars sunset sunrise ocean surfing ' +
  'festival parade birthday party wedding anniversary gift present surprise holiday christmas ' +
  'summer winter spring autumn rain snow sunny weather morning evening night ' +
  'sister brother mom dad mother father parents grandma grandpa son daughter husband wife partner ' +
  'adoption agency baby pregnant newborn toddler teenager college university degree study exam ' +
  'doctor hospital health injury recovery sick healthy meditation journal writing poem poetry ' +
  'transgender identity pride lgbtq activist speech conference workshop mentor mentoring ' +
  'instrument violin drums clarinet lessons practice performance stage audience ' +
  'sculpture canvas mural gallery exhibition colors blue green red yellow purple ' +
  'horse horses farm ranch garden flowers roses sunflowers vegetables tomatoes ' +
  'bowl pot vase clay kiln glaze wheel handmade necklace bracelet ring jewelry ' +
  'charity fundraiser donation homeless kids youth center library ' +
  'neighborhood house apartment moving moved renovation kitchen backyard porch ' +
  'video youtube podcast blog channel followers post posted photo shoot camera'
).split(/\s+/);

/** Distinct words of the generated text: the list above, then a long tail of made-up words. */
const VOCABULARY_SIZE = 20_000;

/**
 * {@link VOCABULARY} extended with pronounceable made-up words up to `size`. With Zipf s = 1 over 20,000
 * ranks the commonest word is ~9 % of the words (about 7 % for "the" in English), so common terms match
 * most rows, as they do in LoCoMo, while most words are rare.
 */
function vocabulary(rand: () => number, size: number): string[] {
  const words = [...new Set(VOCABULARY)];
  const seen = new Set(words);
  const consonants = 'bcdfghjklmnprstvwz';
  const vowels = 'aeiou';
  while (words.length < size) {
    let w = '';
    const syllables = 2 + Math.floor(rand() * 3);
    for (let i = 0; i < syllables; i++) {
      w += consonants[Math.floor(rand() * consonants.length)]! + vowels[Math.floor(rand() * vowels.length)]!;
    }
    if (!seen.has(w)) {
      seen.add(w);
      words.push(w);
    }
  }
  return words;
}

/** A sampler of words by Zipf rank: P(rank r) ∝ 1 / r^s. */
function zipfSampler(rand: () => number, words: readonly string[], s = 1): () => string {
  const n = words.length;
  const cumulative = new Float64Array(n);
  let total = 0;
  for (let r = 0; r < n; r++) {
    total += 1 / (r + 1) ** s;
    cumulative[r] = total;
  }
  return () => {
    const x = rand() * total;
    let lo = 0;
    let hi = n - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (cumulative[mid]! < x) lo = mid + 1;
      else hi = mid;
    }
    return words[lo]!;
  };
}

const SPEAKERS = [
  ['Caroline', 'Melanie'],
  ['Jon', 'Gina'],
  ['John', 'Maria'],
  ['Joanna', 'Nate'],
  ['Tim', 'John'],
  ['Audrey', 'Andrew'],
  ['James', 'John'],
  ['Deborah', 'Jolene'],
  ['Evan', 'Sam'],
  ['Calvin', 'Dave'],
] as const;

const MONTHS = ['January', 'February', 'March', 'April', 'May', 'June', 'July', 'August'];

/**
 * Generated LoCoMo-shaped conversations (raw samples run through `ingest`'s parser, so ids, timestamps
 * and memory rows are made exactly as for LoCoMo).
 */
export function syntheticConversations(seed = 0x10c0, count = 10): LocomoConversation[] {
  const rand = seededRandom(seed);
  const word = zipfSampler(rand, vocabulary(rand, VOCABULARY_SIZE));
  const between = (lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1));
  const sentence = (lo: number, hi: number) => {
    const n = between(lo, hi);
    const words: string[] = [];
    for (let i = 0; i < n; i++) words.push(word());
    const text = words.join(' ');
    return `${text.charAt(0).toUpperCase()}${text.slice(1)}${rand() < 0.3 ? '?' : rand() < 0.5 ? '!' : '.'}`;
  };
  const out: LocomoConversation[] = [];
  for (let c = 0; c < count; c++) {
    const [a, b] = SPEAKERS[c % SPEAKERS.length]!;
    const sample: Record<string, unknown> = {
      sample_id: `synthetic-${seed}-${c}`,
      speaker_a: a,
      speaker_b: b,
    };
    const sessions = between(20, 30);
    for (let s = 1; s <= sessions; s++) {
      const day = 1 + ((s * 5) % 28);
      const month = MONTHS[Math.min(MONTHS.length - 1, Math.floor((s - 1) / 4))]!;
      sample[`session_${s}_date_time`] =
        `${between(1, 12)}:${String(between(0, 59)).padStart(2, '0')} pm on ${day} ${month}, 2023`;
      const turns = between(16, 30);
      sample[`session_${s}`] = Array.from({ length: turns }, (_, t) => ({
        speaker: t % 2 === 0 ? a : b,
        dia_id: `D${s}:${t + 1}`,
        // One or two sentences per turn, ~20 words on average like LoCoMo's.
        text: rand() < 0.5 ? sentence(6, 24) : `${sentence(5, 14)} ${sentence(5, 14)}`,
      }));
      sample[`session_${s}_summary`] = `${a} and ${b} talked on ${day} ${month}, 2023. ${Array.from(
        { length: between(4, 7) },
        () => sentence(10, 22),
      ).join(' ')}`;
    }
    out.push(parseLocomoSample(sample, `<synthetic ${c}>`, `synthetic-${c}`));
  }
  return out;
}

/**
 * Fills `db` (a fresh file) with LoCoMo from `locomoDir`, or with {@link syntheticConversations}, and
 * builds the request source from the same conversations.
 */
export async function prepareLoadData(db: string, locomoDir?: string): Promise<LoadData> {
  const conversations = locomoDir ? await readLocomo(locomoDir) : syntheticConversations();
  const store = EmbeddedStore.open(db);
  let memories = 0;
  try {
    memories = (await ingestLocomo(store, conversations, LOCOMO_ORG_ID, { db })).memories;
  } finally {
    store.close();
  }
  const requests = locomoRequests(conversations).map((r) => r.request);
  const kind = locomoDir ? `locomo(${locomoDir})` : 'synthetic(seed=0x10c0, LoCoMo-shaped)';
  return {
    kind,
    agents: conversations.length,
    memories,
    requests: requests.length,
    source: cyclingSource(`${kind}: ${requests.length} turns`, requests),
  };
}

/**
 * The data of a load bench: {@link prepareLoadData} into `bench.db` of a fresh temporary directory named
 * from `prefix` (removed at exit), with the data line on stderr.
 */
export async function benchLoadData(
  prefix: string,
  locomoDir?: string,
): Promise<{ db: string; data: LoadData }> {
  const db = path.join(tempDir(prefix), 'bench.db');
  const data = await prepareLoadData(db, locomoDir);
  console.error(
    `data: ${data.kind}: ${data.agents} agents, ${data.memories} memories, ${data.requests} requests`,
  );
  return { db, data };
}
