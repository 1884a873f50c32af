/** The CPU pool's waiting line: one FIFO per org, served round-robin (contract.md §1). O(1) operations. */

/** Links an entry keeps while it waits; owned by {@link FairQueue}, opaque to callers. */
export interface FairEntry {
  fqPrev: FairEntry | null;
  fqNext: FairEntry | null;
  /** Null when not queued. */
  fqLine: OrgLine | null;
}

interface OrgLine {
  readonly org: string;
  head: FairEntry | null;
  tail: FairEntry | null;
  size: number;
  prev: OrgLine;
  next: OrgLine;
}

export function unqueued(): FairEntry {
  return { fqPrev: null, fqNext: null, fqLine: null };
}

/** Round-robin by org: a new org joins last in the round; within an org, arrival order. */
export class FairQueue<T extends FairEntry> {
  readonly #lines = new Map<string, OrgLine>();
  #cursor: OrgLine | null = null;
  size = 0;

  get orgs(): number {
    return this.#lines.size;
  }

  sizeOf(org: string): number {
    return this.#lines.get(org)?.size ?? 0;
  }

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

  shift(): T | null {
    const line = this.#cursor;
    if (line === null) return null;
    const entry = line.head as T;
    // Advance first: if the line empties, #leave moves the cursor to the same next org.
    this.#cursor = line.next;
    this.remove(entry);
    return entry;
  }

  /** Like {@link shift}, taking each org's oldest entry that `eligible` accepts; null if none. */
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

  newestOfLargest(): T | null {
    const start = this.#cursor;
    if (start === null) return null;
    let best = start;
    for (let line = start.next; line !== start; line = line.next) if (line.size > best.size) best = line;
    return best.tail as T;
  }

  /** Full queue: removes the newest entry of the largest org if it has two more than `org`, else null. */
  shedFor(org: string): T | null {
    const victim = this.newestOfLargest();
    if (victim === null || victim.fqLine!.size < this.sizeOf(org) + 2) return null;
    this.remove(victim);
    return victim;
  }

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
