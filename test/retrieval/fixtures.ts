/** Shared fixtures of the retrieval tests: temp stores with known memories. */
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach } from 'vitest';
import {
  type DirectiveSource,
  type MemorySource,
  type RetrievalRequest,
  type RetrievalResult,
  type RetrievalSources,
  type RetrievalTimeouts,
  retrieve,
} from '../../src/retrieval/retrieve.js';
import { EmbeddedDirectiveSource, EmbeddedMemorySource } from '../../src/retrieval/sources.js';
import {
  EmbeddedStore,
  type MemoryRow,
  type OpenOptions,
} from '../../src/retrieval/sqlite/embedded-store.js';

/** A fresh directory under the OS temp dir; remove it with {@link removeTempDir}. */
export function makeTempDir(prefix = 'ibex-retrieval-'): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

export function removeTempDir(dir: string): void {
  fs.rmSync(dir, { recursive: true, force: true });
}

/** Per-file layout, as in datasets/locomo10 (flat keys, summaries next to the sessions). */
export const LOCOMO_FLAT = {
  speaker_a: 'Ann',
  speaker_b: 'Bob',
  session_1_date_time: '1:56 pm on 8 May, 2023',
  session_1: [
    { speaker: 'Ann', dia_id: 'D1:1', text: 'I adopted a cat named Miso.' },
    { speaker: 'Bob', dia_id: 'D1:2', text: 'Congrats! I started sailing lessons.', blip_caption: 'a boat' },
    { speaker: 'Ann', dia_id: 'D1:3', text: '   ' },
  ],
  session_1_summary: 'Ann adopted a cat; Bob sails.',
  session_2_date_time: '12:09 am on 13 September, 2023',
  session_2: [{ speaker: 'Bob', dia_id: 'D2:1', text: 'Miso knocked over my tea.' }],
  session_2_summary: 'Bob visited Ann.',
  session_3_date_time: '9:00 am on 1 October, 2023',
  qa: [{ question: 'What is the cat called?', answer: 'Miso', evidence: ['D1:1'], category: 1 }],
};

/** Upstream layout (locomo10.json): `conversation` wrapper, `sample_id`, summaries apart. */
export const LOCOMO_WRAPPED = {
  sample_id: 'conv-7',
  conversation: {
    speaker_a: 'Cy',
    speaker_b: 'Di',
    session_1_date_time: '10:00 am on 2 January, 2022',
    session_1: [
      { speaker: 'Cy', dia_id: 'D1:1', text: 'New year, new garden.' },
      { speaker: 'Di', dia_id: 'D1:2', text: 'Plant tomatoes!' },
    ],
  },
  session_summary: { session_1_summary: 'Cy plans a garden.' },
  qa: [],
};

/**
 * Writes the two conversations above into `dir` (created if missing), plus a non-JSON file the reader skips:
 * a LoCoMo dataset for tests, which must pass without the evaluation data.
 */
export function writeLocomoDataset(dir: string): void {
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, '26.json'), JSON.stringify(LOCOMO_FLAT));
  fs.writeFileSync(path.join(dir, 'wrapped.json'), JSON.stringify(LOCOMO_WRAPPED));
  fs.writeFileSync(path.join(dir, 'notes.txt'), 'ignored');
}

/** A store file in a new temp dir (nested, to exercise parent-directory creation). */
export function tempStore(): { store: EmbeddedStore; dir: string; file: string } {
  const dir = makeTempDir();
  const file = path.join(dir, 'nested', 'store.db');
  return { store: EmbeddedStore.open(file), dir, file };
}

/** What {@link useTempStore} hands a test file: the current test's store, its files, a way to reopen it. */
export interface TempStoreFixture {
  readonly store: EmbeddedStore;
  readonly dir: string;
  readonly file: string;
  /** Closes the store and opens its file again with `opts` (e.g. another `maxMemoryChars`). */
  reopen(opts?: OpenOptions): EmbeddedStore;
}

/**
 * A fresh {@link tempStore} for every test of the calling file (vitest beforeEach), closed and removed
 * after it; read it through the returned fixture, which always names the current test's store.
 */
export function useTempStore(): TempStoreFixture {
  let current: { store: EmbeddedStore; dir: string; file: string } | undefined;
  beforeEach(() => {
    current = tempStore();
  });
  afterEach(() => {
    current?.store.close();
    if (current) removeTempDir(current.dir);
    current = undefined;
  });
  const now = () => {
    if (!current) throw new Error('useTempStore: no store outside a test');
    return current;
  };
  return {
    get store() {
      return now().store;
    },
    get dir() {
      return now().dir;
    },
    get file() {
      return now().file;
    },
    reopen(opts) {
      const c = now();
      c.store.close();
      c.store = EmbeddedStore.open(c.file, opts);
      return c.store;
    },
  };
}

/** `n` memories of one org+agent, newest last, contents `"<tag> memory <i> about <topic>"`. */
export function memoriesOf(orgId: string, agentId: string, n: number, tag = 'note'): MemoryRow[] {
  const topics = ['gardening', 'painting', 'sailing', 'chess', 'baking'];
  return Array.from({ length: n }, (_, i) => ({
    id: randomUUID(),
    org_id: orgId,
    agent_id: agentId,
    content: `${tag} memory ${i} about ${topics[i % topics.length]}`,
    category: i % 2 === 0 ? 'episodic' : 'factual',
    confidence: 0.5 + (i % 5) / 10,
    created_at: Date.UTC(2024, 0, 1) + i * 60_000,
  }));
}

/** One `factual` memory of `content` (confidence 0.8) for org/agent, created at `i` minutes past 2024-01-01. */
export function memoryRow(orgId: string, agentId: string, content: string, i = 0): MemoryRow {
  return {
    id: randomUUID(),
    org_id: orgId,
    agent_id: agentId,
    content,
    category: 'factual',
    confidence: 0.8,
    created_at: Date.UTC(2024, 0, 1) + i * 60_000,
  };
}

/** Bundles sources for `retrieve` without `createSources` (tests mix HTTP memory with embedded directives). */
export function bundle(memory: MemorySource, directive: DirectiveSource): RetrievalSources {
  return {
    memory,
    directive,
    kind: { memory: 'http', directive: 'embedded' },
    async close() {
      await Promise.allSettled([memory.close(), directive.close()]);
    },
  };
}

/** Sources reading `store` in-process (both kinds `embedded`); closing them leaves the store open. */
export function embeddedSources(store: EmbeddedStore): RetrievalSources {
  return {
    memory: new EmbeddedMemorySource(store),
    directive: new EmbeddedDirectiveSource(store),
    kind: { memory: 'embedded', directive: 'embedded' },
    close: async () => {},
  };
}

/** Branch timings no in-process read comes near: 500 ms each. */
export const ROOMY_TIMEOUTS: RetrievalTimeouts = { wallMs: 500, directiveMs: 500, hotMs: 500, coldMs: 500 };

/** `retrieve` over {@link embeddedSources} of `store`, with `t` (default {@link ROOMY_TIMEOUTS}), never aborted. */
export function retrieveEmbedded(
  store: EmbeddedStore,
  req: RetrievalRequest,
  t: RetrievalTimeouts = ROOMY_TIMEOUTS,
): Promise<RetrievalResult> {
  return retrieve(embeddedSources(store), req, t, new AbortController().signal);
}

/** Memory-server faults all off (`startMemoryServer`'s `setFaults`), to reset a server between cases. */
export const NO_FAULTS = {
  latencyMs: 0,
  latencyDist: 'fixed',
  latencyRoute: 'both',
  errorRate: 0,
  malformedRate: 0,
  plantForeign: false,
  plantInvalid: false,
} as const;
