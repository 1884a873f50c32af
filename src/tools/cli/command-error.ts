/**
 * The one error format of the client commands: text on stderr for a person, a JSON object on
 * stdout with `--json` for a script. Kept free of gRPC imports so `ingest` stays light.
 */

/**
 * Prints a command's error: `{"error": message, ...extra}` on stdout with `--json`, else
 * `ibex-context <command>: message` on stderr.
 */
export function printCommandError(
  command: string,
  message: string,
  json: boolean,
  extra: Record<string, unknown> = {},
): void {
  if (json) process.stdout.write(`${JSON.stringify({ error: message, ...extra })}\n`);
  else process.stderr.write(`ibex-context ${command}: ${message}\n`);
}
