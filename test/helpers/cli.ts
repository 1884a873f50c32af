/**
 * Runs the compiled CLI (`dist/src/tools/cli/main.js`, built by `npm test` before vitest) as a real process.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** Absolute path of the project root. */
export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
/** Compiled CLI entry point. */
export const CLI = path.join(ROOT, 'dist/src/tools/cli/main.js');

/** Result of one CLI process. */
export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Spawns `node dist/src/tools/cli/main.js ...args`, writes `stdin`, waits for exit (timeout ms). */
export function runCli(
  args: string[],
  stdin = '',
  opts: { env?: NodeJS.ProcessEnv; timeoutMs?: number } = {},
): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], {
      cwd: ROOT,
      env: { ...process.env, ...opts.env },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => {
      stdout += d;
    });
    child.stderr.setEncoding('utf8').on('data', (d: string) => {
      stderr += d;
    });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`CLI ${args.join(' ')} timed out`));
    }, opts.timeoutMs ?? 20_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    // A process that exits before reading all of stdin must fail its test by its output, not by EPIPE.
    child.stdin.on('error', () => {});
    child.stdin.end(stdin);
  });
}

/** Org and agent ids (valid UUIDs) the CLI tests call with. */
export const CLI_ORG = '0b8f8c1e-6a5e-4c3b-9d7e-1f2a3b4c5d6e';
export const CLI_AGENT = 'a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d';

/** Arguments of `ibex-context assemble` against `addr` for {@link CLI_ORG}/{@link CLI_AGENT} and gpt-4o, then `more`. */
export function assembleArgs(addr: string, ...more: string[]): string[] {
  return ['assemble', '--addr', addr, '--org', CLI_ORG, '--agent', CLI_AGENT, '--model', 'gpt-4o', ...more];
}
