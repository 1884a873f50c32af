/**
 * The CPU pool's waiting line is fair across orgs. Properties over random sequences of
 * pushes (by org), withdrawals from anywhere and shifts: per-org FIFO order, no starvation (round-robin),
 * withdrawn entries never served, exact sizes.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type FairEntry, FairQueue, unqueued } from '../../src/pool/fair-queue.js';

interface Item extends FairEntry {
  org: string;
  seq: number;
}

type Op = { kind: 'push'; org: number } | { kind: 'remove'; pick: number } | { kind: 'shift' };

const op: fc.Arbitrary<Op> = fc.oneof(
  { weight: 5, arbitrary: fc.integer({ min: 0, max: 4 }).map((org) => ({ kind: 'push' as const, org })) },
  { weight: 2, arbitrary: fc.nat().map((pick) => ({ kind: 'remove' as const, pick })) },
  { weight: 4, arbitrary: fc.constant({ kind: 'shift' as const }) },
);

/** Replays `ops`; checks invariants as it goes and returns what was served. */
function replay(ops: readonly Op[]) {
  const q = new FairQueue<Item>();
  const waiting = new Map<string, Item[]>();
  const served: Item[] = [];
  const removed = new Set<Item>();
  /** For each org: orgs served since it was last served (or since it started waiting). */
  const servedSince = new Map<string, Map<string, number>>();
  let seq = 0;
  for (const o of ops) {
    if (o.kind === 'push') {
      const org = `org-${o.org}`;
      const item: Item = { ...unqueued(), org, seq: seq++ };
      q.push(org, item);
      if (!waiting.has(org)) {
        waiting.set(org, []);
        servedSince.set(org, new Map());
      }
      waiting.get(org)!.push(item);
    } else if (o.kind === 'remove') {
      const all = [...waiting.values()].flat();
      if (all.length === 0) continue;
      const item = all[o.pick % all.length]!;
      q.remove(item);
      removed.add(item);
      const line = waiting.get(item.org)!;
      line.splice(line.indexOf(item), 1);
      if (line.length === 0) {
        waiting.delete(item.org);
        servedSince.delete(item.org);
      }
    } else {
      const item = q.shift();
      if (waiting.size === 0) {
        expect(item).toBeNull();
        continue;
      }
      expect(item).not.toBeNull();
      const line = waiting.get(item!.org)!;
      // Per-org FIFO: the served item is its org's oldest waiting one.
      expect(item).toBe(line[0]);
      line.shift();
      served.push(item!);
      // No starvation: while an org waits, no other org is served twice before it is served once.
      for (const [org, since] of servedSince) {
        if (org === item!.org) continue;
        const n = (since.get(item!.org) ?? 0) + 1;
        expect(n, `${item!.org} served twice while ${org} waited`).toBeLessThanOrEqual(1);
        since.set(item!.org, n);
      }
      if (line.length === 0) {
        waiting.delete(item!.org);
        servedSince.delete(item!.org);
      } else {
        servedSince.set(item!.org, new Map());
      }
    }
    const total = [...waiting.values()].reduce((s, l) => s + l.length, 0);
    expect(q.size).toBe(total);
    expect(q.orgs).toBe(waiting.size);
    for (const [org, line] of waiting) expect(q.sizeOf(org)).toBe(line.length);
  }
  return { q, served, removed, waiting };
}

describe('FairQueue (CPU pool line, fair across orgs)', () => {
  it('serves each org in FIFO order, round-robin across orgs, never a withdrawn entry, with exact sizes', () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 200 }), (ops) => {
        const { q, served, removed, waiting } = replay(ops);
        for (const item of served) expect(removed.has(item)).toBe(false);
        // Draining serves exactly what still waits.
        const rest = q.drain();
        expect(rest.length).toBe([...waiting.values()].reduce((s, l) => s + l.length, 0));
        expect(q.size).toBe(0);
        expect(q.shift()).toBeNull();
      }),
      { numRuns: 300 },
    );
  });

  it('puts a quiet org first in line behind at most one call of each flooding org', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 50 }), fc.integer({ min: 1, max: 4 }), (flood, floodOrgs) => {
        const q = new FairQueue<Item>();
        let seq = 0;
        for (let i = 0; i < flood; i++)
          for (let o = 0; o < floodOrgs; o++)
            q.push(`noisy-${o}`, { ...unqueued(), org: `noisy-${o}`, seq: seq++ });
        const quiet: Item = { ...unqueued(), org: 'quiet', seq: seq++ };
        q.push('quiet', quiet);
        const order = q.drain();
        // The quiet call waits for at most one round of the noisy orgs, however long their lines.
        expect(order.indexOf(quiet)).toBeLessThanOrEqual(floodOrgs);
      }),
    );
  });

  it('shiftWhere serves the oldest eligible entry of the first org (from the cursor) that has one, else null', () => {
    // Reference: the orgs in rotation order from the cursor, each org's line oldest first. The real
    // queue's rotation is observed by shifting a copy of the same pushes, so only eligibility is modelled.
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.integer({ min: 0, max: 3 }), fc.boolean()), { maxLength: 40 }),
        fc.array(fc.boolean(), { maxLength: 40 }),
        (pushes, flips) => {
          const q = new FairQueue<Item & { ok: boolean }>();
          const lines = new Map<string, (Item & { ok: boolean })[]>();
          const rotation: string[] = [];
          pushes.forEach(([o, ok], seq) => {
            const org = `org-${o}`;
            const item = { ...unqueued(), org, seq, ok };
            q.push(org, item);
            if (!lines.has(org)) {
              lines.set(org, []);
              rotation.push(org);
            }
            lines.get(org)!.push(item);
          });
          for (const flip of flips) {
            // Eligibility changes between calls (a large task's capacity frees up, then fills again).
            if (flip) for (const line of lines.values()) for (const it of line) it.ok = !it.ok;
            const got = q.shiftWhere((e) => e.ok);
            let expected: (Item & { ok: boolean }) | null = null;
            let servedAt = -1;
            for (let i = 0; i < rotation.length && expected === null; i++) {
              const hit = lines.get(rotation[i]!)!.find((e) => e.ok);
              if (hit) {
                expected = hit;
                servedAt = i;
              }
            }
            expect(got).toBe(expected);
            if (expected === null) continue;
            const line = lines.get(expected.org)!;
            line.splice(line.indexOf(expected), 1);
            // The cursor moves past the org served; an org whose line empties leaves the rotation.
            const next = [...rotation.slice(servedAt + 1), ...rotation.slice(0, servedAt + 1)];
            rotation.length = 0;
            for (const org of next) if (lines.get(org)!.length > 0) rotation.push(org);
            for (const org of [...lines.keys()]) if (lines.get(org)!.length === 0) lines.delete(org);
            expect(q.size).toBe([...lines.values()].reduce((n, l) => n + l.length, 0));
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  it('names the newest entry of the longest line for shedding, and refuses a double push', () => {
    const q = new FairQueue<Item>();
    const a = [0, 1, 2].map((seq) => ({ ...unqueued(), org: 'a', seq }));
    const b = { ...unqueued(), org: 'b', seq: 3 };
    for (const x of a) q.push('a', x);
    q.push('b', b);
    expect(q.newestOfLargest()).toBe(a[2]);
    expect(() => q.push('a', a[0]!)).toThrow('already queued');
    q.remove(a[2]!);
    q.remove(a[1]!);
    // Tie (1 and 1): the org met first from the cursor, `a`.
    expect(q.newestOfLargest()).toBe(a[0]);
    expect(q.drain().map((x) => x.seq)).toEqual([0, 3]);
    expect(q.newestOfLargest()).toBeNull();
  });
});
