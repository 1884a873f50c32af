/**
 * Flags shared by the client commands (`load`, `replay`, `assemble`, `healthcheck`): where the service
 * is and how to authenticate to it, plus small number parsers that fail with the flag's name.
 */
import { status } from '@grpc/grpc-js';
import { type ConnectionOptions, DEFAULT_ADDR, readPemFile, TOKEN_ENV } from './context-client.js';

/** `parseArgs` option specs of the connection flags. */
export const CONNECTION_FLAGS = {
  addr: { type: 'string' },
  tls: { type: 'boolean' },
  'tls-ca': { type: 'string' },
  'tls-server-name': { type: 'string' },
  'tls-cert': { type: 'string' },
  'tls-key': { type: 'string' },
  token: { type: 'string' },
} as const;

/** Usage text of {@link CONNECTION_FLAGS}. */
export const CONNECTION_USAGE = [
  `  --addr <host:port>        service address (default $IBEX_CONTEXT_GRPC_ADDR or ${DEFAULT_ADDR})`,
  '  --tls                     use TLS with the system roots (default: insecure)',
  '  --tls-ca <pem file>       use TLS, trusting this CA bundle',
  '  --tls-server-name <name>  name to verify the server certificate against',
  '  --tls-cert <pem> --tls-key <pem>  client certificate and key (mutual TLS)',
  `  --token <token>           bearer token (default $${TOKEN_ENV}); never printed`,
].join('\n');

/** Values of {@link CONNECTION_FLAGS} as `parseArgs` returns them. */
export interface ConnectionFlagValues {
  addr?: string;
  tls?: boolean;
  'tls-ca'?: string;
  'tls-server-name'?: string;
  'tls-cert'?: string;
  'tls-key'?: string;
  token?: string;
}

/**
 * Resolves the connection flags: address from `--addr`, else `IBEX_CONTEXT_GRPC_ADDR`, else
 * {@link DEFAULT_ADDR}; token from `--token`, else `IBEX_CONTEXT_TOKEN`; TLS when any `--tls*` flag is
 * given (system roots unless `--tls-ca`; a client certificate with `--tls-cert` + `--tls-key`).
 * @throws Error when a PEM file cannot be read, or only one of `--tls-cert` / `--tls-key` is given.
 */
export function connectionFromFlags(
  values: ConnectionFlagValues,
  env: NodeJS.ProcessEnv = process.env,
): ConnectionOptions {
  const addr = values.addr ?? (env.IBEX_CONTEXT_GRPC_ADDR?.trim() || DEFAULT_ADDR);
  const token = values.token ?? env[TOKEN_ENV];
  const conn: ConnectionOptions = { addr };
  if (token) conn.token = token;
  const ca = values['tls-ca'];
  const cert = values['tls-cert'];
  const key = values['tls-key'];
  if ((cert === undefined) !== (key === undefined)) throw new Error('--tls-cert and --tls-key go together');
  if (values.tls || ca !== undefined || cert !== undefined || values['tls-server-name'] !== undefined) {
    conn.tls = {};
    if (ca !== undefined) conn.tls.ca = readPemFile(ca, 'CA');
    if (cert !== undefined && key !== undefined) {
      conn.tls.cert = readPemFile(cert, 'certificate');
      conn.tls.key = readPemFile(key, 'key');
    }
    if (values['tls-server-name'] !== undefined) conn.tls.serverName = values['tls-server-name'];
  }
  return conn;
}

/**
 * Parses a flag as a finite number within [min, max] (integers only when `integer`).
 * @returns `fallback` when the flag is absent.
 * @throws Error `--<name> must be …` otherwise.
 */
export function numberFlag(
  name: string,
  raw: string | undefined,
  fallback: number,
  { min = 0, max = Number.MAX_SAFE_INTEGER, integer = false } = {},
): number {
  if (raw === undefined) return fallback;
  const n = Number(raw.trim());
  if (raw.trim() === '' || !Number.isFinite(n) || n < min || n > max || (integer && !Number.isInteger(n))) {
    const kind = integer ? 'an integer' : 'a number';
    throw new Error(`--${name} must be ${kind} in ${min}..${max}, got '${raw}'`);
  }
  return n;
}

/** Name of a gRPC status code (`DEADLINE_EXCEEDED`), or `CODE_<n>` for a code grpc-js does not know. */
export function statusName(code: number): string {
  return (status as unknown as Record<number, string | undefined>)[code] ?? `CODE_${code}`;
}
