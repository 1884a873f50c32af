/**
 * The read cache's write check: a write through this thread empties it at once; a commit by a
 * connection outside it (another process, as `ingest` is) within DATA_VERSION_CHECK_MS, on an injected
 * clock; `PRAGMA data_version` is read at most once per interval whatever the number of reads.
 */
import path from 'node:path';
import Database from 'better-sqlite3';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  DATA_VERSION_CHECK_MS,
  noteThreadWrite,
  ReadCache,
  WriteWatch,
} from '../../src/retrieval/read-cache.js';
import { makeTempDir, removeTempDir } from './fixtures.js';

let dir: string;
let reader: Database.Database;
let writer: Database.Database;
let now: number;
let cache: ReadCache<number>;

beforeEach(() => {
  dir = makeTempDir('ibex-read-cache-');
  const file = path.join(dir, 'db.sqlite');
  writer = new Database(file);
  writer.pragma('journal_mode = WAL');
  writer.exec('CREATE TABLE t (v INTEGER)');
  reader = new Database(file);
  now = 1000;
  cache = new ReadCache(new WriteWatch(reader, () => now));
});

afterEach(() => {
  reader.close();
  writer.close();
  removeTempDir(dir);
});

describe('ReadCache write check', () => {
  it("another connection's commit is seen once DATA_VERSION_CHECK_MS has passed, not before", () => {
    expect(cache.get('k', () => 1)).toBe(1);
    writer.exec('INSERT INTO t VALUES (1)');
    now += DATA_VERSION_CHECK_MS - 1;
    expect(cache.get('k', () => 2)).toBe(1);
    now += 1;
    expect(cache.get('k', () => 2)).toBe(2);
    // No commit since: the next check finds the same version and keeps the entry.
    now += DATA_VERSION_CHECK_MS;
    expect(cache.get('k', () => 3)).toBe(2);
  });

  it('a write through this thread is seen at once, without waiting for the check', () => {
    expect(cache.get('k', () => 1)).toBe(1);
    noteThreadWrite();
    expect(cache.get('k', () => 2)).toBe(2);
    expect(cache.get('k', () => 3)).toBe(2);
  });

  it('reads PRAGMA data_version at most once per interval, shared by the caches of one connection', () => {
    let pragmas = 0;
    const counting = {
      prepare: (sql: string) => {
        const stmt = reader.prepare(sql);
        return {
          pluck: () => ({
            get: () => {
              pragmas++;
              return stmt.pluck().get();
            },
          }),
        };
      },
    } as unknown as Database.Database;
    const watch = new WriteWatch(counting, () => now);
    const hot = new ReadCache<number>(watch);
    const directive = new ReadCache<number>(watch);
    for (let i = 0; i < 50; i++) {
      hot.get('a', () => i);
      directive.get('a', () => i);
    }
    expect(pragmas).toBe(1);
    now += DATA_VERSION_CHECK_MS;
    hot.get('a', () => 0);
    directive.get('a', () => 0);
    expect(pragmas).toBe(2);
  });
});

describe('ReadCache maxAgeMs', () => {
  it('serves an entry up to maxAgeMs after it was stored, then loads it again', () => {
    let t = 0;
    const aged = new ReadCache<number>({ stamp: () => 0 }, { maxAgeMs: 100, now: () => t });
    expect(aged.get('k', () => 1)).toBe(1);
    t = 100;
    expect(aged.get('k', () => 2)).toBe(1);
    t = 101;
    expect(aged.get('k', () => 2)).toBe(2);
    t = 150;
    expect(aged.get('k', () => 3)).toBe(2);
  });
});
