/**
 * The token file (IBEX_CONTEXT_AUTH_TOKENS_FILE): accepted format, every rejection naming the variable
 * and the entry, no token text in any message, and the constant-time lookup's results.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadTokenFile, parseTokenFile, tokenDigest } from '../../src/auth/token-file.js';
import { findGrant } from '../../src/auth/verify-token.js';
import { thrownMessage } from '../helpers/auth.js';

const ORG_A = '0b8f8c1e-6a5e-4c3b-9d7e-1f2a3b4c5d6e';
const ORG_B = '7c9e6679-7425-40de-944b-e07fc1f90ae7';
const TOKEN_A = 'tok-a-0123456789abcdef';
const TOKEN_B = 'tok-b-fedcba9876543210';
const sha = (t: string) => createHash('sha256').update(t, 'utf8').digest('hex');

const configError = (fn: () => unknown) => thrownMessage('IBEX_ERR_CONFIG', fn);

const parse = (json: unknown) => parseTokenFile(JSON.stringify(json), 'tokens.json');

describe('parseTokenFile', () => {
  it('accepts digests and plaintext tokens, lower-cases org ids, and keeps only digests', () => {
    const grants = parse({
      tokens: [
        { name: 'proxy-a', token_sha256: sha(TOKEN_A).toUpperCase(), orgs: [ORG_A.toUpperCase(), ORG_B] },
        { name: 'ops', token: TOKEN_B, orgs: ['*'] },
      ],
    });
    expect(grants.map((g) => g.name)).toEqual(['proxy-a', 'ops']);
    expect(grants[0]!.digest.toString('hex')).toBe(sha(TOKEN_A));
    expect(grants[0]!.orgs).toEqual(new Set([ORG_A, ORG_B]));
    expect(grants[0]!.fromPlaintext).toBe(false);
    expect(grants[1]!.digest.toString('hex')).toBe(sha(TOKEN_B));
    expect(grants[1]!.orgs).toBe('*');
    expect(grants[1]!.fromPlaintext).toBe(true);
    expect(JSON.stringify(grants)).not.toContain(TOKEN_B);
  });

  it.each([
    ['not JSON', '{"tokens": [', 'IBEX_CONTEXT_AUTH_TOKENS_FILE: tokens.json is not valid JSON'],
    [
      'not an object',
      '[]',
      'IBEX_CONTEXT_AUTH_TOKENS_FILE: tokens.json: Invalid input: expected object, received array',
    ],
    [
      'no tokens',
      '{"tokens": []}',
      'IBEX_CONTEXT_AUTH_TOKENS_FILE: tokens.json: tokens: must list at least one token',
    ],
  ])('rejects a file that is %s', (_name, text, message) => {
    expect(configError(() => parseTokenFile(text, 'tokens.json'))).toBe(message);
  });

  it.each([
    [
      'both token and digest',
      { name: 'x', token: TOKEN_A, token_sha256: sha(TOKEN_A), orgs: [ORG_A] },
      'tokens[0]: needs exactly one of "token_sha256" or "token"',
    ],
    [
      'neither token nor digest',
      { name: 'x', orgs: [ORG_A] },
      'tokens[0]: needs exactly one of "token_sha256" or "token"',
    ],
    [
      'a short digest',
      { name: 'x', token_sha256: 'abc123', orgs: [ORG_A] },
      'tokens[0].token_sha256: must be 64 hex characters (SHA-256)',
    ],
    [
      'a short plaintext token',
      { name: 'x', token: 'short-secret', orgs: [ORG_A] },
      'tokens[0].token: must be at least 16 characters',
    ],
    [
      'a token with a space',
      { name: 'x', token: 'has a space 0123456', orgs: [ORG_A] },
      'tokens[0].token: must be visible ASCII without spaces',
    ],
    [
      'a bad org',
      { name: 'x', token: TOKEN_A, orgs: [ORG_A, 'acme'] },
      'tokens[0].orgs[1]: must be a UUID or "*"',
    ],
    [
      'no orgs',
      { name: 'x', token: TOKEN_A, orgs: [] },
      'tokens[0].orgs: must list at least one org id, or "*"',
    ],
    [
      '"*" with others',
      { name: 'x', token: TOKEN_A, orgs: ['*', ORG_A] },
      'tokens[0].orgs: "*" must be the only entry',
    ],
    [
      'a blank name',
      { name: '  ', token: TOKEN_A, orgs: [ORG_A] },
      'tokens[0].name: must be a non-empty string',
    ],
    [
      'an unknown key',
      { name: 'x', token: TOKEN_A, org: [ORG_A], orgs: [ORG_A] },
      'tokens[0]: unknown key(s) org',
    ],
  ])('rejects an entry with %s, naming the variable and the entry', (_name, entry, detail) => {
    const message = configError(() => parse({ tokens: [entry] }));
    expect(message).toBe(`IBEX_CONTEXT_AUTH_TOKENS_FILE: tokens.json: ${detail}`);
  });

  it('rejects duplicate names and duplicate tokens (plaintext vs digest of the same token)', () => {
    expect(
      configError(() =>
        parse({
          tokens: [
            { name: 'a', token: TOKEN_A, orgs: [ORG_A] },
            { name: 'a', token: TOKEN_B, orgs: [ORG_A] },
          ],
        }),
      ),
    ).toBe("IBEX_CONTEXT_AUTH_TOKENS_FILE: tokens.json: tokens[1].name: duplicate name 'a'");
    expect(
      configError(() =>
        parse({
          tokens: [
            { name: 'a', token: TOKEN_A, orgs: [ORG_A] },
            { name: 'b', token_sha256: sha(TOKEN_A), orgs: [ORG_B] },
          ],
        }),
      ),
    ).toBe('IBEX_CONTEXT_AUTH_TOKENS_FILE: tokens.json: tokens[1]: same token as an earlier entry');
  });

  it('never puts token text in an error message', () => {
    const secret = 'Sup3r-Secret-Token-Value';
    const messages = [
      configError(() => parseTokenFile(`{"tokens": [{"name": "x", "token": "${secret}", "orgs": [}]}`, 'f')),
      configError(() => parse({ tokens: [{ name: 'x', token: `${secret} with space`, orgs: [ORG_A] }] })),
      configError(() => parse({ tokens: [{ name: 'x', token_sha256: secret, orgs: [ORG_A] }] })),
      configError(() => parse({ tokens: [{ name: 'x', token: secret, orgs: [secret] }] })),
    ];
    for (const m of messages) expect(m).not.toContain('Secret');
  });
});

describe('loadTokenFile', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'ibex-tokens-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('reads a file', () => {
    const file = path.join(dir, 'ok.json');
    writeFileSync(file, JSON.stringify({ tokens: [{ name: 'a', token: TOKEN_A, orgs: [ORG_A] }] }));
    expect(loadTokenFile(file).map((g) => g.name)).toEqual(['a']);
  });

  it('names the variable and the path when the file is missing or invalid', () => {
    const missing = path.join(dir, 'missing.json');
    expect(configError(() => loadTokenFile(missing))).toBe(
      `IBEX_CONTEXT_AUTH_TOKENS_FILE: cannot read '${missing}': ENOENT`,
    );
    const bad = path.join(dir, 'bad.json');
    writeFileSync(bad, '{"tokens": [{"name": "a"}]}');
    expect(configError(() => loadTokenFile(bad))).toBe(
      `IBEX_CONTEXT_AUTH_TOKENS_FILE: '${bad}': tokens[0].orgs: Invalid input: expected array, received undefined`,
    );
  });
});

describe('findGrant', () => {
  const grants = parse({
    tokens: [
      { name: 'a', token_sha256: sha(TOKEN_A), orgs: [ORG_A] },
      { name: 'b', token: TOKEN_B, orgs: ['*'] },
    ],
  });

  it('finds the grant of a known token, wherever it is in the list', () => {
    expect(findGrant(grants, TOKEN_A)?.name).toBe('a');
    expect(findGrant(grants, TOKEN_B)?.name).toBe('b');
  });

  it('finds nothing for unknown, empty, prefix and case-changed tokens', () => {
    for (const t of ['', 'nope', TOKEN_A.slice(0, -1), `${TOKEN_A}x`, TOKEN_A.toUpperCase(), sha(TOKEN_A)]) {
      expect(findGrant(grants, t)).toBeUndefined();
    }
  });

  it('hashes the UTF-8 bytes', () => {
    expect(tokenDigest('é').toString('hex')).toBe(sha('é'));
  });
});
