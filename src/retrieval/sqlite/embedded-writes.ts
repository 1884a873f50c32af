/** The embedded store's writes, each in one transaction, announced to this thread's read caches at once. */
import type Database from 'better-sqlite3';
import {
  type FeedbackKind,
  type FeedbackStore,
  feedbackUpdates,
  type InclusionCount,
  inclusionBatch,
  type UsefulnessUpdate,
  usefulnessDelta,
} from '../feedback.js';
import type { AgentWriter } from '../ports.js';
import { noteThreadWrite } from '../read-cache.js';
import {
  checkAgentRows,
  checkDirective,
  checkMemory,
  type DirectiveRow,
  dbRow,
  type MemoryDbRow,
  type MemoryRow,
  uuidArg,
} from '../store-rows.js';

export class EmbeddedWriter implements FeedbackStore, AgentWriter {
  protected readonly db: Database.Database;
  readonly #upsert: Database.Statement<MemoryDbRow & { scope: string; chars: number }>;
  readonly #deleteScope: Database.Statement<[string, string]>;
  readonly #setDirective: Database.Statement<DirectiveRow>;
  readonly #deleteDirective: Database.Statement<[string, string]>;
  readonly #feedbackBefore: Database.Statement<[string, string], { id: string; usefulness: number }>;
  readonly #feedback: Database.Statement<[number, string, string], { id: string; usefulness: number }>;
  readonly #inclusions: Database.Statement<[string]>;

  protected constructor(db: Database.Database) {
    this.db = db;
    this.#upsert = this.db.prepare(
      `INSERT INTO memories (id, org_id, agent_id, content, category, confidence, created_at, scope, chars)
       VALUES (@id, @org_id, @agent_id, @content, @category, @confidence, @created_at, @scope, @chars)
       ON CONFLICT (id) DO UPDATE SET org_id = excluded.org_id, agent_id = excluded.agent_id,
         content = excluded.content, category = excluded.category, confidence = excluded.confidence,
         created_at = excluded.created_at, scope = excluded.scope, chars = excluded.chars`,
    );
    this.#deleteScope = this.db.prepare('DELETE FROM memories WHERE org_id = ? AND agent_id = ?');
    this.#setDirective = this.db.prepare(
      `INSERT INTO directives (org_id, agent_id, content, injection_mode, version_id)
       VALUES (@org_id, @agent_id, @content, @injection_mode, @version_id)
       ON CONFLICT (org_id, agent_id) DO UPDATE SET content = excluded.content,
         injection_mode = excluded.injection_mode, version_id = excluded.version_id`,
    );
    this.#deleteDirective = this.db.prepare('DELETE FROM directives WHERE org_id = ? AND agent_id = ?');
    this.#feedbackBefore = this.db.prepare(
      'SELECT id, usefulness FROM memories WHERE +org_id = ? AND id IN (SELECT value FROM json_each(?))',
    );
    this.#feedback = this.db.prepare(
      `UPDATE memories SET usefulness = min(1.0, max(0.0, usefulness + ?))
       WHERE +org_id = ? AND id IN (SELECT value FROM json_each(?))
       RETURNING id, usefulness`,
    );
    this.#inclusions = this.db.prepare(
      `UPDATE memories SET inclusions = min(2147483647, inclusions + c.n)
       FROM (SELECT value ->> 0 AS id, value ->> 1 AS org, value ->> 2 AS n FROM json_each(?)) c
       WHERE memories.id = c.id AND memories.org_id = c.org`,
    );
  }

  /** Merges the FTS5 index into one segment. */
  optimize(): void {
    this.db.prepare("INSERT INTO memories_fts (memories_fts) VALUES ('optimize')").run();
    noteThreadWrite();
  }

  /** After a bulk import: searches read one segment (docs/design/retrieval.md). */
  finishImport(): void {
    this.optimize();
  }

  /** Upserts by id in one transaction; @throws IbexError for a bad row (nothing written). */
  upsertMemories(rows: readonly MemoryRow[]): number {
    const clean = rows.map(checkMemory);
    try {
      this.db.transaction(() => {
        for (const row of clean) this.#upsert.run(dbRow(row));
      })();
    } finally {
      noteThreadWrite();
    }
    return clean.length;
  }

  /** See {@link AgentWriter.replaceAgent}. */
  replaceAgent(orgId: string, agentId: string, rows: readonly MemoryRow[], directive?: DirectiveRow): number {
    const { org, agent, clean } = checkAgentRows(orgId, agentId, rows);
    const dir = directive === undefined ? undefined : checkDirective(directive);
    try {
      this.db.transaction(() => {
        this.#deleteScope.run(org, agent);
        for (const row of clean) this.#upsert.run(dbRow(row));
        if (dir !== undefined) this.#setDirective.run(dir);
      })();
    } finally {
      noteThreadWrite();
    }
    return clean.length;
  }

  deleteMemories(orgId: string, agentId: string): number {
    const changes = this.#deleteScope.run(uuidArg('org_id', orgId), uuidArg('agent_id', agentId)).changes;
    noteThreadWrite();
    return changes;
  }

  /** Stores a directive as given (contract.md §4.2 applies on read); @throws IbexError for a non-UUID id. */
  setDirective(directive: DirectiveRow): void {
    this.#setDirective.run(checkDirective(directive));
    noteThreadWrite();
  }

  deleteDirective(orgId: string, agentId: string): boolean {
    const changes = this.#deleteDirective.run(uuidArg('org_id', orgId), uuidArg('agent_id', agentId)).changes;
    noteThreadWrite();
    return changes > 0;
  }

  /** contract.md §7a, scoped by `org_id` in SQL so another org's memory is never read or written. */
  recordFeedback(orgId: string, memoryIds: readonly string[], kind: FeedbackKind): UsefulnessUpdate[] {
    const org = uuidArg('org_id', orgId);
    const ids = JSON.stringify(memoryIds);
    // IMMEDIATE: the write lock is taken before the read, so no other writer moves a value in between.
    const { before, after } = this.db
      .transaction(() => ({
        before: this.#feedbackBefore.all(org, ids),
        after: this.#feedback.all(usefulnessDelta(kind), org, ids),
      }))
      .immediate();
    noteThreadWrite();
    return feedbackUpdates(
      memoryIds,
      new Map(before.map((r) => [r.id, r.usefulness])),
      new Map(after.map((r) => [r.id, r.usefulness])),
    );
  }

  /** At most {@link INCLUSION_BATCH} rows, one statement; a row of another org changes nothing. */
  addInclusions(rows: readonly InclusionCount[]): number {
    if (!inclusionBatch(rows)) return 0;
    const payload = JSON.stringify(rows.map((r) => [r.memoryId, r.orgId, r.count]));
    try {
      return this.#inclusions.run(payload).changes;
    } finally {
      noteThreadWrite();
    }
  }

  counts(): { memories: number; directives: number; agents: number } {
    const m = this.db
      .prepare('SELECT COUNT(*) AS n, COUNT(DISTINCT org_id || agent_id) AS a FROM memories')
      .get() as { n: number; a: number };
    const d = this.db.prepare('SELECT COUNT(*) AS n FROM directives').get() as { n: number };
    return { memories: m.n, directives: d.n, agents: m.a };
  }

  close(): void {
    if (this.db.open) this.db.close();
  }
}
