/**
 * Every shared pack and format vector (contract.md §13) through the real pool (compiled worker, `npm run build`)
 * and inline: the two CPU-task outputs must be equal, and equal what the vector expects.
 *
 * How a vector maps onto one CPU task (pack + format):
 * - pack vector: each candidate's score is the interim score and its token cost the raw content estimate
 *   of the vector's tokenizer family (exactly what `ibex-context pack` does); budget, ceiling and skip
 *   limit as given. The task also formats the selection (fixed nonce, no directive/history/tools), which
 *   must equal the formatter run on the CLI's `memory_ids` in that order.
 * - format vector: the memories are already in packed order, so the packer must keep all of them in that
 *   order. Scores strictly decreasing in the given order make the canonical order the given order (even
 *   for repeated ids); one token each under a budget of n + 16 makes every memory fit. Directive, history,
 *   tools and nonce as given.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { toCpuCandidate } from '../../bench/lib/synthetic.js';
import { CapabilityCatalog } from '../../src/budget/catalog.js';
import { encodeCandidates } from '../../src/cpu-stage/cpu-batch-encode.js';
import { type CpuCandidate, type CpuTaskOutput, runCpuTask } from '../../src/cpu-stage/cpu-task.js';
import { formatContext } from '../../src/format/formatter.js';
import { CpuPool } from '../../src/pool/pool-client.js';
import { estimateTokens } from '../../src/text/estimate.js';
import {
  type FormatInput,
  type PackInput,
  type PackOutput,
  runJsonCommand,
} from '../../src/tools/cli/json-commands.js';
import { monotonicNow } from '../../src/util/clock.js';

const here = path.dirname(fileURLToPath(import.meta.url));

interface Vector<I, E> {
  name: string;
  input: I;
  expect: E;
}
interface PackExpect {
  reference: Omit<PackOutput, 'was_budget_reached'>;
  exact_match: boolean;
  optimum_score: number;
}
interface FormatExpect {
  assembled_context: string;
  memories_included: number;
}

function load<I, E>(kind: string): Vector<I, E>[] {
  const file = path.resolve(here, `../vectors/${kind}.json`);
  return (JSON.parse(readFileSync(file, 'utf8')) as { vectors: Vector<I, E>[] }).vectors;
}

const packVectors = load<PackInput, PackExpect>('pack');
const formatVectors = load<FormatInput, FormatExpect>('format');
const catalog = CapabilityCatalog.create();
const NONCE = 'vector-nonce';

function packTask(v: PackInput) {
  const kind = catalog.family(v.tokenizer_family).estimate_kind;
  const candidates = v.candidates.map((c) => toCpuCandidate(c, estimateTokens(c.content, kind)));
  const input = encodeCandidates(candidates, {
    budget: v.token_budget,
    dpCellCeiling: v.dp_cell_ceiling,
    maxConsecutiveSkips: v.max_consecutive_skips,
    nonce: NONCE,
    directive: null,
    recentMessages: [],
    toolSchemas: [],
    deadline: monotonicNow() + 60_000,
  });
  return { candidates, input };
}

function formatTask(v: FormatInput) {
  const n = v.memories.length;
  const candidates: CpuCandidate[] = v.memories.map((m, i) => ({
    ...m,
    score: (n - i) / n,
    similarity: 0,
    confidence: 0,
    rank: i + 1,
    tokens: 1,
  }));
  return encodeCandidates(candidates, {
    budget: n + 16,
    dpCellCeiling: 437_570,
    maxConsecutiveSkips: 5,
    nonce: v.nonce,
    directive: v.directive,
    recentMessages: v.recent_messages,
    toolSchemas: v.tool_schemas,
    deadline: monotonicNow() + 60_000,
  });
}

/** The deterministic part of an output (timings and the thread differ by construction). */
function stable(o: CpuTaskOutput) {
  return {
    selected: Array.from(o.selected),
    excluded: Array.from(o.excluded),
    assembled_context: o.assembled_context,
    memories_included: o.memories_included,
    pack: o.pack,
  };
}

let pool: CpuPool;
beforeAll(async () => {
  pool = await CpuPool.start({
    minThreads: 2,
    maxThreads: 2,
    maxQueue: 16,
    idleTimeoutMs: 60_000,
    maxOldGenerationMb: 128,
  });
});
afterAll(async () => {
  await pool?.close();
});

describe('pack vectors through the pool', () => {
  it.each(packVectors.map((v) => [v.name, v] as const))('%s', async (_name, v) => {
    const { candidates, input } = packTask(v.input);
    const inline = runCpuTask(packTask(v.input).input);
    const { output } = await pool.run(input);
    expect(output.thread_id).not.toBe(0);
    expect(stable(output)).toEqual(stable(inline));

    // The pack vector's expectations (contract.md §13 acceptance), read off the pool's output.
    const ids = Array.from(output.selected, (i) => candidates[i]!.memory_id);
    const n = candidates.length;
    const ref = v.expect.reference;
    expect(output.pack.path).toBe(ref.path);
    expect(output.pack.candidates_evaluated).toBe(ref.candidates_evaluated);
    expect(output.pack.skipped_count + ids.length).toBe(n);
    expect(output.pack.total_tokens).toBeLessThanOrEqual(Math.max(0, v.input.token_budget));
    expect(output.pack.total_score).toBeGreaterThanOrEqual(ref.total_score - 1e-9);
    if (v.expect.exact_match) {
      expect(ids).toEqual(ref.memory_ids);
      expect(output.pack.total_tokens).toBe(ref.total_tokens);
      expect(output.pack.total_score).toBe(ref.total_score);
    }
    // Same selection as the CLI's `pack` command, formatted as the formatter would.
    const cli = runJsonCommand('pack', v.input) as { memory_ids: string[]; total_score: number };
    expect(ids).toEqual(cli.memory_ids);
    expect(output.pack.total_score).toBe(cli.total_score);
    const formatted = formatContext({
      directive: null,
      recentMessages: [],
      memories: Array.from(output.selected, (i) => candidates[i]!),
      toolSchemas: [],
      nonce: NONCE,
    });
    expect(output.assembled_context).toBe(formatted.assembled_context);
    expect(output.memories_included).toBe(ids.length);
  });
});

describe('format vectors through the pool', () => {
  it.each(formatVectors.map((v) => [v.name, v] as const))('%s', async (_name, v) => {
    const inline = runCpuTask(formatTask(v.input));
    const { output } = await pool.run(formatTask(v.input));
    expect(stable(output)).toEqual(stable(inline));
    const n = v.input.memories.length;
    // The packer kept every memory, in the given order.
    expect(Array.from(output.selected)).toEqual(Array.from({ length: n }, (_, i) => i));
    expect(output.pack.skipped_count).toBe(0);
    expect({
      assembled_context: output.assembled_context,
      memories_included: output.memories_included,
    }).toEqual(v.expect);
  });
});
