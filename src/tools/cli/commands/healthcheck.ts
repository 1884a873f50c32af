// `ibex-context healthcheck`: Health/Check (contract.md §2) with a 2 s deadline, exit 0 iff SERVING. The
// Dockerfile's HEALTHCHECK runs `--local`, so it prints one short line and never outwaits the deadline.

import { status } from '@grpc/grpc-js';
import { DEFAULT_ADMIN_ADDR, DEFAULT_GRPC_ADDR } from '../../../config/settings.js';
import {
  CONNECTION_FLAGS,
  CONNECTION_USAGE,
  connectionFromFlags,
  describeStatus,
  numberFlag,
} from '../../client/cli-options.js';
import { type ConnectionOptions, createContextClient } from '../../client/context-client.js';
import { booleanFlags, commandPrologue, stringFlags } from '../command-args.js';
import { printCommandError } from '../command-error.js';

const USAGE = `usage: ibex-context healthcheck [options]

      --service <name>      service to check (default "": the whole server)
      --timeout <ms>        deadline (default 2000)
      --json                print {"target", "status"} or {"error", "target"} as JSON on stdout
      --local               check the service of this container from its own IBEX_CONTEXT_* settings
                            (the Docker HEALTHCHECK): its gRPC address (a wildcard host becomes
                            loopback), TLS when IBEX_CONTEXT_TLS_CERT is set (its own certificate is not
                            verified; no token is sent); with mutual TLS (IBEX_CONTEXT_TLS_CLIENT_CA) the
                            admin /readyz at IBEX_CONTEXT_ADMIN_ADDR instead, as the gRPC port would need
                            a client certificate
  -h, --help                this text

A refused connection fails at once (no wait for the deadline), with one line naming the address.
${CONNECTION_USAGE}`;

/** What `--local` checks, from the server's own settings. */
export type LocalTarget = { kind: 'grpc'; addr: string; tls: boolean } | { kind: 'admin'; url: string };

/** A wildcard listen host (0.0.0.0, ::, [::]) as the loopback address to dial. */
export function dialable(listenAddr: string): string {
  const i = listenAddr.lastIndexOf(':');
  const host = listenAddr.slice(0, i);
  const port = listenAddr.slice(i + 1);
  if (host === '0.0.0.0' || host === '') return `127.0.0.1:${port}`;
  if (host === '[::]' || host === '::') return `[::1]:${port}`;
  return listenAddr;
}

/**
 * The target of `healthcheck --local` from the service's environment: gRPC at IBEX_CONTEXT_GRPC_ADDR
 * (TLS iff IBEX_CONTEXT_TLS_CERT is set), or the admin `/readyz` under mutual TLS.
 */
export function localTarget(env: NodeJS.ProcessEnv = process.env): LocalTarget {
  const grpc = env.IBEX_CONTEXT_GRPC_ADDR?.trim() || DEFAULT_GRPC_ADDR;
  const admin = env.IBEX_CONTEXT_ADMIN_ADDR?.trim() || DEFAULT_ADMIN_ADDR;
  if (env.IBEX_CONTEXT_TLS_CLIENT_CA?.trim())
    return { kind: 'admin', url: `http://${dialable(admin)}/readyz` };
  return { kind: 'grpc', addr: dialable(grpc), tls: Boolean(env.IBEX_CONTEXT_TLS_CERT?.trim()) };
}

async function checkAdmin(url: string, timeoutMs: number, json: boolean): Promise<number> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    const body = await res.text();
    if (res.status === 200) {
      process.stdout.write(
        json ? `${JSON.stringify({ target: url, status: 'ready' })}\n` : `${url}: ready\n`,
      );
      return 0;
    }
    printCommandError('healthcheck', `${url}: HTTP ${res.status} ${body.slice(0, 200)}`, json, {
      target: url,
    });
  } catch (err) {
    printCommandError('healthcheck', `${url}: ${(err as Error).message}`, json, { target: url });
  }
  return 1;
}

/** CLI entry: 0 when SERVING (or `/readyz` 200 under mutual TLS), 1 for anything else, 2 for bad flags. */
export async function run(argv: string[]): Promise<number> {
  const parsed = await commandPrologue(
    argv,
    {
      command: 'healthcheck',
      usage: USAGE,
      options: {
        ...CONNECTION_FLAGS,
        ...stringFlags('service', 'timeout'),
        ...booleanFlags('local'),
      },
    },
    (values) => ({
      service: values.service ?? '',
      timeoutMs: numberFlag('timeout', values.timeout, 2000, { min: 1, max: 600_000 }),
      target: values.local ? localTarget() : connectionFromFlags(values),
    }),
  );
  if (parsed.exit !== null) return parsed.exit;
  const { json } = parsed;
  const { service, timeoutMs, target } = parsed.config;
  if ('kind' in target && target.kind === 'admin') return checkAdmin(target.url, timeoutMs, json);
  const conn: ConnectionOptions =
    'kind' in target ? { addr: target.addr, ...(target.tls ? { tls: { skipVerify: true } } : {}) } : target;
  const client = createContextClient(conn);
  try {
    // waitForReady is left off: an unreachable server must fail fast, not wait out the deadline.
    const outcome = await client.healthCheck(service, { deadlineMs: timeoutMs });
    if (outcome.status.code !== status.OK || outcome.response === null) {
      const message = describeStatus(outcome.status, conn.addr, timeoutMs);
      printCommandError('healthcheck', message, json, { target: conn.addr });
      return 1;
    }
    const health = outcome.response.status;
    if (health === 'SERVING') {
      process.stdout.write(
        json ? `${JSON.stringify({ target: conn.addr, status: health })}\n` : `${conn.addr}: SERVING\n`,
      );
      return 0;
    }
    if (json)
      process.stdout.write(`${JSON.stringify({ error: health, target: conn.addr, status: health })}\n`);
    else process.stderr.write(`${conn.addr}: ${health}\n`);
    return 1;
  } finally {
    client.close();
  }
}
