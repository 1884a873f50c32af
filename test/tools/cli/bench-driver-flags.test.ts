/**
 * A bench that drives load runs its own process with DRIVER_NODE_FLAGS (bench/lib/bench-run.ts): without
 * them the driver's parallel garbage collection waits for V8 helper threads on its one pinned CPU and
 * its stalls land in the latencies it times. Runs the compiled benches (`npm test` builds first).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { projectPath } from '../../../bench/lib/paths.js';

const dir = mkdtempSync(path.join(os.tmpdir(), 'ibex-driver-flags-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function script(driver: boolean): string {
  const file = path.join(dir, `main-${driver}.mjs`);
  const lib = pathToFileURL(projectPath('dist/bench/lib/bench-run.js')).href;
  writeFileSync(
    file,
    `import { runBenchMain } from '${lib}';\n` +
      `runBenchMain(async () => { console.log(JSON.stringify({ execArgv: process.execArgv, argv: process.argv.slice(2) })); return 3; }, { driver: ${driver} });\n`,
  );
  return file;
}

describe('bench driver flags', () => {
  it('a driver bench runs again with --single-threaded-gc, keeping its own node flags, arguments and exit code', () => {
    const r = spawnSync(process.execPath, ['--no-warnings', script(true), '--steps', '25'], {
      encoding: 'utf8',
    });
    expect(r.status).toBe(3);
    const lines = r.stdout.trim().split('\n');
    expect(lines).toHaveLength(1);
    const seen = JSON.parse(lines[0]!) as { execArgv: string[]; argv: string[] };
    expect(seen.execArgv).toEqual(['--single-threaded-gc', '--no-warnings']);
    expect(seen.argv).toEqual(['--steps', '25']);
  });

  it('a driver bench already started with the flag runs once, as it is', () => {
    const r = spawnSync(process.execPath, ['--single-threaded-gc', script(true)], { encoding: 'utf8' });
    expect(r.status).toBe(3);
    expect(JSON.parse(r.stdout.trim()).execArgv).toEqual(['--single-threaded-gc']);
  });

  it('a bench that drives nothing keeps the flags it was given', () => {
    const r = spawnSync(process.execPath, [script(false)], { encoding: 'utf8' });
    expect(r.status).toBe(3);
    expect(JSON.parse(r.stdout.trim()).execArgv).toEqual([]);
  });

  it('bench:load --help still prints its usage and exits 0 through the second process', () => {
    const r = spawnSync(process.execPath, [projectPath('dist/bench/load.js'), '--help'], {
      encoding: 'utf8',
      timeout: 20_000,
    });
    expect(r.status).toBe(0);
    expect(r.stdout).toMatch(/^usage: npm run bench:load/);
  });
});
