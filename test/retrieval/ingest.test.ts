import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ftsSegments } from '../../bench/lib/fts-segments.js';
import { parseDirectiveObject } from '../../src/retrieval/directive.js';
import type { AgentWriter } from '../../src/retrieval/ports.js';
import { EmbeddedStore } from '../../src/retrieval/sqlite/embedded-store.js';
import { SCHEMA_VERSION } from '../../src/retrieval/sqlite/store-schema.js';
import { run } from '../../src/tools/cli/commands/ingest-cli.js';
import {
  LOCOMO_MEMORY_NS,
  LOCOMO_ORG_ID,
  locomoAgentId,
  locomoConfidence,
  parseLocomoDate,
  readLocomo,
} from '../../src/tools/locomo/dataset.js';
import { ingestLocomo } from '../../src/tools/locomo/ingest.js';
import { uuidV5 } from '../../src/util/uuid.js';
import { makeTempDir, removeTempDir, writeLocomoDataset } from './fixtures.js';

let dir: string;
let data: string;

beforeAll(() => {
  dir = makeTempDir('ibex-ingest-');
  data = path.join(dir, 'locomo');
  writeLocomoDataset(data);
});
afterAll(() => removeTempDir(dir));

describe('LoCoMo reading', () => {
  it('parses LoCoMo dates as UTC', () => {
    expect(parseLocomoDate('1:56 pm on 8 May, 2023')).toBe(Date.UTC(2023, 4, 8, 13, 56));
    expect(parseLocomoDate('12:09 am on 13 September, 2023')).toBe(Date.UTC(2023, 8, 13, 0, 9));
    expect(parseLocomoDate('12:30 pm on 1 Jan, 2024')).toBe(Date.UTC(2024, 0, 1, 12, 30));
    expect(parseLocomoDate('sometime')).toBeNull();
  });

  it('derives stable ids and confidences', () => {
    expect(locomoAgentId('/any/where/26.json')).toBe(locomoAgentId('26'));
    expect(locomoAgentId('26.json')).toBe(uuidV5('locomo:26', '5d2f6a1e-8c4b-4f0e-9a7d-2b1c3e4f5a60'));
    expect(locomoAgentId('26.json')).not.toBe(locomoAgentId('30.json'));
    const c = locomoConfidence('x');
    expect(c).toBe(locomoConfidence('x'));
    for (const id of ['a', 'b', 'c', 'd', 'e']) {
      expect(locomoConfidence(id)).toBeGreaterThanOrEqual(0.5);
      expect(locomoConfidence(id)).toBeLessThanOrEqual(1);
    }
  });

  it('reads both layouts with sessions, turns, summaries and QA', async () => {
    const convs = await readLocomo(data);
    expect(convs.map((c) => c.sampleId)).toEqual(['26', 'conv-7']);
    const [a, b] = convs as [(typeof convs)[0], (typeof convs)[0]];
    expect(a.agentId).toBe(locomoAgentId('26.json'));
    expect(b.agentId).toBe(locomoAgentId('conv-7'));
    expect([a.speakerA, a.speakerB]).toEqual(['Ann', 'Bob']);
    // Session 3 has a date but no turn list: not a session.
    expect(a.sessions.map((s) => s.index)).toEqual([1, 2]);
    expect(a.sessions[0]!.turns.map((t) => t.diaId)).toEqual(['D1:1', 'D1:2']);
    expect(a.sessions[0]!.turns[1]).toMatchObject({
      speaker: 'Bob',
      imageCaption: 'a boat',
      createdAt: Date.UTC(2023, 4, 8, 13, 56) + 1000,
      memoryId: uuidV5(`${a.agentId}:D1:2`, LOCOMO_MEMORY_NS),
    });
    expect(a.sessions[1]!.summary).toBe('Bob visited Ann.');
    expect(a.qa).toEqual([
      { question: 'What is the cat called?', answer: 'Miso', evidence: ['D1:1'], category: 1 },
    ]);
    expect(b.sessions[0]!.summary).toBe('Cy plans a garden.');
  });

  it('names the file of a broken sample', async () => {
    const bad = path.join(dir, 'bad');
    fs.mkdirSync(bad);
    fs.writeFileSync(path.join(bad, 'x.json'), JSON.stringify({ speaker_a: 'A' }));
    await expect(readLocomo(bad)).rejects.toThrow(/x\.json: speaker_a and speaker_b must be strings/);
  });
});

describe('ingest into the embedded store', () => {
  it('writes memories, summaries and a directive per agent, idempotently', async () => {
    const db = path.join(dir, 'db', 'store.db');
    const convs = await readLocomo(data);
    const store = EmbeddedStore.open(db);
    try {
      const first = await ingestLocomo(store, convs, LOCOMO_ORG_ID, { db: store.path });
      // 26: 3 non-blank turns + 2 summaries; conv-7: 2 turns + 1 summary.
      expect(first.memories).toBe(8);
      expect(first.directives).toBe(2);
      expect(first.agents.map((x) => [x.sample_id, x.memories])).toEqual([
        ['26', 5],
        ['conv-7', 3],
      ]);
      expect(store.counts()).toEqual({ memories: 8, directives: 2, agents: 2 });
      expect(ftsSegments(db)).toBe(1);

      const agent = locomoAgentId('26.json');
      const hot = store.hot(LOCOMO_ORG_ID, agent);
      expect(hot.map((h) => [h.memory.category, h.memory.content])).toEqual([
        ['factual', 'Bob visited Ann.'],
        ['episodic', 'Bob: Miso knocked over my tea.'],
        ['factual', 'Ann adopted a cat; Bob sails.'],
        ['episodic', 'Bob: Congrats! I started sailing lessons.'],
        ['episodic', 'Ann: I adopted a cat named Miso.'],
      ]);
      expect(hot[4]!.memory.id).toBe(uuidV5(`${agent}:D1:1`, LOCOMO_MEMORY_NS));
      expect(hot[4]!.memory.confidence).toBe(locomoConfidence(hot[4]!.memory.id));
      expect(hot[4]!.memory.created_at).toBe('2023-05-08T13:56:00.000Z');
      expect(store.search(LOCOMO_ORG_ID, agent, 'Who is Miso?').length).toBe(2);

      const directive = parseDirectiveObject(store.getDirective(LOCOMO_ORG_ID, agent));
      expect(directive?.content).toMatch(/^You are the assistant of Ann and Bob\./);
      expect(directive?.injection_mode).toBe('system_first');

      const again = await ingestLocomo(store, await readLocomo(data), LOCOMO_ORG_ID, { db: store.path });
      expect(again).toEqual(first);
      expect(store.counts()).toEqual({ memories: 8, directives: 2, agents: 2 });
      expect(store.hot(LOCOMO_ORG_ID, agent)).toEqual(hot);
    } finally {
      store.close();
    }
  });

  it('writes through any AgentWriter: each agent replaced whole, then finishImport once', async () => {
    const convs = await readLocomo(data);
    const calls: string[] = [];
    const writer: AgentWriter = {
      replaceAgent: async (org, agent, rows, directive) => {
        expect(rows.every((r) => r.org_id === org && r.agent_id === agent)).toBe(true);
        expect(directive?.agent_id).toBe(agent);
        calls.push(`${agent}:${rows.length}`);
        return rows.length;
      },
      finishImport: () => {
        calls.push('finish');
      },
    };
    const progress: number[][] = [];
    const summary = await ingestLocomo(writer, convs, LOCOMO_ORG_ID, {
      db: 'fake',
      onAgent: (...p) => progress.push(p),
    });
    expect(summary.db).toBe('fake');
    expect(calls).toEqual([`${locomoAgentId('26.json')}:5`, `${locomoAgentId('conv-7')}:3`, 'finish']);
    expect(progress).toEqual([
      [1, 2, 5],
      [2, 2, 8],
    ]);

    calls.length = 0;
    await expect(ingestLocomo(writer, convs, 'not-a-uuid', { db: 'fake' })).rejects.toThrow(
      /org must be a UUID/,
    );
    expect(calls).toEqual([]);
  });

  it('CLI: prints the JSON summary; bad arguments exit 2', async () => {
    const db = path.join(dir, 'cli.db');
    const out: string[] = [];
    const spy = vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => {
      out.push(String(chunk));
      return true;
    });
    const err = vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    try {
      const org = '0b8e2f3c-1111-4a2b-9c3d-4e5f6a7b8c9d';
      expect(await run(['--locomo', data, '--db', db, '--org', org.toUpperCase(), '--json'])).toBe(0);
      expect(await run(['--db', db])).toBe(2);
      expect(await run(['--locomo', data, '--org', 'nope'])).toBe(2);
      expect(await run(['--locomo', path.join(dir, 'missing'), '--db', db])).toBe(1);
      const summary = JSON.parse(out.join(''));
      expect(summary).toMatchObject({ db, org_id: org, memories: 8, directives: 2 });
      expect(summary.agents.map((a: { agent_id: string }) => a.agent_id)).toEqual([
        locomoAgentId('26.json'),
        locomoAgentId('conv-7'),
      ]);
    } finally {
      spy.mockRestore();
      err.mockRestore();
    }
  });
});

/** The schema every store file had before `PRAGMA user_version` 2 (commit ff49bfe). */
const SCHEMA_V0 = `
CREATE TABLE memories (pk INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, org_id TEXT NOT NULL,
  agent_id TEXT NOT NULL, content TEXT NOT NULL, category TEXT NOT NULL,
  confidence REAL NOT NULL CHECK (confidence >= 0 AND confidence <= 1), created_at INTEGER NOT NULL,
  scope TEXT NOT NULL);
CREATE INDEX memories_scope_recency ON memories (org_id, agent_id, created_at DESC, confidence DESC, id);
CREATE INDEX memories_agent_recency ON memories (agent_id, created_at DESC, confidence DESC, id);
CREATE VIRTUAL TABLE memories_fts USING fts5(content, scope, content='memories', content_rowid='pk',
  tokenize='unicode61 remove_diacritics 2');
CREATE TRIGGER memories_ai AFTER INSERT ON memories BEGIN
  INSERT INTO memories_fts (rowid, content, scope) VALUES (new.pk, new.content, new.scope);
END;
CREATE TRIGGER memories_ad AFTER DELETE ON memories BEGIN
  INSERT INTO memories_fts (memories_fts, rowid, content, scope) VALUES ('delete', old.pk, old.content, old.scope);
END;
CREATE TRIGGER memories_au AFTER UPDATE ON memories BEGIN
  INSERT INTO memories_fts (memories_fts, rowid, content, scope) VALUES ('delete', old.pk, old.content, old.scope);
  INSERT INTO memories_fts (rowid, content, scope) VALUES (new.pk, new.content, new.scope);
END;
CREATE TABLE directives (org_id TEXT NOT NULL, agent_id TEXT NOT NULL, content TEXT,
  injection_mode TEXT NOT NULL, version_id TEXT NOT NULL, PRIMARY KEY (org_id, agent_id)) WITHOUT ROWID;
`;

describe('schema migration (PRAGMA user_version)', () => {
  const org = '3f0c9a52-7d1e-4b6a-8c2f-0a1b2c3d4e5f';
  const agent = '6a7b8c9d-0e1f-4a2b-9c3d-4e5f6a7b8c90';
  const rows: [string, string][] = [
    ['0d5e9c8a-1b2c-4d3e-8f4a-5b6c7d8e9f01', 'Ann: I adopted a cat named Miso.'],
    ['0d5e9c8a-1b2c-4d3e-8f4a-5b6c7d8e9f02', '用户喜欢喝绿茶，每天早上都喝一杯'],
    ['0d5e9c8a-1b2c-4d3e-8f4a-5b6c7d8e9f03', '😀'.repeat(12)],
  ];

  function oldStore(file: string, userVersion = 0): void {
    const db = new Database(file);
    db.exec(SCHEMA_V0);
    const insert = db.prepare(
      'INSERT INTO memories (id, org_id, agent_id, content, category, confidence, created_at, scope) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
    );
    rows.forEach(([id, content], i) => {
      insert.run(
        id,
        org,
        agent,
        content,
        'episodic',
        0.9,
        1_700_000_000_000 + i,
        `a${agent.replaceAll('-', '')}`,
      );
    });
    db.prepare("INSERT INTO directives VALUES (?, ?, 'Be brief.', 'system_first', ?)").run(
      org,
      agent,
      rows[0]![0],
    );
    db.pragma(`user_version = ${userVersion}`);
    db.close();
  }

  it('an old-schema file opens, is migrated once, and serves hot, search (CJK too), caps and directives', () => {
    const file = path.join(dir, 'old.db');
    oldStore(file);
    const store = EmbeddedStore.open(file, { maxMemoryChars: 12 });
    try {
      expect(store.counts()).toEqual({ memories: 3, directives: 1, agents: 1 });
      expect(store.search(org, agent, 'Miso').map((h) => h.memory.id)).toEqual([rows[0]![0]]);
      expect(store.search(org, agent, '绿茶').map((h) => h.memory.id)).toEqual([rows[1]![0]]);
      // The stored length is filled by the migration, in code points: 12 emoji (24 UTF-16 units) fit a
      // cap of 12; the 16- and 32-character memories do not.
      expect(store.hot(org, agent).map((h) => h.oversize ?? false)).toEqual([false, true, true]);
      expect(store.getDirective(org, agent)?.content).toBe('Be brief.');
      // Writes after the migration keep the index in step.
      store.deleteMemories(org, agent);
      expect(store.search(org, agent, 'Miso')).toEqual([]);
    } finally {
      store.close();
    }
    const db = new Database(file, { readonly: true });
    expect(db.pragma('user_version', { simple: true })).toBe(SCHEMA_VERSION);
    db.close();
    // Opening again is a no-op.
    EmbeddedStore.open(file).close();
  });

  it('a version-2 file gains the feedback columns, neutral and never included, keeping its index', () => {
    const file = path.join(dir, 'v2.db');
    const fresh = EmbeddedStore.open(file);
    fresh.upsertMemories(
      rows.map(([id, content], i) => ({
        id,
        org_id: org,
        agent_id: agent,
        content,
        category: 'episodic',
        confidence: 0.9,
        created_at: 1_700_000_000_000 + i,
      })),
    );
    fresh.close();
    // What version 2 wrote: the same table without the two columns.
    const raw = new Database(file);
    raw.exec('ALTER TABLE memories DROP COLUMN usefulness; ALTER TABLE memories DROP COLUMN inclusions;');
    raw.pragma('user_version = 2');
    raw.close();
    const store = EmbeddedStore.open(file);
    try {
      const [hit] = store.search(org, agent, 'Miso');
      expect(hit?.memory).toMatchObject({ id: rows[0]![0], usefulness: 0.5, retrieval_count: 0 });
      expect(store.recordFeedback(org, [rows[0]![0]], 'helpful')).toEqual([
        { memoryId: rows[0]![0], previous: 0.5, current: 0.6 },
      ]);
      expect(store.addInclusions([{ orgId: org, memoryId: rows[1]![0], count: 3 }])).toBe(1);
      expect(store.hot(org, agent).find((h) => h.memory.id === rows[1]![0])?.memory.retrieval_count).toBe(3);
    } finally {
      store.close();
    }
    const db = new Database(file, { readonly: true });
    expect(db.pragma('user_version', { simple: true })).toBe(SCHEMA_VERSION);
    db.close();
  });

  it('a file from a newer schema is refused with its version, not rewritten', () => {
    const file = path.join(dir, 'newer.db');
    oldStore(file, SCHEMA_VERSION + 1);
    expect(() => EmbeddedStore.open(file)).toThrow(
      `schema version ${SCHEMA_VERSION + 1} is newer than this build`,
    );
  });
});
