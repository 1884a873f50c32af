/**
 * Plumbing shared by the load benches: a temporary store directory removed on exit, the machine
 * description written next to the figures, number-list flags, and the start and end every bench main
 * shares (options or usage, exit code).
 */

import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { type Flags, stringFlags } from '../../src/tools/cli/command-args.js';
import { numberFlag } from '../../src/tools/client/cli-options.js';
import { projectPath } from './paths.js';

/** A temporary directory for the bench's SQLite store, removed when the process exits (any way). */
export function tempDir(prefix: string): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), prefix));
  process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** What the figures were measured on. */
export function machineInfo() {
  return {
    cpus: os.availableParallelism(),
    cpu_model: os.cpus()[0]?.model ?? 'unknown',
    memory_gb: Math.round(os.totalmem() / 2 ** 30),
    loadavg_1m_at_start: Math.round(os.loadavg()[0]! * 100) / 100,
    platform: `${os.platform()} ${os.release()}`,
  };
}

/**
 * The lines of the trace file a bench reads (its `flag`, e.g. `--log`), each parsed by `parse`; lines it
 * gives null for are left out.
 * @returns null once `cannot read <flag> <file>: <reason>` is printed (a file that cannot be read).
 */
export function readParsedLines<T>(
  flag: string,
  file: string,
  parse: (line: string) => T | null,
): T[] | null {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    console.error(`cannot read ${flag} ${file}: ${(err as Error).message}`);
    return null;
  }
  return text
    .split('\n')
    .map(parse)
    .filter((e): e is T => e !== null);
}

/**
 * The flags every log-summarising bench shares (bench:gc-trace, bench:memory-log): `--log <file>`, required;
 * `--after-ms <ms>`, default 0; `--json`.
 * @throws Error for a missing `--log` or a bad `--after-ms`.
 */
export function logFlags(values: { log?: string; 'after-ms'?: string; json?: boolean }): {
  log: string;
  afterMs: number;
  json: boolean;
} {
  if (values.log === undefined) throw new Error('--log is required');
  return {
    log: values.log,
    afterMs: parseNumber('--after-ms', values['after-ms'] ?? '0', true),
    json: values.json ?? false,
  };
}

/**
 * Parses `500,1000,2000` into positive integers.
 * @throws Error naming the flag for anything else.
 */
export function parseList(flag: string, text: string): number[] {
  const values = text.split(',').map((v) => Number(v.trim()));
  if (values.length === 0 || values.some((v) => !Number.isInteger(v) || v <= 0)) {
    throw new Error(`${flag} must be a comma-separated list of positive integers, got '${text}'`);
  }
  return values;
}

/**
 * Parses a positive number flag (`allowZero` for durations that may be skipped) with the commands'
 * {@link numberFlag}.
 * @throws Error naming the flag.
 */
export function parseNumber(flag: string, text: string, allowZero = false): number {
  return numberFlag(flag.replace(/^--/, ''), text, 0, { positive: !allowZero });
}

/**
 * Parses repeated `--service-env IBEX_CONTEXT_X=value` flags. Only `IBEX_CONTEXT_*` names are accepted:
 * the service child never inherits them from the shell, so a run's settings are all in its results.
 * @throws Error for a malformed pair or another variable.
 */
export function parseEnvPairs(pairs: readonly string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const pair of pairs) {
    const i = pair.indexOf('=');
    const name = i > 0 ? pair.slice(0, i) : '';
    if (!/^IBEX_CONTEXT_[A-Z0-9_]+$/.test(name)) {
      throw new Error(`--service-env takes IBEX_CONTEXT_NAME=value, got '${pair}'`);
    }
    out[name] = pair.slice(i + 1);
  }
  return out;
}

const HELP_FLAG = { help: { type: 'boolean', short: 'h' } } as const;

/** The values `parseArgs` returns for a bench's `options` plus `-h/--help`. */
export type BenchFlagValues<O extends Flags> = ReturnType<
  typeof parseArgs<{ args: string[]; strict: true; allowPositionals: false; options: O & typeof HELP_FLAG }>
>['values'];

/**
 * The prologue every bench main shares: parses `argv` (strict, no positionals) against `options` plus
 * `-h/--help` and hands the values to `configure`; the usage goes to stdout for `--help` and after the
 * message to stderr for a bad flag (anything `parseArgs` or `configure` throws).
 * @returns the options, or the exit code (0 after `--help`, 2 for a bad flag) when the bench must stop.
 */
export function benchOptions<const O extends Flags, T>(
  argv: string[],
  usage: string,
  options: O,
  configure: (values: BenchFlagValues<O>) => T,
): T | number {
  try {
    const values = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: { ...options, ...HELP_FLAG },
    }).values as BenchFlagValues<O>;
    if ((values as { help?: boolean }).help) {
      console.log(usage);
      return 0;
    }
    return configure(values);
  } catch (err) {
    console.error(`${(err as Error).message}\n${usage}`);
    return 2;
  }
}

/** Flags of the benches that run a service child under measured load steps (`load`, `pool-sweep`). */
const SERVICE_LOAD_FLAGS = {
  ...stringFlags('locomo', 'connections', 'timeout', 'out'),
  'service-env': { type: 'string', multiple: true },
  'node-arg': { type: 'string', multiple: true },
  'plain-node': { type: 'boolean' },
  'service-log': { type: 'string' },
} as const;

/** Usage lines of {@link SERVICE_LOAD_FLAGS} but `--out` (whose text names the bench's files). */
const SERVICE_LOAD_USAGE = [
  '  --locomo <dir>          ingest and drive LoCoMo turns (default: generated LoCoMo-shaped data)',
  '  --connections <n>       gRPC channels of the driver (default 10)',
  '  --timeout <ms>          per-call gRPC deadline of the client (default 1000)',
  '  --service-env <K=V>     extra IBEX_CONTEXT_* setting of the service (repeatable)',
  '  --node-arg <flag>       extra node/V8 flag of the service process, e.g. --node-arg=--single-threaded-gc',
  '                          (repeatable)',
  '  --plain-node            start the service without its own node flags (SERVICE_NODE_FLAGS, as npm start',
  '                          gives them): the A side of an A/B of those flags',
  '  --service-log <file>    write everything the service prints to <file> (bench:pool-sweep: one file per',
  '                          pool size, <file>.threads-<n>), e.g. with --node-arg=--trace-gc-nvp for',
  '                          npm run bench:internal -- gc-trace',
].join('\n');

/** {@link SERVICE_LOAD_FLAGS} resolved. */
export interface ServiceLoadOptions {
  /** LoCoMo directory to ingest and drive; undefined = generated LoCoMo-shaped data. */
  locomo: string | undefined;
  /** gRPC channels of the driver (default 10). */
  connections: number;
  /** Per-call gRPC deadline of the client, ms (default 1000). */
  timeoutMs: number;
  /** Extra IBEX_CONTEXT_* settings of the service ({@link parseEnvPairs}). */
  serviceEnv: Record<string, string>;
  /** Extra `node` flags of the service process (`--node-arg`: GC and JIT experiments). */
  nodeArgs: string[];
  /** Start the service without SERVICE_NODE_FLAGS (`--plain-node`). */
  plainNode: boolean;
  /** Absolute file that receives the service's stdout and stderr (`--service-log`), if any. */
  serviceLog: string | undefined;
  /** Absolute directory the results go to (default bench/results). */
  out: string;
}

/**
 * `--node-arg` values: each must itself be a flag (`--…`), so a missing `=` cannot swallow the next option.
 * @throws Error naming the flag.
 */
export function nodeArgsOf(args: string[]): string[] {
  for (const a of args) {
    if (!a.startsWith('--'))
      throw new Error(`--node-arg takes a node flag such as --single-threaded-gc, got '${a}'`);
  }
  return args;
}

/**
 * `--service-log`, absolute; checked here so that a directory that is not there fails before any data is
 * generated or a service started.
 * @throws Error naming the flag.
 */
function serviceLogOf(file: string | undefined): string | undefined {
  if (file === undefined) return undefined;
  const abs = path.resolve(file);
  if (!existsSync(path.dirname(abs))) throw new Error(`--service-log: no directory ${path.dirname(abs)}`);
  return abs;
}

/**
 * Resolves {@link SERVICE_LOAD_FLAGS}.
 * @throws Error naming the flag.
 */
function serviceLoadOptions(values: BenchFlagValues<typeof SERVICE_LOAD_FLAGS>): ServiceLoadOptions {
  return {
    locomo: values.locomo,
    connections: parseInteger('--connections', values.connections ?? '10'),
    timeoutMs: parseNumber('--timeout', values.timeout ?? '1000'),
    serviceEnv: parseEnvPairs(values['service-env'] ?? []),
    nodeArgs: nodeArgsOf(values['node-arg'] ?? []),
    plainNode: values['plain-node'] === true,
    serviceLog: serviceLogOf(values['service-log']),
    out: path.resolve(values.out ?? projectPath('bench/results')),
  };
}

/**
 * {@link benchOptions} for the benches that run a service child under measured load steps (`load`,
 * `pool-sweep`): their own `options` plus {@link SERVICE_LOAD_FLAGS}, resolved by {@link serviceLoadOptions}
 * beside what `configure` makes of the rest. The usage lines of {@link SERVICE_LOAD_FLAGS} go before the
 * last line of `usage`, the bench's `--out` (whose text names the bench's files).
 * @returns the options, or the exit code when the bench must stop (as {@link benchOptions}).
 */
export function serviceLoadBenchOptions<const O extends Flags, T>(
  argv: string[],
  usage: string,
  options: O,
  configure: (values: BenchFlagValues<O>) => T,
): (ServiceLoadOptions & T) | number {
  const cut = usage.lastIndexOf('\n');
  const full = `${usage.slice(0, cut)}\n${SERVICE_LOAD_USAGE}${usage.slice(cut)}`;
  return benchOptions(argv, full, { ...SERVICE_LOAD_FLAGS, ...options }, (values) => ({
    ...serviceLoadOptions(values as BenchFlagValues<typeof SERVICE_LOAD_FLAGS>),
    ...configure(values as BenchFlagValues<O>),
  }));
}

/**
 * Parses a positive integer flag.
 * @throws Error naming the flag.
 */
export function parseInteger(flag: string, text: string): number {
  const n = parseNumber(flag, text);
  if (!Number.isInteger(n)) throw new Error(`${flag} must be an integer, got '${text}'`);
  return n;
}

/**
 * V8 flags of a process that drives load and times answers. With parallel scavenges and concurrent
 * marking, the driver's main thread waits for V8 helper threads that share its one pinned CPU, so a
 * collection of the driver's own garbage stalled it for 10–20 ms and landed in every latency it timed
 * (the bare grpc-js server's p99 too); one thread that collects alone does not wait for anybody.
 */
export const DRIVER_NODE_FLAGS: readonly string[] = ['--single-threaded-gc'];

/**
 * Runs this script again with DRIVER_NODE_FLAGS when the process lacks any of them (V8 reads its GC
 * threading when it starts, so they cannot be set later). @returns the child's exit code, or null when
 * the flags are already there and this process should go on.
 */
export function reexecWithDriverFlags(): number | null {
  const missing = DRIVER_NODE_FLAGS.filter((f) => !process.execArgv.includes(f));
  if (missing.length === 0) return null;
  const script = process.argv[1];
  if (script === undefined) return null;
  const r = spawnSync(process.execPath, [...missing, ...process.execArgv, script, ...process.argv.slice(2)], {
    stdio: 'inherit',
  });
  return r.status ?? 1;
}

/**
 * Runs a bench main: a number it resolves with is the exit code (else 0) (process.exit with `exit`, for benches whose clients
 * keep handles open; else process.exitCode); a failure is printed with its stack and exits 1 at once.
 * With `driver`, the process first makes sure it runs with DRIVER_NODE_FLAGS (see there).
 */
export function runBenchMain(
  main: () => Promise<unknown>,
  { exit = false, driver = false }: { exit?: boolean; driver?: boolean } = {},
): void {
  if (driver) {
    const code = reexecWithDriverFlags();
    if (code !== null) {
      process.exitCode = code;
      return;
    }
  }
  main().then(
    (result) => {
      const code = typeof result === 'number' ? result : 0;
      if (exit) process.exit(code);
      process.exitCode = code;
    },
    (err: unknown) => {
      console.error(err instanceof Error ? (err.stack ?? err.message) : String(err));
      process.exit(1);
    },
  );
}
