/**
 * LimitStatement: the default limit runs a statement with the limit written into its SQL (SQLite
 * re-plans a statement on every run that binds its LIMIT, even to the same value), any other limit the
 * bound form; both
 * give the same rows, ties and an inner `2 × limit` cut included (property test on random tables).
 */
import Database from 'better-sqlite3';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { LimitStatement } from '../../../src/retrieval/sqlite/limit-statement.js';

interface Row {
  id: number;
  score: number;
}

// The shape of the store's search: an inner ranking cut at 2 × limit, then a filter and the final cut.
const SQL = (limit: string) =>
  `SELECT t.id, t.score FROM (SELECT id FROM t ORDER BY score LIMIT 2 * ${limit}) f
   JOIN t ON t.id = f.id WHERE t.keep = @keep ORDER BY t.score, t.id LIMIT ${limit}`;

let db: Database.Database;

beforeEach(() => {
  db = new Database(':memory:');
  db.exec('CREATE TABLE t (id INTEGER PRIMARY KEY, score REAL NOT NULL, keep INTEGER NOT NULL)');
});

afterEach(() => db.close());

describe('LimitStatement', () => {
  it('runs the default limit on the statement with the literal, any other limit on the bound one', () => {
    const read = new LimitStatement<{ keep: number; limit: number }, Row>(db, SQL, 10);
    expect(read.statementFor(10).source).toContain('LIMIT 2 * 10) f');
    expect(read.statementFor(10).source).toMatch(/ORDER BY t\.score, t\.id LIMIT 10$/);
    expect(read.statementFor(11).source).toContain('LIMIT 2 * @limit) f');
    expect(read.statementFor(11).source).toMatch(/LIMIT @limit$/);
    expect(read.statementFor(1)).toBe(read.statementFor(11));
  });

  it('gives the rows of the bound form for the default limit (random tables with ties)', () => {
    const insert = db.prepare('INSERT INTO t (id, score, keep) VALUES (?, ?, ?)');
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.integer({ min: 0, max: 5 }), fc.integer({ min: 0, max: 1 })), {
          maxLength: 60,
        }),
        fc.integer({ min: 1, max: 30 }),
        fc.integer({ min: 0, max: 1 }),
        (rows, limit, keep) => {
          db.exec('DELETE FROM t');
          for (const [i, [score, k]] of rows.entries()) insert.run(i + 1, score, k);
          const literal = new LimitStatement<{ keep: number; limit: number }, Row>(db, SQL, limit);
          // A default no run uses: every limit goes through the bound statement.
          const bound = new LimitStatement<{ keep: number; limit: number }, Row>(db, SQL, 1_000_000);
          const got = literal.all({ keep, limit });
          expect(got).toEqual(bound.all({ keep, limit }));
          expect(got.length).toBeLessThanOrEqual(limit);
        },
      ),
      { numRuns: 200 },
    );
  });

  it('refuses a default limit that is not an integer ≥ 1 (it would be written into SQL)', () => {
    expect(() => new LimitStatement(db, SQL, 0)).toThrow(RangeError);
    expect(() => new LimitStatement(db, SQL, 2.5)).toThrow('defaultLimit must be an integer ≥ 1, got 2.5');
  });
});
