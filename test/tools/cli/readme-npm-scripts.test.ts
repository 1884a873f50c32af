/**
 * Every `npm run <script>` the README and docs/ name exists in package.json, and together they name every
 * npm script under `bench:`: a command a reader copies must run (a script documented before it existed
 * failed with npm's "Missing script").
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { projectPath } from '../../../bench/lib/paths.js';

function markdownUnder(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) return markdownUnder(p);
    return e.name.endsWith('.md') ? [p] : [];
  });
}

const pages = [projectPath('README.md'), ...markdownUnder(projectPath('docs'))]
  .map((f) => readFileSync(f, 'utf8'))
  .join('\n');
const scripts = (
  JSON.parse(readFileSync(projectPath('package.json'), 'utf8')) as { scripts: Record<string, string> }
).scripts;

describe('npm commands in README.md and docs/', () => {
  it('names only scripts that package.json has', () => {
    // `npm run bench:*` (a glob in prose) is not a command.
    const named = new Set(
      [...pages.matchAll(/npm run ([a-z][a-z0-9:-]*[a-z0-9])(?![a-z0-9:*-])/g)].map((m) => m[1]!),
    );
    expect(named.size).toBeGreaterThan(10);
    expect([...named].filter((n) => !(n in scripts))).toEqual([]);
  });

  it('documents every bench script (README or a page of docs/)', () => {
    const benches = Object.keys(scripts).filter((n) => n.startsWith('bench:'));
    expect(benches).toContain('bench:load');
    expect(benches.filter((n) => !pages.includes(n))).toEqual([]);
  });
});
