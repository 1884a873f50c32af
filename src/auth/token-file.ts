/** The bearer-token file (format: docs/security.md); only SHA-256 digests are kept in memory. */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { Errors } from '../wire/errors.js';

export const TOKENS_FILE_VARIABLE = 'IBEX_CONTEXT_AUTH_TOKENS_FILE';

/** One token's grant, as held in memory. */
export interface TokenGrant {
  /** Safe to log. */
  readonly name: string;
  /** SHA-256 of the token's UTF-8 bytes. */
  readonly digest: Buffer;
  /** Lower-case org ids. */
  readonly orgs: ReadonlySet<string> | '*';
  /** Start-up warns about these. */
  readonly fromPlaintext: boolean;
}

const UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

// Strict, so a typo (`org`) cannot widen or void a grant; messages never echo values (they may be tokens).
const entrySchema = z
  .strictObject({
    name: z
      .string()
      .trim()
      .min(1, 'must be a non-empty string')
      .max(128, 'must be at most 128 characters')
      .regex(/^[\x20-\x7e]+$/, 'must be printable ASCII'),
    token_sha256: z
      .string()
      .regex(/^[0-9a-fA-F]{64}$/, 'must be 64 hex characters (SHA-256)')
      .optional(),
    token: z
      .string()
      .min(16, 'must be at least 16 characters')
      .max(4096, 'must be at most 4096 characters')
      .regex(/^[\x21-\x7e]+$/, 'must be visible ASCII without spaces')
      .optional(),
    orgs: z
      .array(
        z
          .string()
          .trim()
          .refine((v) => v === '*' || UUID.test(v), 'must be a UUID or "*"'),
      )
      .min(1, 'must list at least one org id, or "*"'),
  })
  .superRefine((entry, ctx) => {
    if ((entry.token === undefined) === (entry.token_sha256 === undefined)) {
      ctx.addIssue({ code: 'custom', message: 'needs exactly one of "token_sha256" or "token"', path: [] });
    }
    if (entry.orgs.includes('*') && entry.orgs.length > 1) {
      ctx.addIssue({ code: 'custom', message: '"*" must be the only entry', path: ['orgs'] });
    }
  });

const fileSchema = z.strictObject({
  tokens: z.array(entrySchema).min(1, 'must list at least one token'),
});

function issuePath(path: readonly PropertyKey[]): string {
  let out = '';
  for (const p of path) out += typeof p === 'number' ? `[${p}]` : out === '' ? String(p) : `.${String(p)}`;
  return out;
}

export function tokenDigest(token: string): Buffer {
  return createHash('sha256').update(token, 'utf8').digest();
}

/**
 * Parses the token file's text: one grant per entry, in file order.
 * @throws IbexError `IBEX_ERR_CONFIG` naming the failing entry's path, never a token value.
 */
export function parseTokenFile(text: string, source = 'token file'): TokenGrant[] {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    // V8's message quotes the text around the error, which may be a token: say no more than this.
    throw Errors.config(TOKENS_FILE_VARIABLE, `${source} is not valid JSON`);
  }
  const parsed = fileSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const where = issuePath(issue.path);
    const message =
      issue.code === 'unrecognized_keys' ? `unknown key(s) ${issue.keys.join(', ')}` : issue.message;
    throw Errors.config(TOKENS_FILE_VARIABLE, `${source}: ${where === '' ? '' : `${where}: `}${message}`);
  }
  const grants: TokenGrant[] = [];
  const names = new Set<string>();
  const digests = new Set<string>();
  parsed.data.tokens.forEach((entry, i) => {
    const digest =
      entry.token_sha256 !== undefined ? Buffer.from(entry.token_sha256, 'hex') : tokenDigest(entry.token!);
    const hex = digest.toString('hex');
    if (names.has(entry.name)) {
      throw Errors.config(
        TOKENS_FILE_VARIABLE,
        `${source}: tokens[${i}].name: duplicate name '${entry.name}'`,
      );
    }
    // A duplicate would make the grant depend on file order; refuse rather than pick one.
    if (digests.has(hex)) {
      throw Errors.config(TOKENS_FILE_VARIABLE, `${source}: tokens[${i}]: same token as an earlier entry`);
    }
    names.add(entry.name);
    digests.add(hex);
    grants.push({
      name: entry.name,
      digest,
      orgs: entry.orgs[0] === '*' ? '*' : new Set(entry.orgs.map((o) => o.toLowerCase())),
      fromPlaintext: entry.token !== undefined,
    });
  });
  return grants;
}

/** Reads and validates the token file at `path`. @throws IbexError `IBEX_ERR_CONFIG`. */
export function loadTokenFile(path: string): TokenGrant[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    throw Errors.config(TOKENS_FILE_VARIABLE, `cannot read '${path}': ${code}`);
  }
  return parseTokenFile(text, `'${path}'`);
}
