// The JSON commands of contract.md §13; the CLI and the vector tests share {@link runJsonCommand}.
import { z } from 'zod';
import { calculateBudget } from '../../budget/budget-calculator.js';
import { CapabilityCatalog } from '../../budget/catalog.js';
import { catalogFileSetting, exactTokensSetting } from '../../config/settings.js';
import { formatContext } from '../../format/formatter.js';
import { pack } from '../../pack/packer.js';
import { interimScore } from '../../ranking/score.js';
import { estimateTokens } from '../../text/estimate.js';
import { describeIssues } from './input-issues.js';

export const JSON_COMMANDS = ['estimate', 'budget', 'pack', 'format'] as const;
export type JsonCommand = (typeof JSON_COMMANDS)[number];

/** A rejected input; `message` is `<field>: <reason>`, printed as `{"error": message}`. */
export class InputError extends Error {}

const message = z.object({ role: z.string(), content: z.string() });
const unit = z.number().refine(Number.isFinite, 'must be finite').pipe(z.number().min(0).max(1));

const schemas = {
  estimate: z.object({
    text: z.string(),
    tokenizer_family: z.string().min(1),
    // An explicit kind overrides the family's (contract.md §13).
    estimate_kind: z.enum(['chars_div_4', 'runes_div_3_5', 'bpe_o200k_base', 'bpe_cl100k_base']).optional(),
  }),
  budget: z.object({
    model: z.string(),
    directive: z.string().nullable().default(null),
    recent_messages: z.array(message).default([]),
    tool_schemas: z.array(z.string()).default([]),
    nonce_bytes: z.number().int().min(1).max(64).default(16),
    available_tokens: z.number().int().min(0).default(0),
  }),
  pack: z.object({
    token_budget: z.number().int(),
    tokenizer_family: z.string().min(1),
    dp_cell_ceiling: z.number().int().min(1),
    max_consecutive_skips: z.number().int().min(0),
    candidates: z.array(
      z.object({
        memory_id: z.string(),
        content: z.string(),
        category: z.string(),
        similarity: unit,
        confidence: unit,
        rank: z.number().int().min(1),
        source: z.string(),
      }),
    ),
  }),
  format: z.object({
    directive: z.string().nullable().default(null),
    recent_messages: z.array(message).default([]),
    memories: z.array(z.object({ memory_id: z.string(), category: z.string(), content: z.string() })),
    tool_schemas: z.array(z.string()).default([]),
    nonce: z.string().min(1),
  }),
} as const;

/** Input of `ibex-context pack` (contract.md §13), as its schema accepts it. */
export type PackInput = z.infer<typeof schemas.pack>;
export type PackCandidateInput = PackInput['candidates'][number];
/** Input of `ibex-context format` (contract.md §13), defaults filled. */
export type FormatInput = z.infer<typeof schemas.format>;

/** Output of `ibex-context pack` (contract.md §13): the selection in packed order and its totals. */
export interface PackOutput {
  memory_ids: string[];
  total_tokens: number;
  total_score: number;
  skipped_count: number;
  was_budget_reached: boolean;
  /** Which packer path chose (contract.md §8). */
  path: string;
  candidates_evaluated: number;
}

let catalog: CapabilityCatalog | undefined;
function getCatalog(): CapabilityCatalog {
  catalog ??= CapabilityCatalog.load(catalogFileSetting(), {
    exactTokens: exactTokensSetting(),
  });
  return catalog;
}

function parse<C extends JsonCommand>(command: C, input: unknown): z.infer<(typeof schemas)[C]> {
  const result = schemas[command].safeParse(input);
  // Every problem at once, in the contract's words.
  if (!result.success) throw new InputError(describeIssues(result.error.issues, input));
  return result.data as z.infer<(typeof schemas)[C]>;
}

/** Runs one JSON command on one input (contract.md §13). @throws InputError `<field>: <reason>`. */
export function runJsonCommand(command: JsonCommand, input: unknown): Record<string, unknown> {
  switch (command) {
    case 'estimate': {
      const { text, tokenizer_family, estimate_kind } = parse('estimate', input);
      const kind = estimate_kind ?? getCatalog().family(tokenizer_family).estimate_kind;
      return { tokens: estimateTokens(text, kind), estimate_kind: kind };
    }
    case 'budget': {
      const b = parse('budget', input);
      let model: ReturnType<CapabilityCatalog['resolve']>;
      try {
        model = getCatalog().resolve(b.model);
      } catch (err) {
        throw new InputError(`model: ${(err as Error).message}`);
      }
      return {
        ...calculateBudget({
          model,
          directive: b.directive,
          recentMessages: b.recent_messages,
          toolSchemas: b.tool_schemas,
          nonceBytes: b.nonce_bytes,
          availableTokens: b.available_tokens,
        }),
      };
    }
    case 'pack': {
      const p = parse('pack', input);
      const kind = getCatalog().family(p.tokenizer_family).estimate_kind;
      const n = p.candidates.length;
      const scores = new Float64Array(n);
      const tokens = new Int32Array(n);
      p.candidates.forEach((c, i) => {
        scores[i] = interimScore(c.similarity, c.confidence);
        tokens[i] = estimateTokens(c.content, kind);
      });
      const ids = p.candidates.map((c) => c.memory_id);
      const r = pack({
        ids,
        scores,
        tokens,
        budget: p.token_budget,
        dpCellCeiling: p.dp_cell_ceiling,
        maxConsecutiveSkips: p.max_consecutive_skips,
      });
      const out: PackOutput = {
        memory_ids: Array.from(r.selected, (i) => ids[i]!),
        total_tokens: r.total_tokens,
        total_score: r.total_score,
        skipped_count: r.skipped_count,
        was_budget_reached: r.was_budget_reached,
        path: r.path,
        candidates_evaluated: r.candidates_evaluated,
      };
      return { ...out };
    }
    case 'format': {
      const f = parse('format', input);
      return {
        ...formatContext({
          directive: f.directive,
          recentMessages: f.recent_messages,
          memories: f.memories,
          toolSchemas: f.tool_schemas,
          nonce: f.nonce,
        }),
      };
    }
  }
}

/** Runs one command on one line of JSON text; never throws: `{ok, output}` or `{ok: false, output}`. */
export function runJsonText(
  command: JsonCommand,
  text: string,
): { ok: boolean; output: Record<string, unknown> } {
  let input: unknown;
  try {
    input = JSON.parse(text);
  } catch (err) {
    return { ok: false, output: { error: `input: invalid JSON (${(err as Error).message})` } };
  }
  try {
    return { ok: true, output: runJsonCommand(command, input) };
  } catch (err) {
    return {
      ok: false,
      output: { error: err instanceof InputError ? err.message : `internal: ${(err as Error).message}` },
    };
  }
}
