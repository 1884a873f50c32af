/**
 * Flags shared by the client commands (`load`, `replay`, `assemble`, `healthcheck`): where the service
 * is and how to authenticate to it, plus small number parsers that fail with the flag's name.
 */
import { type StatusObject, status } from '@grpc/grpc-js';
import { z } from 'zod';
import { DEFAULT_GRPC_ADDR } from '../../config/settings.js';
import { type ConnectionOptions, createContextClient, readPemFile, TOKEN_ENV } from './context-client.js';

/** Port dialled when `--addr` names only a host (contract.md §3's default gRPC port). */
export const DEFAULT_PORT = 9092;

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
  `  --addr <host[:port]>      service address (default $IBEX_CONTEXT_GRPC_ADDR or ${DEFAULT_GRPC_ADDR};`,
  `                            port ${DEFAULT_PORT} when omitted)`,
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
 * {@link DEFAULT_GRPC_ADDR}; token from `--token`, else `IBEX_CONTEXT_TOKEN`; TLS when any `--tls*` flag is
 * given (system roots unless `--tls-ca`; a client certificate with `--tls-cert` + `--tls-key`).
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

/**
 * Parses a flag as a finite number within [min, max] (integers only when `integer`; above 0 when
 * `positive`): the one numeric-flag parser of the commands and benches, after
 * `parseArgs` has split the arguments.
 * @returns `fallback` when the flag is absent.
 * @throws Error `--<name> must be …, got '<raw>'` otherwise.
 */
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

/**
 * Adds {@link DEFAULT_PORT} to an address that names only a host (`127.0.0.1`, `[::1]`, `svc.local`):
 * grpc-js would otherwise dial 443 without a word. Addresses with a port, and grpc-js
 * targets with a scheme (`dns:///…`, `unix:…`), are returned unchanged.
 * @throws Error for an empty address.
 */
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

/** Text of a connection failure: one line naming the address. */
export function unreachableMessage(addr: string, cause: string): string {
  return `cannot reach the service at ${addr} (${cause}); is it running, and is --addr right?`;
}

/**
 * Short cause of an UNAVAILABLE status from grpc-js details (`connect ECONNREFUSED 127.0.0.1:9092` ⇒
 * `connection refused`), without grpc-js's trailing `Resolution note:` noise.
 */
export function unavailableCause(details: string): string {
  if (/ECONNREFUSED/.test(details)) return 'connection refused';
  if (/ENOTFOUND|EAI_AGAIN|Name resolution failed|DNS resolution failed/i.test(details))
    return 'name not resolved';
  if (/ETIMEDOUT|EHOSTUNREACH|ENETUNREACH/.test(details)) return 'host unreachable';
  const first = details.split(/\n|Resolution note:|,/)[0]?.trim() ?? '';
  return first === '' ? 'unavailable' : first.replace(/\.$/, '');
}

/** Which side's deadline ended a DEADLINE_EXCEEDED call. */
export type DeadlineSide = 'client' | 'server';

/**
 * Tells whose deadline ended a DEADLINE_EXCEEDED call, from facts, never from status text
 *. The caller's own timer fired (`ownTimer`), or the call lasted about the caller's
 * timeout (`elapsedMs` ≥ 90 % of `timeoutMs`: grpc-js's client timer, or the server enforcing the
 * deadline the caller sent) ⇒ `client`. A call that ended well before it met the service's own cap
 * (IBEX_CONTEXT_TIMEOUT, contract.md §10: D is the sooner of the cap and the caller's deadline) ⇒ `server`.
 * Without timings ⇒ `client` (a health check: no server cap applies to it).
 */
export function deadlineSide(elapsedMs?: number, timeoutMs?: number, ownTimer = false): DeadlineSide {
  if (ownTimer || elapsedMs === undefined || timeoutMs === undefined) return 'client';
  return elapsedMs >= 0.9 * timeoutMs ? 'client' : 'server';
}

/**
 * Key of a non-OK status in an error breakdown: the code name, with DEADLINE_EXCEEDED split into
 * `DEADLINE_EXCEEDED (client --timeout)` and `DEADLINE_EXCEEDED (server cap)` by {@link deadlineSide}.
 * @param elapsedMs how long the call took, ms (from its send); with `timeoutMs`, the client's deadline.
 * @param ownTimer the caller's own deadline timer ended the call (raw-grpc `CallEnd` `timer`).
 */
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

/**
 * One line describing a failed call for a person: the address for UNAVAILABLE, whose deadline fired
 * for DEADLINE_EXCEEDED (with the client's timeout in ms), else `CODE: details`.
 */
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

/**
 * Checks within `timeoutMs` that something answers gRPC at `conn.addr`: one health check without
 * wait-for-ready, so a refused connection fails at once instead of after a connect timeout.
 * Any answer, even NOT_SERVING or UNIMPLEMENTED, counts as reachable.
 * @returns null when reachable, else the one-line message of {@link unreachableMessage}.
 */
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
