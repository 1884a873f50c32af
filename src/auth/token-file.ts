/**
 * The bearer-token file (`IBEX_CONTEXT_AUTH_TOKENS_FILE`): which
 * tokens may call the service and for which orgs. Read and validated once at start-up with zod; any
 * problem stops start-up with an error naming the variable. Plaintext tokens are hashed on load and
 * dropped, so only SHA-256 digests live in memory.
 *
 * Format (JSON):
 * ```json
 * {
 *   "tokens": [
 *     { "name": "proxy-a", "token_sha256": "<64 hex chars>", "orgs": ["<uuid>", "<uuid>"] },
 *     { "name": "ops",     "token": "<plaintext, ≥ 16 chars>", "orgs": ["*"] }
 *   ]
 * }
 * ```
 * - `name`: unique label, logged instead of the token (1..128 printable characters).
 * - exactly one of `token_sha256` (preferred: lower- or upper-case hex SHA-256 of the UTF-8 token, e.g.
 *   `printf %s "$TOKEN" | sha256sum`) or `token` (plaintext; 16..4096 visible ASCII characters).
 * - `orgs`: the org ids (UUIDs, any case) the token may act for, or `["*"]` for every org.
 * - unknown keys are rejected, so a typo (`org`, `token_sha`) cannot silently widen or void a grant.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { Errors } from '../wire/errors.js';

/** The environment variable naming the token file. */
export const TOKENS_FILE_VARIABLE = 'IBEX_CONTEXT_AUTH_TOKENS_FILE';

/** One token's grant, as held in memory. */
export interface TokenGrant {
  /** The entry's `name`; safe to log. */
  readonly name: string;
  /** SHA-256 of the token's UTF-8 bytes (32 bytes). */
  readonly digest: Buffer;
  /** Lower-case org ids the token may act for, or `'*'` for every org. */
  readonly orgs: ReadonlySet<string> | '*';
  /** True when the file stored the token in plaintext (start-up warns about it). */
  readonly fromPlaintext: boolean;
}

const UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

// Messages never echo the offending value: a mistyped entry may well be a real token.
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

/** SHA-256 of a token's UTF-8 bytes. */
export function tokenDigest(token: string): Buffer {
  return createHash('sha256').update(token, 'utf8').digest();
}

/**
 * Parses and validates the token file's text.
 * @param source where the text came from, for messages (usually the file path).
 * @returns one grant per entry, in file order.
 * @throws IbexError `IBEX_ERR_CONFIG` whose message starts with `IBEX_CONTEXT_AUTH_TOKENS_FILE:` and
 *   names the failing entry's path (e.g. `tokens[1].orgs[0]`); token values are never included.
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

/**
 * Reads and validates the token file at `path` (see the module comment for the format).
 * @throws IbexError `IBEX_ERR_CONFIG` naming `IBEX_CONTEXT_AUTH_TOKENS_FILE` when the file cannot be
 *   read or is invalid.
 */
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
