/** Whether the service may listen where asked: unauthenticated off loopback refuses unless opted in. */
import { isIPv4, isIPv6 } from 'node:net';
import { Errors, type IbexError } from '../wire/errors.js';
import type { TransportMode } from './tls-credentials.js';

export interface BindingInput {
  /** `host:port`, IPv6 hosts in brackets. */
  grpcAddr: string;
  /** A token file is configured. */
  tokens: boolean;
  transport: TransportMode;
  allowInsecure: boolean;
}

/** Refuse with an `IBEX_ERR_CONFIG` message naming the variables, or serve with zero or more warnings. */
export type BindingDecision =
  | { action: 'refuse'; error: IbexError }
  | { action: 'serve'; warnings: string[] };

export function hostOfAddr(addr: string): string {
  const i = addr.lastIndexOf(':');
  return (i < 0 ? addr : addr.slice(0, i)).replace(/^\[|\]$/g, '');
}

/** True for hosts only this machine can reach; any other name counts as reachable, since DNS can say anything. */
export function isLoopbackHost(host: string): boolean {
  const h = host
    .trim()
    .toLowerCase()
    .replace(/^\[|\]$/g, '');
  if (h === 'localhost') return true;
  if (isIPv4(h)) return h.startsWith('127.');
  if (isIPv6(h)) {
    // WHATWG URL canonicalizes IPv6 (RFC 5952): `::ffff:127.0.0.1` becomes `::ffff:7f00:1`.
    const canonical = new URL(`http://[${h}]/`).hostname.slice(1, -1);
    return canonical === '::1' || /^::ffff:7f[0-9a-f]{2}:[0-9a-f]{1,4}$/.test(canonical);
  }
  return false;
}

/** Decides whether to start (docs/security.md); TLS alone does not identify the caller. */
export function decideBinding(input: BindingInput): BindingDecision {
  if (isLoopbackHost(hostOfAddr(input.grpcAddr))) return { action: 'serve', warnings: [] };
  const authenticated = input.tokens || input.transport === 'mtls';
  if (!authenticated) {
    if (!input.allowInsecure) {
      return {
        action: 'refuse',
        error: Errors.config(
          'IBEX_CONTEXT_GRPC_ADDR',
          `refusing to listen on ${input.grpcAddr} (not loopback) without caller authentication: set ` +
            'IBEX_CONTEXT_AUTH_TOKENS_FILE (bearer tokens) and/or IBEX_CONTEXT_TLS_CERT, IBEX_CONTEXT_TLS_KEY ' +
            'and IBEX_CONTEXT_TLS_CLIENT_CA (mutual TLS), or set IBEX_CONTEXT_ALLOW_INSECURE=true to serve ' +
            'unauthenticated anyway',
        ),
      };
    }
    return {
      action: 'serve',
      warnings: [
        `INSECURE: gRPC listens on ${input.grpcAddr} (not loopback) with no caller authentication ` +
          '(IBEX_CONTEXT_ALLOW_INSECURE=true): anyone who can reach it can read any org’s memory. Set ' +
          'IBEX_CONTEXT_AUTH_TOKENS_FILE or IBEX_CONTEXT_TLS_CLIENT_CA.',
      ],
    };
  }
  if (input.tokens && input.transport === 'plaintext') {
    return {
      action: 'serve',
      warnings: [
        `INSECURE: bearer tokens travel unencrypted to ${input.grpcAddr} (not loopback); set ` +
          'IBEX_CONTEXT_TLS_CERT and IBEX_CONTEXT_TLS_KEY.',
      ],
    };
  }
  return { action: 'serve', warnings: [] };
}
