import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The nearest ancestor of this module holding package.json. @throws Error when there is none. */
export function projectRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  while (!existsSync(path.join(dir, 'package.json'))) {
    const up = path.dirname(dir);
    if (up === dir) throw new Error(`package.json not found above ${fileURLToPath(import.meta.url)}`);
    dir = up;
  }
  return dir;
}

/** Absolute path of the compiled worker, `<project root>/dist/workers/cpu-worker.js`. */
export function resolveWorkerFile(): string {
  return path.join(projectRoot(), 'dist', 'workers', 'cpu-worker.js');
}
