/**
 * Command line: every command answers --help (exit 0), `serve --help` lists every variable
 * loadSettings reads with its default, docs/configuration.md names every one of them, and a rejected JSON
 * input lists every problem in the contract's words.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { settingNames, undocumentedSettings } from '../../../src/tools/cli/commands/serve-help.js';
import { describeIssues, fieldPath } from '../../../src/tools/cli/input-issues.js';
import { ROOT, runCli } from '../../helpers/cli.js';

describe('--help on every command', () => {
  const commands = [
    'estimate',
    'budget',
    'pack',
    'format',
    'serve',
    'ingest',
    'replay',
    'assemble',
    'load',
    'memory-server',
    'healthcheck',
  ];
  it.each(commands)('%s --help prints its usage on stdout and exits 0', async (command) => {
    const r = await runCli([command, '--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`^usage: ibex-context ${command}\\b`));
    expect(r.stderr).toBe('');
  });

  it('serve --help lists every variable loadSettings reads, with its default', async () => {
    const r = await runCli(['serve', '--help'], '', { env: { IBEX_CONTEXT_POOL_MAX_THREADS: '' } });
    expect(r.code).toBe(0);
    const names = settingNames();
    expect(names).toContain('IBEX_CONTEXT_TIMEOUT');
    expect(names).toContain('IBEX_CONTEXT_TIMEOUT_MS');
    expect(names).not.toContain('REDIS_URL');
    expect(names).not.toContain('MEMORY_BASE_URL');
    for (const name of names) expect(r.stdout).toContain(name);
    expect(r.stdout).toMatch(/IBEX_CONTEXT_TIMEOUT, IBEX_CONTEXT_TIMEOUT_MS +45 ms +/);
    expect(r.stdout).toMatch(/IBEX_CONTEXT_GRPC_ADDR +127\.0\.0\.1:9092 +/);
    expect(r.stdout).not.toContain('not described yet');
  });

  it('every variable loadSettings reads is described for serve --help and in docs/configuration.md', () => {
    expect(undocumentedSettings()).toEqual([]);
    const page = readFileSync(path.join(ROOT, 'docs', 'configuration.md'), 'utf8');
    const missing = settingNames().filter((n) => !page.includes(`\`${n}\``));
    expect(missing).toEqual([]);
  });

  it('serve rejects flags it does not take, with exit 2', async () => {
    const r = await runCli(['serve', '--port', '1']);
    expect(r.code).toBe(2);
    expect(r.stderr.trim()).toBe(
      'ibex-context serve: unknown argument --port (serve takes no flags; see --help)',
    );
  });
});

describe('rejected JSON inputs name every problem', () => {
  it('pack with token_budget -1 and missing fields lists each missing field (a negative budget is valid, contract.md §8)', async () => {
    const r = await runCli(['pack'], JSON.stringify({ token_budget: -1 }));
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stdout)).toEqual({
      error:
        'tokenizer_family: is required; dp_cell_ceiling: is required; max_consecutive_skips: is required; candidates: is required',
    });
  });

  it('pack with bad values reports each, with field paths into candidates', async () => {
    const input = {
      token_budget: 1.5,
      tokenizer_family: 'o200k_base',
      dp_cell_ceiling: 0,
      max_consecutive_skips: 5,
      candidates: [
        {
          memory_id: 'a',
          content: 'x',
          category: 'c',
          similarity: 2,
          confidence: 'x',
          rank: 0,
          source: 'hot',
        },
      ],
    };
    const r = await runCli(['pack'], JSON.stringify(input));
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stdout).error).toBe(
      'token_budget: must be an integer, got 1.5; dp_cell_ceiling: must be ≥ 1, got 0; ' +
        'candidates[0].similarity: must be ≤ 1, got 2; candidates[0].confidence: must be a number, got string "x"; ' +
        'candidates[0].rank: must be ≥ 1, got 0',
    );
  });

  it('fieldPath and describeIssues: root, nested indices, empty strings, enum values', () => {
    expect(fieldPath([])).toBe('input');
    expect(fieldPath(['a', 0, 'b', 2])).toBe('a[0].b[2]');
    const schema = z.object({ name: z.string().min(1), kind: z.enum(['x', 'y']) });
    const input = { name: '', kind: 'z' };
    const parsed = schema.safeParse(input);
    expect(parsed.success).toBe(false);
    expect(describeIssues(parsed.error!.issues, input)).toBe(
      'name: must not be empty; kind: must be one of "x", "y"',
    );
    const root = schema.safeParse([]);
    expect(describeIssues(root.error!.issues, [])).toBe('input: must be an object, got an array');
  });
});
