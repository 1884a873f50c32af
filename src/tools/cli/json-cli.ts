// stdin/stdout driver of the JSON commands (contract.md §13): one document, or `--jsonl` one per line;
// a rejected input prints `{"error": ...}` and makes the exit code 1 (other lines still go on).
import { createInterface } from 'node:readline';
import { type JsonCommand, runJsonText } from './json-commands.js';

async function readAll(stream: NodeJS.ReadableStream): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk));
  return Buffer.concat(chunks).toString('utf8');
}

const INPUTS: Record<JsonCommand, string> = {
  estimate: '{text, tokenizer_family, estimate_kind?}',
  budget:
    '{model, directive (string|null), recent_messages[{role,content}], tool_schemas[], nonce_bytes, available_tokens?}',
  pack:
    '{token_budget, tokenizer_family, dp_cell_ceiling, max_consecutive_skips,\n' +
    '   candidates[{memory_id, content, category, similarity, confidence, rank, source}]}',
  format:
    '{directive (string|null), recent_messages[{role,content}], memories[{memory_id, category, content}],\n' +
    '   tool_schemas[], nonce}',
};

const OUTPUTS: Record<JsonCommand, string> = {
  estimate: 'tokens, estimate_kind',
  budget: 'the TokenBudget fields of contract.md §6, snake_case',
  pack: 'memory_ids, total_tokens, total_score, skipped_count, was_budget_reached, path, candidates_evaluated',
  format: 'assembled_context, memories_included',
};

export function jsonCommandUsage(command: JsonCommand): string {
  return [
    `usage: ibex-context ${command} [--jsonl] < input.json`,
    '',
    `Reads one input on stdin and prints the result as one JSON line (contract.md §13).`,
    `  input:  ${INPUTS[command]}`,
    `  output: ${OUTPUTS[command]}`,
    '',
    '  --jsonl     one input per line in, one output per line out, same order; a rejected line prints',
    '              its {"error"} and the others go on',
    '  -h, --help  this text',
    '',
    'A rejected input prints {"error": "<field>: <reason>; <field>: <reason>"} naming every problem,',
    'and exits 1. Examples: the "input" of each vector in test/vectors/' + `${command}.json.`,
  ].join('\n');
}

/** Runs `command` over stdin (`--jsonl`, `--help` or nothing); exit 0 ok, 1 input rejected, 2 usage. */
export async function runJsonCli(
  command: JsonCommand,
  argv: string[],
  input: NodeJS.ReadableStream = process.stdin,
  output: NodeJS.WritableStream = process.stdout,
): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    output.write(`${jsonCommandUsage(command)}\n`);
    return 0;
  }
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
