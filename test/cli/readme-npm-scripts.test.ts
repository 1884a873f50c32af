/**
 * Every `npm run <script>` the README names exists in package.json, and the README or docs/ name every npm
 * script under `bench:`: a command a reader copies must run (a `bench:sched-trace` documented before its
 * script existed failed with npm's "Missing script"). A retired bench script the README still names must be
 * listed in docs/design/investigation-benches.md with what replaced it.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { projectPath } from '../../bench/lib/paths.js';

const readme = readFileSync(projectPath('README.md'), 'utf8');
const docs = readdirSync(projectPath('docs'), { recursive: true, encoding: 'utf8' })
  .filter((f) => f.endsWith('.md'))
  .map((f) => readFileSync(projectPath(`docs/${f}`), 'utf8'))
  .join('\n');
const retired = readFileSync(projectPath('docs/design/investigation-benches.md'), 'utf8');
const scripts = (
  JSON.parse(readFileSync(projectPath('package.json'), 'utf8')) as { scripts: Record<string, string> }
).scripts;

describe('README npm commands', () => {
  it('names only scripts that package.json has, or retired ones the investigation-benches note maps', () => {
    // `npm run bench:*` (a glob in prose) is not a command.
    const named = new Set(
      [...readme.matchAll(/npm run ([a-z][a-z0-9:-]*[a-z0-9])(?![a-z0-9:*-])/g)].map((m) => m[1]!),
    );
    expect(named.size).toBeGreaterThan(3);
    expect([...named].filter((n) => !(n in scripts) && !retired.includes(`\`${n}\``))).toEqual([]);
  });

  it('documents every bench script', () => {
    const benches = Object.keys(scripts).filter((n) => n.startsWith('bench:'));
    expect(benches).toContain('bench:internal');
    expect(benches.filter((n) => !readme.includes(n) && !docs.includes(n))).toEqual([]);
  });
});
