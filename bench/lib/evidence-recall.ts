/**
 * Evidence recall, LoCoMo's retrieval measure: of the dialogue turns a QA item's answer rests on, the
 * share whose memory made it into the assembled context; and the all-evidence rate, the share of items
 * with every evidence turn in. Pure functions, shared by bench:quality and its unit test.
 */

/** One QA item's evidence, as memory ids (turns the dataset names but the store lacks are left out). */
export interface EvidenceItem {
  category: number;
  evidence: readonly string[];
}

/** Sums over items of one cell (one configuration, budget and category). */
export interface RecallTally {
  items: number;
  evidenceTurns: number;
  found: number;
  allFound: number;
}

/** An empty tally. */
export function emptyTally(): RecallTally {
  return { items: 0, evidenceTurns: 0, found: 0, allFound: 0 };
}

/**
 * Adds one item to `tally`: its evidence turns, how many are in `included`, and whether all are.
 * An item without evidence is not counted (it measures nothing).
 */
export function addItem(
  tally: RecallTally,
  evidence: readonly string[],
  included: ReadonlySet<string>,
): void {
  if (evidence.length === 0) return;
  let found = 0;
  for (const id of evidence) if (included.has(id)) found++;
  tally.items++;
  tally.evidenceTurns += evidence.length;
  tally.found += found;
  if (found === evidence.length) tally.allFound++;
}

/** Figures of a tally, percent rounded to 0.1: evidence recall and all-evidence rate. */
export function recallFigures(t: RecallTally): {
  items: number;
  evidence_turns: number;
  evidence_recall_pct: number | null;
  all_evidence_pct: number | null;
} {
  const pct = (a: number, b: number) => (b === 0 ? null : Math.round((1000 * a) / b) / 10);
  return {
    items: t.items,
    evidence_turns: t.evidenceTurns,
    evidence_recall_pct: pct(t.found, t.evidenceTurns),
    all_evidence_pct: pct(t.allFound, t.items),
  };
}

/**
 * First-fit concatenation: walks `ids` in order and takes each whose cost still fits what is left of
 * `budget` (tokens; `Infinity` = everything). The "retrieve and concatenate" baseline.
 */
export function firstFit(ids: readonly string[], cost: (id: string) => number, budget: number): Set<string> {
  const taken = new Set<string>();
  let left = budget;
  for (const id of ids) {
    const c = cost(id);
    if (c <= left) {
      taken.add(id);
      left -= c;
    }
  }
  return taken;
}

/**
 * Recent turns trimmed to the budget: takes `ids` (newest first) while they fit and stops at the first
 * that does not, as a chat history is trimmed from its oldest end.
 */
export function trimToBudget(
  ids: readonly string[],
  cost: (id: string) => number,
  budget: number,
): Set<string> {
  const taken = new Set<string>();
  let left = budget;
  for (const id of ids) {
    const c = cost(id);
    if (c > left) break;
    taken.add(id);
    left -= c;
  }
  return taken;
}
