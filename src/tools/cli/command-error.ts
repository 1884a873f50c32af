// The one error format of the commands; free of gRPC imports so `ingest` stays light.

/** Prints `{"error": message, ...extra}` on stdout with `--json`, else `ibex-context <command>: message`. */
export function printCommandError(
  command: string,
  message: string,
  json: boolean,
  extra: Record<string, unknown> = {},
): void {
  if (json) process.stdout.write(`${JSON.stringify({ error: message, ...extra })}\n`);
  else process.stderr.write(`ibex-context ${command}: ${message}\n`);
}
