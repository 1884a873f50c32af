/** Model capability catalog and tokenizer-family policies (contract.md §5), plus an optional override file. */
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import type { EstimateKind } from '../text/estimate.js';
import { Errors } from '../wire/errors.js';
import builtin from './catalog.json' with { type: 'json' };

const modelSchema = z.object({
  model_id: z.string().trim().min(1),
  provider: z.string(),
  context_window: z.number().int().positive(),
  max_output_tokens: z.number().int().positive(),
  supports_tools: z.boolean(),
  supports_vision: z.boolean(),
  supports_streaming: z.boolean(),
  tokenizer_family: z.string().min(1),
});

const familySchema = z.object({
  tokenizer_family: z.string().min(1),
  estimate_kind: z.enum(['chars_div_4', 'runes_div_3_5', 'bpe_o200k_base', 'bpe_cl100k_base']),
  safety_buffer_fraction: z.number().min(0).max(1),
});

/** Catalog file schema (schema_version 1). */
export const catalogFileSchema = z.object({
  schema_version: z.literal(1),
  models: z.array(modelSchema),
  families: z.array(familySchema).default([]),
});

export type ModelCapability = z.infer<typeof modelSchema>;

export interface FamilyPolicy {
  tokenizer_family: string;
  estimate_kind: EstimateKind;
  /** Fraction of the context window kept as safety buffer, in [0,1]. */
  safety_buffer_fraction: number;
}

export interface CatalogOptions {
  /** IBEX_CONTEXT_EXACT_TOKENS: the two OpenAI families count with their own BPE encodings. */
  exactTokens?: boolean;
}

const EXACT_KINDS = [
  ['o200k_base', 'bpe_o200k_base'],
  ['cl100k_base', 'bpe_cl100k_base'],
] as const;

export interface ResolvedModel {
  model: ModelCapability;
  policy: FamilyPolicy;
}

export class CapabilityCatalog {
  private readonly models: Map<string, ModelCapability>;
  private readonly families: Map<string, FamilyPolicy>;

  private constructor(models: Map<string, ModelCapability>, families: Map<string, FamilyPolicy>) {
    this.models = models;
    this.families = families;
  }

  /** Builds the catalog: built-in rows, then overrides by id. @throws IbexError `IBEX_ERR_CATALOG`. */
  static create(overrides: unknown[] = [], options: CatalogOptions = {}): CapabilityCatalog {
    const models = new Map<string, ModelCapability>();
    const families = new Map<string, FamilyPolicy>();
    for (const raw of [builtin, ...overrides]) {
      const parsed = catalogFileSchema.safeParse(raw);
      if (!parsed.success) {
        const issue = parsed.error.issues[0];
        throw Errors.catalog(`${issue?.path.join('.') ?? ''}: ${issue?.message ?? 'invalid'}`);
      }
      for (const f of parsed.data.families) families.set(f.tokenizer_family, f);
      for (const m of parsed.data.models) models.set(m.model_id, { ...m, model_id: m.model_id });
    }
    if (options.exactTokens) {
      for (const [name, kind] of EXACT_KINDS) {
        const f = families.get(name);
        if (f) families.set(name, { ...f, estimate_kind: kind });
      }
    }
    for (const m of models.values()) {
      if (!families.has(m.tokenizer_family)) {
        throw Errors.catalog(`model ${m.model_id} names unknown tokenizer_family ${m.tokenizer_family}`);
      }
    }
    return new CapabilityCatalog(models, families);
  }

  /** Built-in catalog plus an optional override file. @throws IbexError `IBEX_ERR_CATALOG`. */
  static load(overrideFile = '', options: CatalogOptions = {}): CapabilityCatalog {
    if (overrideFile.trim() === '') return CapabilityCatalog.create([], options);
    let raw: unknown;
    try {
      raw = JSON.parse(readFileSync(overrideFile, 'utf8'));
    } catch (err) {
      throw Errors.catalog(`cannot read ${overrideFile}`, err);
    }
    return CapabilityCatalog.create([raw], options);
  }

  /** Looks a model up (trimmed, case-sensitive). @throws IbexError `IBEX_ERR_UNKNOWN_MODEL`. */
  resolve(modelName: string): ResolvedModel {
    const model = this.models.get(modelName.trim());
    if (!model) throw Errors.unknownModel(modelName.trim());
    return { model, policy: this.family(model.tokenizer_family) };
  }

  /** Policy of a tokenizer family; unknown families get the `unknown` policy. */
  family(name: string): FamilyPolicy {
    return this.families.get(name) ?? (this.families.get('unknown') as FamilyPolicy);
  }

  modelIds(): string[] {
    return [...this.models.keys()];
  }
}
