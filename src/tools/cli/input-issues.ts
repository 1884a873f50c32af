// Rejected JSON-command inputs in the contract's words (contract.md §13), every issue at once, instead of
// zod's first `Invalid input: expected string, received undefined`.
import type { z } from 'zod';

/** `candidates[2].similarity` from `['candidates', 2, 'similarity']`; `input` for the root. */
export function fieldPath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const key of path) {
    if (typeof key === 'number') out += `[${key}]`;
    else out += out === '' ? String(key) : `.${String(key)}`;
  }
  return out === '' ? 'input' : out;
}

function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let v = input;
  for (const key of path) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<PropertyKey, unknown>)[key];
  }
  return v;
}

function kindOf(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'number' && !Number.isFinite(v)) return String(v);
  return typeof v === 'object' ? 'an object' : `${typeof v} ${JSON.stringify(v)}`;
}

const EXPECTED: Record<string, string> = {
  string: 'a string',
  number: 'a number',
  int: 'an integer',
  boolean: 'true or false',
  array: 'an array',
  object: 'an object',
};

export function reason(issue: z.core.$ZodIssue, input: unknown): string {
  const value = valueAt(input, issue.path);
  switch (issue.code) {
    case 'invalid_type': {
      if (value === undefined) return 'is required';
      const expected = EXPECTED[issue.expected] ?? issue.expected;
      if (issue.expected === 'int' && typeof value === 'number') return `must be an integer, got ${value}`;
      return `must be ${expected}, got ${kindOf(value)}`;
    }
    case 'too_small': {
      if (issue.origin === 'string') return 'must not be empty';
      if (issue.origin === 'array') return `must have at least ${issue.minimum} items`;
      return `must be ${issue.inclusive ? '≥' : '>'} ${issue.minimum}, got ${JSON.stringify(value)}`;
    }
    case 'too_big': {
      if (issue.origin === 'string') return `exceeds ${issue.maximum} characters`;
      if (issue.origin === 'array') return `exceeds ${issue.maximum} items`;
      return `must be ${issue.inclusive ? '≤' : '<'} ${issue.maximum}, got ${JSON.stringify(value)}`;
    }
    case 'invalid_value':
      return `must be one of ${issue.values.map((v) => JSON.stringify(v)).join(', ')}`;
    case 'unrecognized_keys':
      return `unknown field(s) ${issue.keys.join(', ')}`;
    default:
      return issue.message;
  }
}

/** Every issue as `<field>: <reason>`, joined by `; ` in schema order (a unit interval's two bounds once). */
export function describeIssues(issues: readonly z.core.$ZodIssue[], input: unknown): string {
  const lines: string[] = [];
  for (const issue of issues) {
    const line = `${fieldPath(issue.path)}: ${reason(issue, input)}`;
    if (!lines.includes(line)) lines.push(line);
  }
  return lines.join('; ');
}
