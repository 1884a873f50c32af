/**
 * The reachability check of the client commands that run many calls (`load`, `replay`): a refused
 * connection is said at once, in one line naming the address, instead of after a connect timeout.
 */
import { probeService } from '../client/cli-options.js';
import type { ConnectionOptions } from '../client/context-client.js';
import { printCommandError } from './command-error.js';

/**
 * Probes `conn` ({@link probeService}, within `timeoutMs`, default 1000 ms) and prints `command`'s error
 * (with `target`) when nothing answers.
 * @returns exit code 1 when unreachable, else null.
 */
export async function unreachableExit(
  command: string,
  conn: ConnectionOptions,
  json: boolean,
  timeoutMs?: number,
): Promise<number | null> {
  const unreachable = await probeService(conn, timeoutMs);
  if (unreachable === null) return null;
  printCommandError(command, unreachable, json, { target: conn.addr });
  return 1;
}
