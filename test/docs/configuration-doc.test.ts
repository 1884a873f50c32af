/**
 * docs/configuration.md is the generator's output, so every variable `loadSettings` reads is on the page
 * with the default the code computes: a setting added or changed without `npm run docs:config` fails here.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { projectPath } from '../../bench/lib/paths.js';
import { configurationMarkdown } from '../../src/tools/cli/commands/configuration-doc.js';
import { settingNames } from '../../src/tools/cli/commands/serve-help.js';

describe('docs/configuration.md', () => {
  const committed = readFileSync(projectPath('docs/configuration.md'), 'utf8');

  it('equals the output of npm run docs:config', () => {
    expect(committed).toBe(configurationMarkdown());
  });

  it('names every variable loadSettings reads, with the 45 ms call cap', () => {
    expect(settingNames().filter((n) => !committed.includes(`\`${n}\``))).toEqual([]);
    expect(committed).toMatch(/\| `IBEX_CONTEXT_TIMEOUT`, `IBEX_CONTEXT_TIMEOUT_MS` +\| 45 ms +\|/);
    expect(committed).toMatch(/\| `IBEX_CONTEXT_POOL_MAX_THREADS` +\| the cores +\|/);
  });
});
