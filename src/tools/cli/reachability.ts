// `load` and `replay` say a refused connection at once, in one line naming the address.
import { probeService } from '../client/cli-options.js';
import type { ConnectionOptions } from '../client/context-client.js';
import { printCommandError } from './command-error.js';

/** Probes `conn` within `timeoutMs` and prints `command`'s error when nothing answers: exit 1, else null. */
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
