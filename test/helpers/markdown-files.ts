import { readdirSync, statSync } from 'node:fs';
import path from 'node:path';

/** Every `.md` file under `dir`, recursively (absolute paths). */
export function markdownFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const full = path.join(dir, name);
    if (statSync(full).isDirectory()) return markdownFiles(full);
    return name.endsWith('.md') ? [full] : [];
  });
}
