import { type SpawnSyncReturns, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect, onTestFinished } from 'vitest';
import { ROOT } from './cli.js';

/**
 * A bench CLI that reads a service log (`dist/bench/internal/<script>.js`), with two logs in a temp dir
 * removed when the test ends: `log` holds `text`, `plain` one pino line and nothing the CLI looks for.
 *
 * @returns the two paths; `run(...args)`: the CLI's `spawnSync` result (UTF-8, killed after 20 s);
 *   `expectRefusals(noLines)`: asserts that no `--log` exits 2 saying it is required, and that `plain` exits 1
 *   with `noLines` in stderr.
 */
export function benchLogCli(
  script: string,
  text: string,
): {
  log: string;
  plain: string;
  run: (...args: string[]) => SpawnSyncReturns<string>;
  expectRefusals: (noLines: string) => void;
} {
  const dir = mkdtempSync(path.join(os.tmpdir(), `ibex-${script}-`));
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
  const log = path.join(dir, 'svc.log');
  const plain = path.join(dir, 'plain.log');
  writeFileSync(log, text);
  writeFileSync(plain, '{"level":30,"msg":"listening"}\n');
  const cli = path.join(ROOT, `dist/bench/internal/${script}.js`);
  const run = (...args: string[]) =>
    spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', timeout: 20_000 });
  const expectRefusals = (noLines: string) => {
    const missing = run();
    expect(missing.status).toBe(2);
    expect(missing.stderr).toContain('--log is required');
    const none = run('--log', plain);
    expect(none.status).toBe(1);
    expect(none.stderr).toContain(noLines);
  };
  return { log, plain, run, expectRefusals };
}
