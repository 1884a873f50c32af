/**
 * The prologue the client commands (`load`, `replay`, `assemble`, `healthcheck`) share (issue 14 item 6):
 * strict `parseArgs` with the connection flags, `--json` and `-h/--help`; usage on `--help`; a flag error
 * printed once, in the one error format (command-error.ts), with the usage after it for a person.
 */
import { type ParseArgsConfig, parseArgs } from 'node:util';
import { CONNECTION_FLAGS } from '../client/cli-options.js';
import { printCommandError } from './command-error.js';

const COMMON_FLAGS = {
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

/**
 * Parses a client command's arguments: its own `options` plus {@link CONNECTION_FLAGS}, `--json`, `--help`.
 * No positionals.
 * @throws TypeError (node:util) for an unknown flag, a missing value or a positional.
 */
export function parseClientArgs<const O extends NonNullable<ParseArgsConfig['options']>>(
  argv: string[],
  options: O,
) {
  return parseArgs({
    args: argv,
    strict: true,
    allowPositionals: false,
    options: { ...CONNECTION_FLAGS, ...options, ...COMMON_FLAGS },
  }).values;
}

/** Prints `usage` for `--help`. @returns exit code 0. */
export function printUsage(usage: string): number {
  process.stdout.write(`${usage}\n`);
  return 0;
}

/** Prints a flag error of `command` (with the usage unless `--json`). @returns exit code 2. */
export function flagError(command: string, err: unknown, json: boolean, usage: string): number {
  printCommandError(command, (err as Error).message, json);
  if (!json) process.stderr.write(`${usage}\n`);
  return 2;
}
