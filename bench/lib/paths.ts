/**
 * Project-root paths that work from `bench/` (tsx-free) and from `dist/bench/` (compiled).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The project root: the nearest ancestor of this file holding package.json. */
export const PROJECT_ROOT = (() => {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  while (!existsSync(path.join(dir, 'package.json'))) {
    const up = path.dirname(dir);
    if (up === dir) throw new Error('package.json not found above bench/');
    dir = up;
  }
  return dir;
})();

/** Absolute path of a project-relative path. */
export function projectPath(relative: string): string {
  return path.join(PROJECT_ROOT, relative);
}

/** Which code a result file's figures were measured on, and when. */
export interface RunStamp {
  /** Short git hash of HEAD, with `-dirty` when the working tree has uncommitted changes; 'unknown' outside git. */
  commit: string;
  /** ISO 8601 time the result was written. */
  date: string;
}

/** The {@link RunStamp} of this moment: asks git in {@link PROJECT_ROOT}. */
export function runStamp(): RunStamp {
  const git = (args: string[]) =>
    execFileSync('git', args, {
      cwd: PROJECT_ROOT,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    }).trim();
  let commit = 'unknown';
  try {
    commit = git(['rev-parse', '--short', 'HEAD']);
    if (git(['status', '--porcelain']) !== '') commit += '-dirty';
  } catch {
    // Not a git checkout (an unpacked tarball): the figures stay usable, only unattributed.
  }
  return { commit, date: new Date().toISOString() };
}

/**
 * Writes a bench's figures to `file` (2-space JSON and a newline), creating its folder. An object result
 * gets a `run` field ({@link runStamp}) after its own fields; an array is written as it is.
 * @returns the file's absolute path.
 */
export function writeResultFile(file: string, result: unknown): string {
  const stamped =
    result !== null && typeof result === 'object' && !Array.isArray(result)
      ? { ...result, run: runStamp() }
      : result;
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, `${JSON.stringify(stamped, null, 2)}\n`);
  return path.resolve(file);
}

/**
 * Writes a bench's figures as `bench/results/<name>.json` ({@link writeResultFile}).
 * @returns the file's absolute path.
 */
export function writeResult(name: string, result: unknown): string {
  return writeResultFile(projectPath(`bench/results/${name}.json`), result);
}
