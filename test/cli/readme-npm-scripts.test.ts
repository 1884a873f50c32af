/**
 * Every `npm run <script>` the README names exists in package.json, and the README names every npm script
 * under `bench:`: a command a reader copies must run (a `bench:sched-trace` documented before its
 * script existed failed with npm's "Missing script").
 */
import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { projectPath } from '../../bench/lib/paths.js';

const readme = readFileSync(projectPath('README.md'), 'utf8');
const scripts = (
  JSON.parse(readFileSync(projectPath('package.json'), 'utf8')) as { scripts: Record<string, string> }
).scripts;

describe('README npm commands', () => {
  it('names only scripts that package.json has', () => {
    // `npm run bench:*` (a glob in prose) is not a command.
    const named = new Set(
      [...readme.matchAll(/npm run ([a-z][a-z0-9:-]*[a-z0-9])(?![a-z0-9:*-])/g)].map((m) => m[1]!),
    );
    expect(named.size).toBeGreaterThan(10);
    expect([...named].filter((n) => !(n in scripts))).toEqual([]);
  });

  it('documents every bench script (README or a page of docs/)', () => {
    const benches = Object.keys(scripts).filter((n) => n.startsWith('bench:'));
    expect(benches).toContain('bench:sched-trace');
    const docs = readdirSync(projectPath('docs'))
      .filter((f) => f.endsWith('.md'))
      .map((f) => readFileSync(projectPath(`docs/${f}`), 'utf8'))
      .join('\n');
    expect(benches.filter((n) => !readme.includes(n) && !docs.includes(n))).toEqual([]);
  });
});
