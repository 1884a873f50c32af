/**
 * The image builds from a clean checkout. No Docker daemon here, and buildah cannot pull the base image
 * (no container registry is reachable), so this replays the Dockerfile's `build` stage in a temporary copy
 * of the files a clean clone holds (git's tracked and non-ignored files, less .dockerignore): every `COPY`
 * is copied, every `RUN` is run, except two substitutions that keep the test short and offline:
 * - `apt-get …` (the compiler toolchain for better-sqlite3) is skipped;
 * - `npm ci …` links the worktree's node_modules instead of installing (the lockfile is what npm ci
 *   installs; a missing dependency is caught below by checking the compiled imports against package.json).
 * So a build step that needs a file the stage never copies, or a generation step the stage leaves out
 * (src/generated/ is git-ignored), fails here as it would in the builder.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
} from 'node:fs';
import { builtinModules } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT } from '../../helpers/cli.js';

interface Instruction {
  op: string;
  args: string;
}
interface Stage {
  name: string;
  from: string;
  steps: Instruction[];
}

/** Dockerfile → stages of instructions (continuation lines joined, comments dropped). */
function parseDockerfile(text: string): Stage[] {
  const joined = text.replace(/\\\r?\n/g, ' ');
  const stages: Stage[] = [];
  for (const raw of joined.split(/\r?\n/)) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([A-Z]+)\s+(.*)$/.exec(line);
    if (!m) throw new Error(`unparsed Dockerfile line: ${line}`);
    const [, op, args] = m as unknown as [string, string, string];
    if (op === 'FROM') {
      const from = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(args)!;
      stages.push({ from: from[1]!, name: from[2] ?? String(stages.length), steps: [] });
    } else {
      stages.at(-1)!.steps.push({ op, args });
    }
  }
  return stages;
}

/** The files a clean clone of this tree holds (tracked or new, not ignored), less .dockerignore's. */
function cleanCheckout(into: string): void {
  const files = execFileSync('git', ['ls-files', '-z', '--cached', '--others', '--exclude-standard'], {
    cwd: ROOT,
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
  })
    .split('\0')
    .filter((f) => f !== '');
  const ignored = readFileSync(path.join(ROOT, '.dockerignore'), 'utf8')
    .split('\n')
    .map((l) => l.trim().replace(/\/$/, ''))
    .filter((l) => l !== '' && !l.startsWith('#'));
  const skip = (f: string) =>
    ignored.some((p) => (p.startsWith('*') ? f.endsWith(p.slice(1)) : f === p || f.startsWith(`${p}/`)));
  for (const f of files) {
    if (skip(f) || !existsSync(path.join(ROOT, f))) continue;
    mkdirSync(path.dirname(path.join(into, f)), { recursive: true });
    cpSync(path.join(ROOT, f), path.join(into, f));
  }
}

/**
 * Replays one stage's COPY and RUN steps from `context` into `workdir`; returns the log of what ran.
 * @throws Error naming the step that failed, with its output.
 */
function replay(stage: Stage, context: string, workdir: string): string[] {
  const log: string[] = [];
  for (const { op, args } of stage.steps) {
    if (op === 'COPY') {
      if (args.startsWith('--from=')) throw new Error(`build stage copies from another stage: ${args}`);
      // Docker's rules: a directory's contents go into the destination; a file goes into it when the
      // destination ends in '/' or there are several sources, else becomes it.
      const parts = args.split(/\s+/);
      const destText = parts.pop()!;
      const dest = path.resolve(workdir, destText);
      for (const src of parts) {
        const from = path.join(context, src);
        if (!existsSync(from)) throw new Error(`COPY ${src}: not in a clean checkout`);
        const intoDir = statSync(from).isFile() && (destText.endsWith('/') || parts.length > 1);
        cpSync(from, intoDir ? path.join(dest, path.basename(src)) : dest, { recursive: true });
      }
      log.push(`COPY ${args}`);
    } else if (op === 'RUN') {
      if (/^apt-get\b/.test(args)) {
        log.push(`skipped: RUN ${args}`);
        continue;
      }
      if (/^npm ci\b/.test(args)) {
        symlinkSync(path.join(ROOT, 'node_modules'), path.join(workdir, 'node_modules'), 'dir');
        log.push(`linked node_modules for: RUN ${args}`);
        continue;
      }
      const r = spawnSync('sh', ['-c', args], { cwd: workdir, encoding: 'utf8', timeout: 120_000 });
      if (r.status !== 0) {
        throw new Error(`RUN ${args} exited ${r.status}:\n${r.stdout}${r.stderr}`.slice(0, 4000));
      }
      log.push(`RUN ${args}`);
    }
  }
  return log;
}

/** Every file under `dir`, relative. */
function walk(dir: string, rel = ''): string[] {
  return readdirSync(path.join(dir, rel), { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? walk(dir, path.join(rel, e.name)) : [path.join(rel, e.name)],
  );
}

const dockerfile = readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8');
const stages = parseDockerfile(dockerfile);
const stage = (name: string) => stages.find((s) => s.name === name)!;

describe('Dockerfile', () => {
  let tmp: string;
  beforeAll(() => {
    tmp = mkdtempSync(path.join(os.tmpdir(), 'ibex-image-'));
  });
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  it('has a build, a prune and a runtime stage; the runtime takes dist/, proto/ and production dependencies only', () => {
    expect(stages.map((s) => s.name)).toEqual(['build', 'prune', 'runtime']);
    const copies = stage('runtime')
      .steps.filter((s) => s.op === 'COPY')
      .map((s) => s.args);
    expect(copies).toEqual([
      '--from=prune /app/package.json ./package.json',
      '--from=prune /app/node_modules ./node_modules',
      '--from=build /app/dist/src ./dist/src',
      '--from=build /app/dist/workers ./dist/workers',
      '--from=build /app/proto ./proto',
    ]);
    expect(stage('prune').steps.map((s) => s.args)).toContainEqual(
      expect.stringMatching(/^npm prune --omit=dev\b/),
    );
    const volume = stage('runtime').steps.find((s) => s.op === 'VOLUME');
    const db = /IBEX_CONTEXT_EMBEDDED_DB=(\S+)/.exec(dockerfile)![1]!;
    expect(volume?.args).toBe(`["${path.posix.dirname(db)}"]`);
    expect(stage('runtime').steps.find((s) => s.op === 'USER')?.args).toMatch(/^\d+:\d+$/);
  });

  it('the build stage, replayed in a clean checkout, generates the wire types and compiles src and workers only', () => {
    const context = path.join(tmp, 'context');
    const app = path.join(tmp, 'app');
    mkdirSync(context);
    mkdirSync(app);
    cleanCheckout(context);
    expect(existsSync(path.join(context, 'src/generated'))).toBe(false);
    const log = replay(stage('build'), context, app);
    expect(log.some((l) => l.startsWith('RUN node scripts/gen-proto-types.mjs'))).toBe(true);
    expect(existsSync(path.join(app, 'dist/src/tools/cli/main.js'))).toBe(true);
    expect(existsSync(path.join(app, 'dist/workers/cpu-worker.js'))).toBe(true);
    expect(readdirSync(path.join(app, 'dist')).sort()).toEqual(['src', 'workers']);
    // Every path the runtime stage copies from the build stage exists.
    for (const s of stage('runtime').steps.filter((x) => x.args.startsWith('--from=build'))) {
      const from = s.args.split(/\s+/)[1]!.replace(/^\/app\//, '');
      expect(existsSync(path.join(app, from)), from).toBe(true);
    }
    // The compiled service starts (its usage) from the stage's files.
    const help = spawnSync(process.execPath, ['dist/src/tools/cli/main.js', '--help'], {
      cwd: app,
      encoding: 'utf8',
    });
    expect(help.status).toBe(0);
    expect(help.stdout).toContain('usage: ibex-context');

    // Production dependencies suffice: every bare import of the compiled service is a dependency.
    const deps = Object.keys(JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')).dependencies);
    const builtins = new Set(builtinModules);
    const missing = new Set<string>();
    const seen = new Set<string>();
    for (const f of walk(path.join(app, 'dist')).filter((x) => x.endsWith('.js'))) {
      const js = readFileSync(path.join(app, 'dist', f), 'utf8');
      // Import statements and dynamic imports only: comments may say `from "…"` too.
      const statements =
        /^\s*(?:import|export)\b[^;]*?\bfrom\s*['"]([^'".][^'"]*)['"]|^\s*import\s*['"]([^'".][^'"]*)['"]|\bimport\(\s*['"]([^'".][^'"]*)['"]\s*\)/gm;
      for (const m of js.matchAll(statements)) {
        const spec = (m[1] ?? m[2] ?? m[3])!;
        if (spec.startsWith('node:') || builtins.has(spec)) continue;
        const pkg = spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0]!;
        seen.add(pkg);
        if (!deps.includes(pkg)) missing.add(`${pkg} (${f})`);
      }
    }
    expect(seen).toContain('@grpc/grpc-js');
    expect(seen).toContain('better-sqlite3');
    expect([...missing]).toEqual([]);
  }, 120_000);

  it('without the generation step the same replay fails as the builder did (TS2307 on src/generated)', () => {
    const broken: Stage = {
      ...stage('build'),
      steps: stage('build').steps.filter((s) => !s.args.includes('gen-proto-types')),
    };
    const context = path.join(tmp, 'context-broken');
    const app = path.join(tmp, 'app-broken');
    mkdirSync(context);
    mkdirSync(app);
    cleanCheckout(context);
    expect(() => replay(broken, context, app)).toThrow(/TS2307[^\n]*generated\/proto/);
  }, 120_000);
});
