// The one prologue of the CLI commands: strict `parseArgs` with `--json` and `--help`, a flag error printed
// once in the one error format. Free of gRPC imports so `ingest` stays light.
import { type ParseArgsConfig, parseArgs } from 'node:util';
import { loadSettings } from '../../config/settings.js';
import { printCommandError } from './command-error.js';

const COMMON_FLAGS = {
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

export type Flags = NonNullable<ParseArgsConfig['options']>;

export function stringFlags<const N extends string>(...names: N[]): Record<N, { type: 'string' }> {
  return Object.fromEntries(names.map((n) => [n, { type: 'string' }])) as Record<N, { type: 'string' }>;
}

export function booleanFlags<const N extends string>(...names: N[]): Record<N, { type: 'boolean' }> {
  return Object.fromEntries(names.map((n) => [n, { type: 'boolean' }])) as Record<N, { type: 'boolean' }>;
}

export type FlagValues<O extends Flags> = ReturnType<
  typeof parseArgs<{
    args: string[];
    strict: true;
    allowPositionals: false;
    options: O & typeof COMMON_FLAGS;
  }>
>['values'];

export interface CommandSpec<O extends Flags> {
  command: string;
  usage: string;
  options: O;
}

/** The configuration and `--json`, or the exit code to return at once (0 after `--help`, 2: bad flag). */
export type Prologue<T> = { exit: null; config: T; json: boolean } | { exit: number };

/**
 * Parses `argv` (no positionals) and hands the values to `configure`; anything either throws is a flag
 * error (exit 2): JSON on stdout with `--json`, else stderr followed by the usage.
 */
export async function commandPrologue<const O extends Flags, T>(
  argv: string[],
  spec: CommandSpec<O>,
  configure: (values: FlagValues<O>) => T | Promise<T>,
): Promise<Prologue<T>> {
  // Known before parsing, so an unparseable command line is still answered in the asked format.
  let json = argv.includes('--json');
  try {
    const values = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: { ...spec.options, ...COMMON_FLAGS },
    }).values as FlagValues<O>;
    const common = values as { help?: boolean; json?: boolean };
    if (common.help) {
      process.stdout.write(`${spec.usage}\n`);
      return { exit: 0 };
    }
    json = common.json ?? false;
    return { exit: null, config: await configure(values), json };
  } catch (err) {
    printCommandError(spec.command, (err as Error).message, json);
    if (!json) process.stderr.write(`${spec.usage}\n`);
    return { exit: 2 };
  }
}

export const STORE_FLAGS = stringFlags('db', 'postgres');

/** The store a dev command writes or serves: the embedded file, or PostgreSQL when `postgres` is set. */
export interface StoreChoice {
  db: string;
  postgres: { url: string; schema: string } | null;
}

/**
 * Resolves {@link STORE_FLAGS} (`--postgres`, `--db`, then the store settings). Only the store settings are
 * read, so unrelated settings cannot block a dev command. @throws Error for a bad URL or setting.
 */
export function storeFromFlags(
  values: { db?: string; postgres?: string },
  env: NodeJS.ProcessEnv = process.env,
): StoreChoice {
  if (values.postgres !== undefined && !/^postgres(ql)?:\/\/\S+$/.test(values.postgres.trim()))
    throw new Error('--postgres must be a postgres:// URL');
  const settings = loadSettings({
    IBEX_CONTEXT_EMBEDDED_DB: env.IBEX_CONTEXT_EMBEDDED_DB,
    IBEX_CONTEXT_POSTGRES_URL: values.postgres ?? (values.db ? '' : env.IBEX_CONTEXT_POSTGRES_URL),
    IBEX_CONTEXT_POSTGRES_SCHEMA: env.IBEX_CONTEXT_POSTGRES_SCHEMA,
  });
  const { url, schema } = settings.postgres;
  return { db: values.db ?? settings.embeddedDb, postgres: url === '' ? null : { url, schema } };
}

/** A command's progress line on stderr, drawn only on a terminal so logs and pipes stay clean. */
export interface ProgressLine {
  readonly tty: boolean;
  draw(text: string): void;
  clear(): void;
}

export function progressLine(stream: NodeJS.WriteStream = process.stderr): ProgressLine {
  const tty = stream.isTTY === true;
  return {
    tty,
    draw: (text) => {
      if (tty) stream.write(`\r\x1b[2K${text}`);
    },
    clear: () => {
      if (tty) stream.write('\r\x1b[2K');
    },
  };
}
