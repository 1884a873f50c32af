/**
 * `bench:isolation` reads its flags like the other benches (bench/lib/bench-run.ts `benchOptions`): usage
 * on `--help` (exit 0), the message and usage on a bad flag (exit 2), never a parseArgs stack trace.
 * Runs the compiled bench (`npm test` builds first); none of these cases starts a service.
 */
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { projectPath } from '../../../bench/lib/paths.js';

const run = (...args: string[]) =>
  spawnSync(process.execPath, [projectPath('dist/bench/isolation.js'), ...args], {
    encoding: 'utf8',
    timeout: 20_000,
  });

describe('bench:isolation flags', () => {
  it('--help prints the usage with --out and exits 0', () => {
    const r = run('--help');
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/^usage: npm run bench:isolation -- \[options\]/);
    expect(r.stdout).toContain('--out <dir>');
    expect(r.stdout).toContain('--kinds <k,k,…>');
    expect(r.stderr).toBe('');
  });

  it('an unknown flag or a bad number exits 2 with the message and the usage, no stack trace', () => {
    const unknown = run('--bogus');
    expect(unknown.status).toBe(2);
    expect(unknown.stderr).toContain("Unknown option '--bogus'");
    expect(unknown.stderr).toContain('usage: npm run bench:isolation');
    expect(unknown.stderr).not.toMatch(/\n\s+at /);
    const bad = run('--seconds', 'x');
    expect(bad.status).toBe(2);
    expect(bad.stderr).toContain("--seconds must be a positive number, got 'x'");
    const kinds = run('--kinds', 'cjk_history,bogus');
    expect(kinds.status).toBe(2);
    expect(kinds.stderr).toContain(
      "--kinds takes some of decode_bomb,emoji_history,memory_5000_hits,memory_html_300kb,cjk_history, got 'cjk_history,bogus'",
    );
  });
});
