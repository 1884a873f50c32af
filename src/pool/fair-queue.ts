/**
 * The CPU pool's waiting line, fair across orgs (contract.md §1 isolation rule): one FIFO per
 * org, served round-robin, so an org that floods heavy calls waits behind its own calls, never in front of
 * another org's. Every operation is O(1): a withdrawn call (deadline, signal) leaves from the middle of its
 * org's line, and an org whose line empties leaves the rotation.
 */

/** Links an entry keeps while it waits; owned by {@link FairQueue}, opaque to callers. */
export interface FairEntry {
  /** @internal previous entry of the same org. */
  fqPrev: FairEntry | null;
  /** @internal next entry of the same org. */
  fqNext: FairEntry | null;
  /** @internal the org line holding the entry, null when not queued. */
  fqLine: OrgLine | null;
}

/** One org's FIFO, and its place in the rotation. */
interface OrgLine {
  readonly org: string;
  head: FairEntry | null;
  tail: FairEntry | null;
  size: number;
  prev: OrgLine;
  next: OrgLine;
}

/** Fresh links for an entry that is not queued. */
export function unqueued(): FairEntry {
  return { fqPrev: null, fqNext: null, fqLine: null };
}

/**
 * Round-robin queue of entries keyed by org id.
 *
 * Order: `shift` serves the org at the cursor, then moves the cursor to the next org; an org that starts
 * waiting joins the rotation just before the cursor (last in the current round). Hence, while an org has
 * entries waiting, no other org is served twice without it being served in between, and within an org
 * entries leave in the order they came (contract.md §10 withdrawal aside).
 */
export class FairQueue<T extends FairEntry> {
  readonly #lines = new Map<string, OrgLine>();
  /** The org served next; null when nothing waits. */
  #cursor: OrgLine | null = null;
  /** Entries waiting, all orgs. */
  size = 0;

  /** Orgs with at least one entry waiting. */
  get orgs(): number {
    return this.#lines.size;
  }

  /** Entries of `org` waiting. */
  sizeOf(org: string): number {
    return this.#lines.get(org)?.size ?? 0;
  }

  /** True while `entry` waits here. */
  has(entry: T): boolean {
    return entry.fqLine !== null;
  }

  /** Appends `entry` to its org's line. @throws Error when the entry is already queued. */
  push(org: string, entry: T): void {
    if (entry.fqLine !== null) throw new Error('entry is already queued');
    let line = this.#lines.get(org);
    if (line === undefined) line = this.#join(org);
    entry.fqPrev = line.tail;
    entry.fqNext = null;
    if (line.tail) line.tail.fqNext = entry;
    else line.head = entry;
    line.tail = entry;
    entry.fqLine = line;
    line.size++;
    this.size++;
  }

  /** Removes `entry` wherever it waits; a no-op when it is not queued. */
  remove(entry: T): void {
    const line = entry.fqLine;
    if (line === null) return;
    if (entry.fqPrev) entry.fqPrev.fqNext = entry.fqNext;
    else line.head = entry.fqNext;
    if (entry.fqNext) entry.fqNext.fqPrev = entry.fqPrev;
    else line.tail = entry.fqPrev;
    entry.fqPrev = entry.fqNext = null;
    entry.fqLine = null;
    line.size--;
    this.size--;
    if (line.size === 0) this.#leave(line);
  }

  /** Takes the next entry in round-robin order, or null when nothing waits. */
  shift(): T | null {
    const line = this.#cursor;
    if (line === null) return null;
    const entry = line.head as T;
    // Advance first: if the line empties, #leave moves the cursor to the same next org.
    this.#cursor = line.next;
    this.remove(entry);
    return entry;
  }

  /**
   * Takes the next entry in round-robin order that `eligible` accepts: orgs from the cursor, within an
   * org its oldest eligible entry (an ineligible one keeps its place, and eligible ones of the same org may
   * pass it). The cursor moves past the org served, as in {@link shift}; when nothing is eligible it stays
   * and null is returned. O(entries) in the worst case (every entry ineligible), O(1) when the first is.
   */
  shiftWhere(eligible: (entry: T) => boolean): T | null {
    const start = this.#cursor;
    if (start === null) return null;
    let line = start;
    do {
      for (let e = line.head as T | null; e !== null; e = e.fqNext as T | null) {
        if (!eligible(e)) continue;
        this.#cursor = line.next;
        this.remove(e);
        return e;
      }
      line = line.next;
    } while (line !== start);
    return null;
  }

  /**
   * The newest entry of the org with the most entries waiting (ties: the org met first from the cursor),
   * for shedding the heaviest org when the queue is full. O(orgs).
   */
  newestOfLargest(): T | null {
    const start = this.#cursor;
    if (start === null) return null;
    let best = start;
    for (let line = start.next; line !== start; line = line.next) if (line.size > best.size) best = line;
    return best.tail as T;
  }

  /**
   * Full queue: removes and returns the newest entry of the org with the most entries waiting, if that org
   * has at least two more than `org` (so that a flooding org cannot lock others out), else null.
   */
  shedFor(org: string): T | null {
    const victim = this.newestOfLargest();
    if (victim === null || victim.fqLine!.size < this.sizeOf(org) + 2) return null;
    this.remove(victim);
    return victim;
  }

  /** Removes and returns every entry (rotation order), e.g. on close. */
  drain(): T[] {
    const out: T[] = [];
    for (let e = this.shift(); e !== null; e = this.shift()) out.push(e);
    return out;
  }

  #join(org: string): OrgLine {
    const line = { org, head: null, tail: null, size: 0 } as unknown as OrgLine;
    const at = this.#cursor;
    if (at === null) {
      line.prev = line.next = line;
      this.#cursor = line;
    } else {
      // Just before the cursor: the newcomer is served after every org already waiting.
      line.prev = at.prev;
      line.next = at;
      at.prev.next = line;
      at.prev = line;
    }
    this.#lines.set(org, line);
    return line;
  }

  #leave(line: OrgLine): void {
    this.#lines.delete(line.org);
    if (line.next === line) {
      this.#cursor = null;
      return;
    }
    line.prev.next = line.next;
    line.next.prev = line.prev;
    if (this.#cursor === line) this.#cursor = line.next;
  }
}
