/**
 * Whether the service may listen where it was asked to: off loopback, an unauthenticated
 * service lets anyone claim any org_id, so that combination refuses to start unless the operator opts
 * in with `IBEX_CONTEXT_ALLOW_INSECURE=true` — and then it warns, at start-up and on /readyz.
 */
import { isIPv4, isIPv6 } from 'node:net';
import { Errors, type IbexError } from '../wire/errors.js';
import type { TransportMode } from './tls-credentials.js';

/** What the decision looks at. */
export interface BindingInput {
  /** `IBEX_CONTEXT_GRPC_ADDR` as configured (`host:port`, IPv6 hosts in brackets). */
  grpcAddr: string;
  /** A token file is configured. */
  tokens: boolean;
  transport: TransportMode;
  /** `IBEX_CONTEXT_ALLOW_INSECURE`. */
  allowInsecure: boolean;
}

/**
 * The decision: refuse with an `IBEX_ERR_CONFIG` error whose message names the variables, or serve
 * with zero or more warnings.
 */
export type BindingDecision =
  | { action: 'refuse'; error: IbexError }
  | { action: 'serve'; warnings: string[] };

/** The host part of `host:port`, brackets removed. */
export function hostOfAddr(addr: string): string {
  const i = addr.lastIndexOf(':');
  return (i < 0 ? addr : addr.slice(0, i)).replace(/^\[|\]$/g, '');
}

/**
 * True for hosts only this machine can reach: `localhost`, 127.0.0.0/8, `::1` and IPv4-mapped
 * 127.0.0.0/8. Every other name is treated as reachable from outside, since DNS can say anything.
 */
export function isLoopbackHost(host: string): boolean {
  const h = host
    .trim()
    .toLowerCase()
    .replace(/^\[|\]$/g, '');
  if (h === 'localhost') return true;
  if (isIPv4(h)) return h.startsWith('127.');
  if (isIPv6(h)) {
    // WHATWG URL serializes IPv6 canonically (RFC 5952), so `0:0:0:0:0:0:0:1` and `::ffff:127.0.0.1`
    // reduce to `::1` and `::ffff:7f00:1`.
    const canonical = new URL(`http://[${h}]/`).hostname.slice(1, -1);
    return canonical === '::1' || /^::ffff:7f[0-9a-f]{2}:[0-9a-f]{1,4}$/.test(canonical);
  }
  return false;
}

/**
 * Decides whether to start. Authentication means a token file or mutual TLS; TLS alone
 * encrypts but does not say who the caller is.
 *
 * - loopback → serve, no warnings;
 * - not loopback, authenticated → serve; warns when bearer tokens would travel without TLS;
 * - not loopback, unauthenticated, `allowInsecure` → serve with a loud warning;
 * - not loopback, unauthenticated → refuse, naming IBEX_CONTEXT_GRPC_ADDR, IBEX_CONTEXT_AUTH_TOKENS_FILE,
 *   IBEX_CONTEXT_TLS_CERT / _KEY / _CLIENT_CA and IBEX_CONTEXT_ALLOW_INSECURE.
 */
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
