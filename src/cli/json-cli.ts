/**
 * stdin/stdout driver of the JSON commands (SPEC §13): one input document, or with `--jsonl` one input
 * per line and one output per line in the same order. A rejected input prints `{"error": ...}`; in single
 * mode the exit code is then 1, in `--jsonl` mode the other lines go on and the exit code is 1 if any failed.
 */
import { createInterface } from 'node:readline';
import { type JsonCommand, runJsonText } from './json-commands.js';

async function readAll(stream: NodeJS.ReadableStream): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk));
  return Buffer.concat(chunks).toString('utf8');
}

/**
 * Runs `command` over stdin.
 * @param argv remaining arguments: `--jsonl` or nothing.
 * @returns process exit code: 0 all good, 1 some input rejected, 2 bad usage.
 */
export async function runJsonCli(
  command: JsonCommand,
  argv: string[],
  input: NodeJS.ReadableStream = process.stdin,
  output: NodeJS.WritableStream = process.stdout,
): Promise<number> {
  const unknown = argv.filter((a) => a !== '--jsonl');
  if (unknown.length > 0) {
    output.write(`${JSON.stringify({ error: `arguments: unknown ${unknown.join(' ')}` })}\n`);
    return 2;
  }
  if (!argv.includes('--jsonl')) {
    const { ok, output: out } = runJsonText(command, await readAll(input));
    output.write(`${JSON.stringify(out)}\n`);
    return ok ? 0 : 1;
  }
  let failed = false;
  const lines = createInterface({ input, crlfDelay: Number.POSITIVE_INFINITY });
  for await (const line of lines) {
    if (line.trim() === '') continue;
    const { ok, output: out } = runJsonText(command, line);
    failed ||= !ok;
    // Respect back-pressure so thousands of lines do not pile up in memory.
    if (!output.write(`${JSON.stringify(out)}\n`)) await new Promise((r) => output.once('drain', r));
  }
  return failed ? 1 : 0;
}
