/**
 * The inclusion counter against a real embedded store: counts summed per memory and written in batches of
 * at most INCLUSION_BATCH rows, another org's ids changing nothing, the map bounded (dropped and counted
 * when full), a failed write dropped and counted, and close() writing what is left.
 */
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { INCLUSION_BATCH, type InclusionCount } from '../../src/retrieval/feedback.js';
import { InclusionCounter } from '../../src/retrieval/inclusion-counter.js';
import type { EmbeddedStore } from '../../src/retrieval/sqlite/embedded-store.js';
import { memories, tenant } from '../e2e/harness.js';
import { tempStore } from './fixtures.js';

const HOUR = 3_600_000;

describe('InclusionCounter', () => {
  const cleanups: (() => void | Promise<void>)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  function open(): { store: EmbeddedStore; file: string } {
    const t = tempStore();
    cleanups.push(() => {
      t.store.close();
      fs.rmSync(t.dir, { recursive: true, force: true });
    });
    return { store: t.store, file: t.file };
  }

  function inclusions(file: string): Map<string, number> {
    const db = new Database(file, { readonly: true });
    try {
      const rows = db.prepare('SELECT id, inclusions FROM memories').all() as {
        id: string;
        inclusions: number;
      }[];
      return new Map(rows.map((r) => [r.id, r.inclusions]));
    } finally {
      db.close();
    }
  }

  it('sums per memory and writes at most INCLUSION_BATCH rows per statement', async () => {
    const { store, file } = open();
    const t = tenant();
    const rows = memories(t.org, t.agent, INCLUSION_BATCH + 20);
    store.upsertMemories(rows);
    const batches: number[] = [];
    const counter = new InclusionCounter(
      {
        addInclusions: (r: readonly InclusionCount[]) => {
          batches.push(r.length);
          return store.addInclusions(r);
        },
      },
      { flushMs: HOUR, maxPending: 10_000 },
    );
    cleanups.push(() => counter.close());
    counter.record(
      t.org,
      rows.map((r) => r.id),
    );
    counter.record(t.org, [rows[0]!.id, rows[0]!.id]);
    // Another org naming these ids: counted in memory, changes no row.
    counter.record(randomUUID(), [rows[1]!.id]);
    expect(counter.stats()).toMatchObject({ recorded: INCLUSION_BATCH + 23, pending: INCLUSION_BATCH + 21 });
    await counter.flush();
    expect(batches).toEqual([INCLUSION_BATCH, 21]);
    const stored = inclusions(file);
    expect(stored.get(rows[0]!.id)).toBe(3);
    expect(stored.get(rows[1]!.id)).toBe(1);
    expect(stored.get(rows.at(-1)!.id)).toBe(1);
    expect(counter.stats()).toMatchObject({ flushed: INCLUSION_BATCH + 23, batches: 2, pending: 0 });
  });

  it('drops and counts inclusions of new memories once full, and close() writes what is left', async () => {
    const { store, file } = open();
    const t = tenant();
    const rows = memories(t.org, t.agent, 5);
    store.upsertMemories(rows);
    const counter = new InclusionCounter(store, { flushMs: HOUR, maxPending: 3 });
    counter.record(
      t.org,
      rows.map((r) => r.id),
    );
    // Memories already held still count when full.
    counter.record(t.org, [rows[0]!.id]);
    expect(counter.stats()).toMatchObject({ recorded: 4, droppedFull: 2, pending: 3 });
    await counter.close();
    counter.record(t.org, [rows[0]!.id]);
    expect(counter.stats()).toMatchObject({ recorded: 4, flushed: 4, pending: 0 });
    const stored = inclusions(file);
    expect(rows.map((r) => stored.get(r.id))).toEqual([2, 1, 1, 0, 0]);
  });

  it('drops and counts a failed write, telling onError, and keeps counting afterwards', async () => {
    const errors: unknown[] = [];
    let fail = true;
    const written: InclusionCount[] = [];
    const counter = new InclusionCounter(
      {
        addInclusions(r: readonly InclusionCount[]) {
          if (fail) throw new Error('store down');
          written.push(...r);
          return r.length;
        },
      },
      { flushMs: HOUR, maxPending: 100, onError: (e) => errors.push(e) },
    );
    cleanups.push(() => counter.close());
    const org = randomUUID();
    const id = randomUUID();
    counter.record(org, [id, id]);
    await counter.flush();
    expect(counter.stats()).toMatchObject({ droppedFailed: 2, flushed: 0, pending: 0 });
    expect(errors.map((e) => (e as Error).message)).toEqual(['store down']);
    fail = false;
    counter.record(org, [id]);
    await counter.flush();
    expect(written).toEqual([{ orgId: org, memoryId: id, count: 1 }]);
  });

  it('flushes on its timer', async () => {
    const { store, file } = open();
    const t = tenant();
    const rows = memories(t.org, t.agent, 2);
    store.upsertMemories(rows);
    const counter = new InclusionCounter(store, { flushMs: 20, maxPending: 10 });
    cleanups.push(() => counter.close());
    counter.record(t.org, [rows[1]!.id]);
    const end = Date.now() + 5000;
    while (counter.stats().flushed === 0 && Date.now() < end) await new Promise((r) => setTimeout(r, 10));
    expect(inclusions(file).get(rows[1]!.id)).toBe(1);
  });
});
