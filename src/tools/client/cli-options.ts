// Flags shared by the client commands: where the service is, how to authenticate, and number parsers.
import { type StatusObject, status } from '@grpc/grpc-js';
import { z } from 'zod';
import { DEFAULT_GRPC_ADDR } from '../../config/settings.js';
import { type ConnectionOptions, createContextClient, readPemFile, TOKEN_ENV } from './context-client.js';

/** Port dialled when `--addr` names only a host (contract.md §3's default gRPC port). */
export const DEFAULT_PORT = 9092;

export const CONNECTION_FLAGS = {
  addr: { type: 'string' },
  tls: { type: 'boolean' },
  'tls-ca': { type: 'string' },
  'tls-server-name': { type: 'string' },
  'tls-cert': { type: 'string' },
  'tls-key': { type: 'string' },
  token: { type: 'string' },
} as const;

export const CONNECTION_USAGE = [
  `  --addr <host[:port]>      service address (default $IBEX_CONTEXT_GRPC_ADDR or ${DEFAULT_GRPC_ADDR};`,
  `                            port ${DEFAULT_PORT} when omitted)`,
  '  --tls                     use TLS with the system roots (default: insecure)',
  '  --tls-ca <pem file>       use TLS, trusting this CA bundle',
  '  --tls-server-name <name>  name to verify the server certificate against',
  '  --tls-cert <pem> --tls-key <pem>  client certificate and key (mutual TLS)',
  `  --token <token>           bearer token (default $${TOKEN_ENV}); never printed`,
].join('\n');

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
 * Resolves the connection flags (`--addr` else `IBEX_CONTEXT_GRPC_ADDR`, `--token` else `IBEX_CONTEXT_TOKEN`).
 * @throws Error when a PEM file cannot be read, or only one of `--tls-cert` / `--tls-key` is given.
 */
export function connectionFromFlags(
  values: ConnectionFlagValues,
  env: NodeJS.ProcessEnv = process.env,
): ConnectionOptions {
  const addr = withDefaultPort(values.addr ?? (env.IBEX_CONTEXT_GRPC_ADDR?.trim() || DEFAULT_GRPC_ADDR));
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

/** Parses a finite number flag in [min, max]; `fallback` when absent. @throws Error `--<name> must be …`. */
export function numberFlag(
  name: string,
  raw: string | undefined,
  fallback: number,
  { min = 0, max = Number.MAX_SAFE_INTEGER, integer = false, positive = false } = {},
): number {
  if (raw === undefined) return fallback;
  let n = (integer ? z.number().int() : z.number()).min(min).max(max);
  if (positive) n = n.positive();
  const parsed = z.string().trim().min(1).transform(Number).pipe(n).safeParse(raw);
  if (parsed.success) return parsed.data;
  const kind = integer ? 'integer' : 'number';
  const what = positive
    ? `a positive ${kind}`
    : max === Number.MAX_SAFE_INTEGER && min === 0
      ? `a non-negative ${kind}`
      : `${integer ? 'an' : 'a'} ${kind} in ${min}..${max}`;
  throw new Error(`--${name} must be ${what}, got '${raw}'`);
}

/** Name of a gRPC status code (`DEADLINE_EXCEEDED`), or `CODE_<n>` for a code grpc-js does not know. */
export function statusName(code: number): string {
  return (status as unknown as Record<number, string | undefined>)[code] ?? `CODE_${code}`;
}

/** Adds {@link DEFAULT_PORT} to a bare host (grpc-js would silently dial 443). @throws Error when empty. */
export function withDefaultPort(addr: string): string {
  const a = addr.trim();
  if (a === '') throw new Error('--addr must not be empty');
  if (a.startsWith('[')) return a.includes(']:') ? a : `${a}:${DEFAULT_PORT}`;
  if (/^[^:]+:\d+$/.test(a)) return a;
  // A bare IPv6 literal needs brackets to carry a port.
  if (/^[0-9a-f:.]+$/i.test(a) && (a.match(/:/g)?.length ?? 0) >= 2) return `[${a}]:${DEFAULT_PORT}`;
  if (a.includes(':')) return a; // a grpc-js target with a scheme: dns:///…, unix:…, ipv4:…
  return `${a}:${DEFAULT_PORT}`;
}

export function unreachableMessage(addr: string, cause: string): string {
  return `cannot reach the service at ${addr} (${cause}); is it running, and is --addr right?`;
}

/** Short cause of an UNAVAILABLE status from grpc-js details, without its `Resolution note:` noise. */
export function unavailableCause(details: string): string {
  if (/ECONNREFUSED/.test(details)) return 'connection refused';
  if (/ENOTFOUND|EAI_AGAIN|Name resolution failed|DNS resolution failed/i.test(details))
    return 'name not resolved';
  if (/ETIMEDOUT|EHOSTUNREACH|ENETUNREACH/.test(details)) return 'host unreachable';
  const first = details.split(/\n|Resolution note:|,/)[0]?.trim() ?? '';
  return first === '' ? 'unavailable' : first.replace(/\.$/, '');
}

export type DeadlineSide = 'client' | 'server';

/**
 * Whose deadline ended a DEADLINE_EXCEEDED call, from timings, never from status text: the caller's own
 * timer, or a call lasting ≥ 90 % of `timeoutMs` ⇒ `client`; one ending well before ⇒ `server` (its cap,
 * contract.md §10). Without timings ⇒ `client`.
 */
export function deadlineSide(elapsedMs?: number, timeoutMs?: number, ownTimer = false): DeadlineSide {
  if (ownTimer || elapsedMs === undefined || timeoutMs === undefined) return 'client';
  return elapsedMs >= 0.9 * timeoutMs ? 'client' : 'server';
}

/** Error-breakdown key of a non-OK status: code name; DEADLINE_EXCEEDED split by {@link deadlineSide}. */
export function errorKey(
  st: Pick<StatusObject, 'code'>,
  elapsedMs?: number,
  timeoutMs?: number,
  ownTimer = false,
): string {
  const name = statusName(st.code);
  if (st.code !== status.DEADLINE_EXCEEDED) return name;
  return deadlineSide(elapsedMs, timeoutMs, ownTimer) === 'client'
    ? `${name} (client --timeout)`
    : `${name} (server cap)`;
}

/** One line describing a failed call for a person (address for UNAVAILABLE, whose deadline fired, …). */
export function describeStatus(
  st: Pick<StatusObject, 'code' | 'details'>,
  addr: string,
  timeoutMs: number,
  elapsedMs?: number,
): string {
  const name = statusName(st.code);
  if (st.code === status.UNAVAILABLE) return unreachableMessage(addr, unavailableCause(st.details));
  if (st.code === status.DEADLINE_EXCEEDED) {
    return deadlineSide(elapsedMs, timeoutMs) === 'client'
      ? `${name}: the client's deadline (--timeout ${timeoutMs} ms) passed before the answer came`
      : `${name}: the service's deadline (its IBEX_CONTEXT_TIMEOUT cap) passed first: ${st.details}`;
  }
  return `${name}: ${st.details || 'no details'}`;
}

/** Health check without wait-for-ready (refusals fail at once); null when anything answers, else why not. */
export async function probeService(conn: ConnectionOptions, timeoutMs = 1000): Promise<string | null> {
  const client = createContextClient(conn);
  try {
    const outcome = await client.healthCheck('', { deadlineMs: timeoutMs });
    const { code, details } = outcome.status;
    if (code === status.UNAVAILABLE) return unreachableMessage(conn.addr, unavailableCause(details));
    if (code === status.DEADLINE_EXCEEDED)
      return unreachableMessage(conn.addr, `no answer within ${timeoutMs} ms`);
    return null;
  } finally {
    client.close();
  }
}
