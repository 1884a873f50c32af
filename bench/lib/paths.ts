/**
 * Project-root paths that work from `bench/` (tsx-free) and from `dist/bench/` (compiled).
 */
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

/**
 * Writes a bench's figures as `bench/results/<name>.json` (2-space JSON and a newline), creating the folder.
 * @returns the file's absolute path.
 */
export function writeResult(name: string, result: unknown): string {
  mkdirSync(projectPath('bench/results'), { recursive: true });
  const file = projectPath(`bench/results/${name}.json`);
  writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
  return file;
}
