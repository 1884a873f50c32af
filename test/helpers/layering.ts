/**
 * The declared layer order of src/ and workers/, and the checks `test/layering.test.ts` runs on the import
 * graph: no import cycle, and no import from a lower layer to a higher one. Folders in one layer may import
 * each other (without a cycle); docs/design/layout.md describes the layers.
 */
import path from 'node:path';
import madge from 'madge';

/**
 * Layers from the bottom up; each is a list of path prefixes (a folder, or `workers`). A file belongs to the
 * layer of its longest matching prefix.
 */
export const LAYERS: readonly (readonly string[])[] = [
  ['src/util'],
  ['src/wire', 'src/text', 'src/generated'],
  ['src/config'],
  ['src/format'],
  ['src/budget', 'src/pack'],
  ['src/cpu-stage'],
  ['src/pool'],
  ['src/retrieval'],
  ['src/ranking'],
  ['workers'],
  ['src/telemetry'],
  ['src/auth'],
  ['src/request'],
  ['src/grpc'],
  ['src/app'],
  ['src/tools'],
];

/** Folders that sit side by side: none imports another (each retrieval backend stands alone). */
export const SIBLINGS: readonly (readonly string[])[] = [
  ['src/retrieval/redis', 'src/retrieval/http', 'src/retrieval/sqlite', 'src/retrieval/postgres'],
];

/** An import graph: each file's path (relative to the project root) to the files it imports. */
export type ImportGraph = Readonly<Record<string, readonly string[]>>;

/** A file's layer (index into `layers`), or -1 when no prefix matches. */
export function layerOf(file: string, layers: readonly (readonly string[])[] = LAYERS): number {
  let best = -1;
  let bestLength = -1;
  layers.forEach((prefixes, i) => {
    for (const p of prefixes) {
      if ((file === p || file.startsWith(`${p}/`) || file.startsWith(`${p}.`)) && p.length > bestLength) {
        best = i;
        bestLength = p.length;
      }
    }
  });
  return best;
}

function siblingOf(file: string, siblings: readonly (readonly string[])[]): string | null {
  for (const group of siblings)
    for (const p of group) if (file.startsWith(`${p}/`)) return `${group.indexOf(p)}:${p}`;
  return null;
}

/**
 * Every import that runs up the layer order, between sibling folders, or from/to a file in no layer,
 * as `from -> to` lines.
 */
export function layerViolations(
  graph: ImportGraph,
  layers: readonly (readonly string[])[] = LAYERS,
  siblings: readonly (readonly string[])[] = SIBLINGS,
): string[] {
  const out: string[] = [];
  for (const [from, deps] of Object.entries(graph)) {
    const a = layerOf(from, layers);
    if (a < 0) out.push(`${from} (outside the declared layers)`);
    for (const to of deps) {
      const b = layerOf(to, layers);
      if (a < 0) continue;
      if (b < 0) out.push(`${from} -> ${to} (outside the declared layers)`);
      else if (b > a) out.push(`${from} -> ${to} (up: ${layers[a]?.join('|')} < ${layers[b]?.join('|')})`);
      else {
        const sa = siblingOf(from, siblings);
        const sb = siblingOf(to, siblings);
        if (sa && sb && sa !== sb) out.push(`${from} -> ${to} (sibling folders)`);
      }
    }
  }
  return out.sort();
}

/** The import graph of `dirs` (type-only imports included) and its cycles, read by madge. */
export async function importGraph(
  dirs: readonly string[],
  baseDir: string,
): Promise<{ graph: ImportGraph; cycles: string[][] }> {
  const res = await madge(
    dirs.map((d) => path.join(baseDir, d)),
    { baseDir, fileExtensions: ['ts'], tsConfig: `${baseDir}/tsconfig.json` },
  );
  return { graph: res.obj(), cycles: res.circular() };
}
