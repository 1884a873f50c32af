/** How fragmented the embedded store's FTS5 index is: its segment count (a merged index searches faster). */
import Database from 'better-sqlite3';

/** FTS5 segments of the store file's index (distinct segment ids in its `memories_fts_idx` shadow table). */
export function ftsSegments(file: string): number {
  const db = new Database(file, { readonly: true });
  try {
    return (db.prepare('SELECT COUNT(DISTINCT segid) AS n FROM memories_fts_idx').get() as { n: number }).n;
  } finally {
    db.close();
  }
}
