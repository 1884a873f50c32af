/**
 * Issue 9 item 3: the CPU pool's waiting line is fair across orgs. Properties over random sequences of
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
