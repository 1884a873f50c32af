/**
 * Every repository path the docs name in prose (`src/...`, `test/...`, `bench/...`, `scripts/...`,
 * `workers/...`, `proto/...`, `deploy/...` with a file extension) exists, so a doc never sends a reader
 * to a file that was moved or renamed. Build outputs (`dist/...`) and other packages' files are not checked.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { markdownFiles } from '../helpers/markdown-files.js';

const ROOT = path.resolve(import.meta.dirname, '../..');

/**
 * Repository paths named in `text`: a top-level folder of this repository at a word start (not after `/`,
 * `.` or a letter, so `dist/src/…` and `build/src/…` are left out), then a path ending in a file extension.
 */
function namedPaths(text: string): string[] {
  const re =
    /(?<![\w./-])((?:src|test|bench|scripts|workers|proto|deploy)\/[\w./-]*\w\.(?:ts|mjs|js|json|proto|sh|md))(?![\w-])/g;
  return [...text.matchAll(re)].map((m) => m[1]!);
}

describe('repository paths named in docs/', () => {
  it('finds paths, not build outputs', () => {
    expect(namedPaths('see `src/a/b.ts` and dist/src/c.js, build/src/server.js, (test/x.test.ts)')).toEqual([
      'src/a/b.ts',
      'test/x.test.ts',
    ]);
  });

  it('name files that exist', () => {
    const missing: string[] = [];
    for (const file of markdownFiles(path.join(ROOT, 'docs'))) {
      for (const p of namedPaths(readFileSync(file, 'utf8'))) {
        if (!existsSync(path.join(ROOT, p))) missing.push(`${path.relative(ROOT, file)}: ${p}`);
      }
    }
    expect(missing).toEqual([]);
  });
});
