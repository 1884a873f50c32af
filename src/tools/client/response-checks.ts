// Client-side checks of an answer against the contract (§2, §6, §9, §10): budget, memory blocks, level.
import { responseReserve } from '../../budget/budget-calculator.js';
import type { CapabilityCatalog } from '../../budget/catalog.js';
import { estimateTokens } from '../../text/estimate.js';
import type { AssembleContextResponse } from '../../wire/proto.js';

export type ViolationKind = 'budget' | 'memory_ids' | 'included_count' | 'level' | 'unknown_model';

export interface Violation {
  kind: ViolationKind;
  detail: string;
}

export interface ResponseCheck {
  violations: Violation[];
  contextTokens: number;
  limitTokens: number;
  /** False when the directive and history alone exceed the limit: the invariant does not apply (§6). */
  budgetChecked: boolean;
  blockIds: string[];
}

// Memory bodies and attribute values are escaped (contract.md §9), so neither pattern can be forged.
const OPEN_TAG = /<ibex_memory nonce="([^"]*)" id="([^"]*)" category="([^"]*)">\n/g;
const WHOLE_BLOCK = /<ibex_memory nonce="[^"]*" id="[^"]*" category="[^"]*">\n[\s\S]*?\n<\/ibex_memory>/g;

export function unescapeAttribute(value: string): string {
  // Ids almost never hold an entity: skip the five passes over each of ~450 ids an answer.
  if (!value.includes('&')) return value;
  return value
    .replaceAll('&quot;', '"')
    .replaceAll('&#x27;', "'")
    .replaceAll('&lt;', '<')
    .replaceAll('&gt;', '>')
    .replaceAll('&amp;', '&');
}

export function memoryBlockIds(context: string): string[] {
  return [...context.matchAll(OPEN_TAG)].map((m) => unescapeAttribute(m[2]!));
}

const LEVELS = new Set(['L0', 'L1', 'L2']);

/**
 * Checks one OK answer for `model`: budget (contract.md §6, unless the fixed parts already exceed it), block
 * ids vs `included` rows, included count, and the level against its header. Never throws.
 */
export function checkResponse(
  catalog: CapabilityCatalog,
  model: string,
  res: AssembleContextResponse,
  levelHeader?: string,
): ResponseCheck {
  const violations: Violation[] = [];
  const context = res.assembled_context ?? '';
  const blockIds = memoryBlockIds(context);

  let contextTokens = 0;
  let limitTokens = 0;
  let budgetChecked = false;
  let resolved: ReturnType<CapabilityCatalog['resolve']> | undefined;
  try {
    resolved = catalog.resolve(model);
  } catch {
    violations.push({ kind: 'unknown_model', detail: `model '${model}' is not in the local catalog` });
  }
  if (resolved) {
    const { model: m, policy } = resolved;
    const kind = policy.estimate_kind;
    limitTokens =
      m.context_window -
      responseReserve(m.context_window, m.max_output_tokens) -
      Math.trunc(m.context_window * policy.safety_buffer_fraction);
    contextTokens = estimateTokens(context, kind);
    const fixedTokens = estimateTokens(context.replace(WHOLE_BLOCK, ''), kind);
    budgetChecked = fixedTokens <= limitTokens;
    if (budgetChecked && contextTokens > limitTokens) {
      violations.push({
        kind: 'budget',
        detail: `estimate ${contextTokens} > ${limitTokens} (window − reserve − safety of ${m.model_id})`,
      });
    }
  }

  const memories = res.memories_used ?? [];
  const included = new Set(memories.filter((u) => u.exclusion === 'included').map((u) => u.memory_id));
  const includedRows = memories.filter((u) => u.exclusion === 'included').length;
  const stray = blockIds.filter((id) => !included.has(id));
  if (stray.length > 0) {
    violations.push({
      kind: 'memory_ids',
      detail: `${stray.length} block id(s) not 'included' in memories_used, e.g. ${stray[0]}`,
    });
  } else if (blockIds.length !== res.memories_included) {
    violations.push({
      kind: 'memory_ids',
      detail: `${blockIds.length} memory block(s) but memories_included = ${res.memories_included}`,
    });
  }
  if (includedRows !== res.memories_included) {
    violations.push({
      kind: 'included_count',
      detail: `${includedRows} 'included' row(s) but memories_included = ${res.memories_included}`,
    });
  }

  const level = res.degradation?.level;
  if (!level || !LEVELS.has(level)) {
    violations.push({ kind: 'level', detail: `degradation.level is '${level ?? ''}'` });
  } else if (levelHeader !== undefined && levelHeader !== level) {
    violations.push({ kind: 'level', detail: `header level ${levelHeader} ≠ degradation.level ${level}` });
  }
  return { violations, contextTokens, limitTokens, budgetChecked, blockIds };
}
