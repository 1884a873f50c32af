/** Shared fixtures of the retrieval tests: temp stores with known memories. */
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { EmbeddedStore, type MemoryRow } from '../../src/retrieval/embedded-store.js';
import type { DirectiveSource, MemorySource, RetrievalSources } from '../../src/retrieval/retrieve.js';

/** A fresh directory under the OS temp dir; remove it with {@link removeTempDir}. */
export function makeTempDir(prefix = 'ibex-retrieval-'): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

export function removeTempDir(dir: string): void {
  fs.rmSync(dir, { recursive: true, force: true });
}

/** A store file in a new temp dir (nested, to exercise parent-directory creation). */
export function tempStore(): { store: EmbeddedStore; dir: string; file: string } {
  const dir = makeTempDir();
  const file = path.join(dir, 'nested', 'store.db');
  return { store: EmbeddedStore.open(file), dir, file };
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
