// A start-up failure as one stderr line: the setting behind it, its value (URLs redacted) and the cause,
// instead of a JSON log line with a stack trace.
import type { Settings } from '../../config/settings.js';
import { IbexError } from '../../wire/errors.js';

const NET_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'CERT_HAS_EXPIRED',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'ERR_TLS_CERT_ALTNAME_INVALID',
]);
const LISTEN_CODES = ['EADDRINUSE', 'EADDRNOTAVAIL', 'EACCES'];

/** `scheme://host:port/path` of a URL, without user, password or query (they may hold secrets). */
export function redactUrl(url: string): string {
  if (!URL.canParse(url)) return '<unparsable URL>';
  const u = new URL(url);
  return `${u.protocol}//${u.host}${u.pathname === '/' ? '' : u.pathname}`;
}

function portOf(addr: string): string {
  return addr.slice(addr.lastIndexOf(':') + 1);
}

/**
 * One line naming the setting and cause of a start-up failure from {@link startService}, e.g.
 * `IBEX_CONTEXT_POSTGRES_URL (postgres://db:5432/ibex): database "ibex" does not exist`.
 */
export function describeStartupError(err: unknown, settings: Settings): string {
  const e = err as { message?: string; code?: unknown; port?: unknown };
  const message = (e?.message ?? String(err)).split('\n')[0]!;
  const code = typeof e?.code === 'string' ? e.code : '';
  if (err instanceof IbexError) return message;

  const listen = LISTEN_CODES.find((c) => code === c || message.includes(c));
  if (listen !== undefined) {
    // grpc-js reports its bind failure as "No address added … [listen EADDRINUSE: … host:port]".
    const cause = /listen (E[A-Z]+: [^\]]+)/.exec(message)?.[1] ?? message;
    const port = e.port !== undefined ? String(e.port) : (/:(\d+)\]?\s*$/.exec(cause)?.[1] ?? '');
    const name =
      port === portOf(settings.adminAddr) && port !== portOf(settings.grpcAddr)
        ? 'IBEX_CONTEXT_ADMIN_ADDR'
        : 'IBEX_CONTEXT_GRPC_ADDR';
    const value = name === 'IBEX_CONTEXT_ADMIN_ADDR' ? settings.adminAddr : settings.grpcAddr;
    return `${name} (${value}): ${cause}`;
  }
  // PostgreSQL's own errors carry a SQLSTATE (five characters, e.g. 3D000 for a missing database).
  const sqlState = /^[0-9A-Z]{5}$/.test(code);
  if (settings.postgres.url !== '' && (sqlState || NET_CODES.has(code) || /postgres|pg_/i.test(message))) {
    return `IBEX_CONTEXT_POSTGRES_URL (${redactUrl(settings.postgres.url)}): ${message}`;
  }
  if (code.startsWith('SQLITE_')) return `IBEX_CONTEXT_EMBEDDED_DB (${settings.embeddedDb}): ${message}`;
  return message;
}
