/** Where the compiled worker modules live (`npm run build` writes them under `dist/`). */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The project root: the nearest ancestor of this module holding package.json (from `src/pool/` under
 * vitest and from `dist/src/pool/` alike).
 * @throws Error when no ancestor holds package.json.
 */
export function projectRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  while (!existsSync(path.join(dir, 'package.json'))) {
    const up = path.dirname(dir);
    if (up === dir) throw new Error(`package.json not found above ${fileURLToPath(import.meta.url)}`);
    dir = up;
  }
  return dir;
}

/** Absolute path of the compiled worker, `<project root>/dist/workers/cpu-worker.js` (`npm run build`). */
export function resolveWorkerFile(): string {
  return path.join(projectRoot(), 'dist', 'workers', 'cpu-worker.js');
}
