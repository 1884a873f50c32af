/** Directive envelope rules (contract.md §4.2), shared by Redis and the embedded store. */

import { canonicalUuid } from '../util/uuid.js';
import type { Directive } from '../wire/types.js';
import { BranchErrors } from './branch-error.js';

/** Known injection modes; anything else (or blank) becomes `system_first`. */
export const INJECTION_MODES: readonly Directive['injection_mode'][] = [
  'system_first',
  'system_append',
  'user_prepend',
];

const utf8 = new TextDecoder('utf-8', { fatal: true });

/** `{org_id}:directive:{agent_id}`, lower-case (contract.md §4.2). */
export function directiveKey(orgId: string, agentId: string): string {
  return `${orgId.toLowerCase()}:directive:${agentId.toLowerCase()}`;
}

/** contract.md §4.2 on a decoded envelope; `null` for empty content. @throws BranchError. */
export function parseDirectiveObject(value: unknown): Directive | null {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw BranchErrors.badDirective('not an object');
  }
  const env = value as Record<string, unknown>;
  if (env.v !== 1) throw BranchErrors.badDirective('v must be 1');
  const content = env.content ?? '';
  if (typeof content !== 'string') throw BranchErrors.badDirective('content must be a string');
  const mode = env.injection_mode;
  if (typeof mode !== 'string') throw BranchErrors.badDirective('injection_mode must be a string');
  const version = env.version_id;
  if (typeof version !== 'string') throw BranchErrors.badDirective('version_id must be a string');
  const versionId = canonicalUuid(version);
  if (versionId === null) throw BranchErrors.badDirective('version_id must be a UUID');
  if (content === '') return null;
  const trimmedMode = mode.trim().toLowerCase();
  const injection_mode = (INJECTION_MODES as readonly string[]).includes(trimmedMode)
    ? (trimmedMode as Directive['injection_mode'])
    : 'system_first';
  return { content, injection_mode, version_id: versionId };
}

/** Strict UTF-8, then JSON, then {@link parseDirectiveObject}. */
export function parseDirectiveValue(raw: Uint8Array | string | null): Directive | null {
  if (raw === null) return null;
  let text: string;
  if (typeof raw === 'string') {
    text = raw;
  } else {
    try {
      text = utf8.decode(raw);
    } catch (err) {
      throw BranchErrors.badDirective('not UTF-8', err);
    }
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw BranchErrors.badDirective('not JSON', err);
  }
  return parseDirectiveObject(value);
}
