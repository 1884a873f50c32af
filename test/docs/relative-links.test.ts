/**
 * Every relative link in README.md and docs/ names a file of the repository (and, with a #fragment into
 * a Markdown file, one of its headings), so a reader who clones the repository never meets a dead link.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { markdownFiles } from '../helpers/markdown-files.js';

const ROOT = path.resolve(import.meta.dirname, '../..');

/** GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens. */
function anchors(markdown: string): Set<string> {
  const out = new Set<string>();
  for (const m of markdown.matchAll(/^#{1,6}\s+(.+)$/gm)) {
    out.add(
      m[1]!
        .trim()
        .toLowerCase()
        .replace(/[^\p{L}\p{N}\s_-]/gu, '')
        .replace(/\s/g, '-'),
    );
  }
  return out;
}

describe('relative links in README.md and docs/', () => {
  it('resolve to files (and headings) of the repository', () => {
    const files = [path.join(ROOT, 'README.md'), ...markdownFiles(path.join(ROOT, 'docs'))];
    const dead: string[] = [];
    for (const file of files) {
      const text = readFileSync(file, 'utf8').replace(/```[\s\S]*?```/g, '');
      for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
        const target = m[1]!;
        if (/^[a-z]+:/i.test(target)) continue;
        const [rel, fragment] = target.split('#') as [string, string | undefined];
        const resolved = rel ? path.resolve(path.dirname(file), rel) : file;
        const where = `${path.relative(ROOT, file)} → ${target}`;
        if (!existsSync(resolved)) dead.push(where);
        else if (
          fragment &&
          resolved.endsWith('.md') &&
          !anchors(readFileSync(resolved, 'utf8')).has(fragment)
        )
          dead.push(`${where} (no such heading)`);
      }
    }
    expect(dead).toEqual([]);
  });
});
