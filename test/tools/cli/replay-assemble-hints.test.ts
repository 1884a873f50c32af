/**
 * The hints the client commands give when answers carry nothing: `replay` names degradation when every
 * answer was degraded (not a wrong --org); `assemble` says when the org/agent has nothing stored.
 */
import { describe, expect, it } from 'vitest';
import { nothingStoredNote } from '../../../src/tools/cli/commands/assemble.js';
import { noMemoryWarning } from '../../../src/tools/cli/commands/replay.js';

const none = { min: 0, median: 0, max: 0 };

describe('replay: no-memory warning', () => {
  it('names degradation when every OK answer was degraded', () => {
    const w = noMemoryWarning({ ok: 60, memories_included: none, levels: { L0: 0, L1: 0, L2: 60 } });
    expect(w).toMatch(/every one was degraded \(L1 0, L2 60\)/);
    expect(w).not.toContain('--org');
  });
  it('points at --org when answers were L0 and still empty, counting the degraded ones', () => {
    const w = noMemoryWarning({ ok: 10, memories_included: none, levels: { L0: 8, L1: 0, L2: 2 } });
    expect(w).toContain("check that --org is the org 'ibex-context ingest' printed");
    expect(w).toContain('(2 of them were degraded)');
  });
  it('is silent once any answer had a memory', () => {
    expect(
      noMemoryWarning({ ok: 10, memories_included: { ...none, max: 3 }, levels: { L0: 0, L1: 0, L2: 10 } }),
    ).toBeNull();
  });
});

describe('assemble: nothing-stored note', () => {
  const req = { org_id: 'o-1', agent_id: 'a-1' };
  it('notes an undegraded answer with no candidate and no directive', () => {
    const note = nothingStoredNote(
      { degradation: { level: 'L0' }, metrics: { candidates_evaluated: 0 }, directive_tokens: 0 },
      req,
    );
    expect(note).toMatch(/no memories and no directive for org o-1 agent a-1/);
  });
  it('says nothing when the answer was degraded or found something', () => {
    expect(
      nothingStoredNote({ degradation: { level: 'L2' }, metrics: { candidates_evaluated: 0 } }, req),
    ).toBeNull();
    expect(
      nothingStoredNote({ degradation: { level: 'L0' }, metrics: { candidates_evaluated: 4 } }, req),
    ).toBeNull();
    expect(
      nothingStoredNote(
        { degradation: { level: 'L0' }, metrics: { candidates_evaluated: 0 }, directive_tokens: 9 },
        req,
      ),
    ).toBeNull();
  });
});
