/**
 * docs/benchmarks.md is generated from bench/results/*.json: the committed page must equal the generator's
 * output, so a figure on it is always the one a bench stored (re-run `npm run docs:bench` after a bench).
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { projectPath } from '../../bench/lib/paths.js';
import { FIGURES_START, renderReadmeFigures } from '../../scripts/bench-docs/readme-figures.mjs';
import { renderBenchmarks, result } from '../../scripts/bench-docs.mjs';

describe('docs/benchmarks.md', () => {
  it('equals the output of npm run docs:bench', () => {
    const committed = readFileSync(projectPath('docs/benchmarks.md'), 'utf8');
    expect(committed).toBe(renderBenchmarks());
    expect(committed).toContain('## Load (embedded store, LoCoMo)');
  });
});

describe("README.md's headline figures", () => {
  it('equal the output of npm run docs:bench, from the committed result files', () => {
    const readme = readFileSync(projectPath('README.md'), 'utf8');
    const block = renderReadmeFigures(result);
    expect(readme).toContain(block);
    expect(
      block.split('\n').filter((l: string) => l.startsWith('| ') && !l.startsWith('| figure')),
    ).toHaveLength(4);
    expect(readme.indexOf(FIGURES_START)).toBe(readme.lastIndexOf(FIGURES_START));
  });
});
