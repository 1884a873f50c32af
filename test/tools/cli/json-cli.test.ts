/**
 * The JSON command line (contract.md §13) as real processes: single input, --jsonl, and rejected input.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT, runCli } from '../../helpers/cli.js';

const vectors = (kind: string) =>
  (
    JSON.parse(readFileSync(path.join(ROOT, 'test/vectors', `${kind}.json`), 'utf8')) as {
      vectors: { input: unknown; expect: Record<string, unknown> }[];
    }
  ).vectors;

describe('ibex-context JSON commands', () => {
  it('estimate: one input on stdin, the expected JSON on stdout, exit 0', async () => {
    const r = await runCli(
      ['estimate'],
      JSON.stringify({ text: '日本語😀ab', tokenizer_family: 'o200k_base' }),
    );
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ tokens: 2, estimate_kind: 'chars_div_4' });
  });

  it('format: a shared vector through the process equals its expectation', async () => {
    const v = vectors('format')[2]!;
    const r = await runCli(['format'], JSON.stringify(v.input));
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual(v.expect);
  });

  it('budget --jsonl: every budget vector in one process, outputs in input order', async () => {
    const vs = vectors('budget');
    const r = await runCli(['budget', '--jsonl'], vs.map((v) => JSON.stringify(v.input)).join('\n'));
    expect(r.code).toBe(0);
    const lines = r.stdout.trim().split('\n');
    expect(lines).toHaveLength(vs.length);
    lines.forEach((line, i) => {
      expect(JSON.parse(line)).toEqual(vs[i]!.expect);
    });
  });

  it('pack --jsonl: a bad line gets its own error object and the rest go on; exit 1', async () => {
    const v = vectors('pack')[1]!;
    const input = [
      JSON.stringify(v.input),
      '{not json',
      JSON.stringify({ ...(v.input as object), token_budget: 'x' }),
    ].join('\n');
    const r = await runCli(['pack', '--jsonl'], input);
    expect(r.code).toBe(1);
    const lines = r.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines).toHaveLength(3);
    expect(lines[0].memory_ids).toEqual((v.expect.reference as { memory_ids: string[] }).memory_ids);
    expect(lines[1].error).toMatch(/^input: invalid JSON/);
    expect(lines[2]).toEqual({ error: 'token_budget: must be a number, got string "x"' });
  });

  it('rejects invalid JSON, an invalid field and an unknown model with a JSON error and a non-zero exit', async () => {
    const bad = await runCli(['estimate'], '{');
    expect(bad.code).toBe(1);
    expect(JSON.parse(bad.stdout).error).toMatch(/^input: invalid JSON/);

    const field = await runCli(['estimate'], JSON.stringify({ text: 5, tokenizer_family: 'claude' }));
    expect(field.code).toBe(1);
    expect(JSON.parse(field.stdout).error).toMatch(/^text: /);

    const model = await runCli(['budget'], JSON.stringify({ model: 'gpt-9', directive: null }));
    expect(model.code).toBe(1);
    expect(JSON.parse(model.stdout)).toEqual({ error: "model: unknown model 'gpt-9'" });
  });
});
