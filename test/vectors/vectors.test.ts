/**
 * Every shared vector (contract.md §13) through the CLI's code path (`runJsonText`, what `ibex-context <cmd>`
 * runs on its stdin text). Pack vectors use the contract's acceptance rules; the others must match exactly.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { type JsonCommand, type PackOutput, runJsonText } from '../../src/tools/cli/json-commands.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const shared = path.resolve(here, '../../../shared/vectors');

interface Vector {
  name: string;
  input: Record<string, unknown>;
  expect: Record<string, unknown>;
}

function load(kind: string): Vector[] {
  const doc = JSON.parse(readFileSync(path.join(here, `${kind}.json`), 'utf8')) as {
    count: number;
    vectors: Vector[];
  };
  expect(doc.vectors.length).toBe(doc.count);
  return doc.vectors;
}

function run(kind: JsonCommand, input: unknown): Record<string, unknown> {
  const { ok, output } = runJsonText(kind, JSON.stringify(input));
  expect(output.error).toBeUndefined();
  expect(ok).toBe(true);
  return output;
}

describe.each(['estimate', 'budget', 'format'] as const)('%s vectors', (kind) => {
  const vectors = load(kind);
  it.each(vectors.map((v) => [v.name, v] as const))('%s', (_name, v) => {
    expect(run(kind, v.input)).toEqual(v.expect);
  });
});

describe('pack vectors', () => {
  const vectors = load('pack');
  it.each(vectors.map((v) => [v.name, v] as const))('%s', (_name, v) => {
    const out = run('pack', v.input) as unknown as PackOutput;
    const ref = v.expect.reference as PackOutput;
    const n = (v.input.candidates as unknown[]).length;
    expect(out.path).toBe(ref.path);
    expect(out.candidates_evaluated).toBe(ref.candidates_evaluated);
    expect(out.skipped_count + out.memory_ids.length).toBe(n);
    // An empty selection is the only answer to a negative budget (contract.md §8 step 2), so it is measured against 0.
    expect(out.total_tokens).toBeLessThanOrEqual(Math.max(0, v.input.token_budget as number));
    expect(out.total_score).toBeGreaterThanOrEqual(ref.total_score - 1e-9);
    expect(out.total_score).toBeLessThanOrEqual((v.expect.optimum_score as number) + 1e-9);
    if (v.expect.exact_match === true) {
      expect(out.memory_ids).toEqual(ref.memory_ids);
      expect(out.total_tokens).toBe(ref.total_tokens);
      expect(out.total_score).toBe(ref.total_score);
    }
  });

  it('reaches the contract.md §8 quality target on DP-path vectors (mean ≥ 0.999, min ≥ 0.98 of the optimum)', () => {
    const ratios = vectors
      .filter(
        (v) =>
          (v.expect.reference as { path: string }).path === 'dp' && (v.expect.optimum_score as number) > 0,
      )
      .map((v) => (run('pack', v.input).total_score as number) / (v.expect.optimum_score as number));
    expect(ratios.length).toBeGreaterThan(50);
    expect(ratios.reduce((a, b) => a + b, 0) / ratios.length).toBeGreaterThanOrEqual(0.999);
    expect(Math.min(...ratios)).toBeGreaterThanOrEqual(0.98);
  });
});

describe('vector files', () => {
  it.skipIf(!existsSync(shared))('equal ../shared/vectors when that folder exists', () => {
    for (const kind of ['estimate', 'budget', 'format', 'pack']) {
      const copy = readFileSync(path.join(here, `${kind}.json`));
      const source = readFileSync(path.join(shared, `${kind}.json`));
      expect(copy.equals(source), `${kind}.json differs from ../shared/vectors`).toBe(true);
    }
  });
});
