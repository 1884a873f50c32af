/**
 * Everything the service needs for caller authentication, built once at start-up from
 * `settings.auth` and `settings.grpcAddr`: server credentials, the bearer-token interceptor, and the
 * warnings that go on /readyz — or a refusal to start.
 */
import type { ServerCredentials, ServerInterceptor } from '@grpc/grpc-js';
import type { Settings } from '../config/settings.js';
import type { Logger } from '../telemetry/logger.js';
import { bearerAuthInterceptor } from './bearer-interceptor.js';
import { decideBinding } from './binding-policy.js';
import { loadTransportCredentials, type TransportMode } from './tls-credentials.js';
import { loadTokenFile, TOKENS_FILE_VARIABLE } from './token-file.js';

/** What {@link setupAuth} gives `startService`. */
export interface AuthSetup {
  credentials: ServerCredentials;
  /** The bearer-token interceptor when a token file is configured, else empty. */
  interceptors: ServerInterceptor[];
  /** Insecure-configuration warnings, already logged; repeat them on /readyz. */
  warnings: string[];
  transport: TransportMode;
  /** Number of tokens in the token file (0 = bearer tokens off). */
  tokens: number;
}

/**
 * Loads credentials and tokens and applies the binding policy ({@link decideBinding}). Logs one info
 * line describing the mode, each warning at warn level, and a warning when the token file keeps
 * plaintext tokens.
 * @throws IbexError `IBEX_ERR_CONFIG` whose message starts with the variable at fault: a TLS or token
 *   file problem, or `IBEX_CONTEXT_GRPC_ADDR: refusing to listen …` for an unauthenticated non-loopback
 *   address without IBEX_CONTEXT_ALLOW_INSECURE=true.
 */
export function setupAuth(settings: Pick<Settings, 'auth' | 'grpcAddr'>, logger: Logger): AuthSetup {
  const log = logger.child({ component: 'auth' });
  const { credentials, mode } = loadTransportCredentials(settings.auth);
  const tokensFile = settings.auth.tokensFile.trim();
  const grants = tokensFile === '' ? [] : loadTokenFile(tokensFile);

  const decision = decideBinding({
    grpcAddr: settings.grpcAddr,
    tokens: grants.length > 0,
    transport: mode,
    allowInsecure: settings.auth.allowInsecure,
  });
  if (decision.action === 'refuse') throw decision.error;

  log.info({ transport: mode, tokens: grants.length, grpcAddr: settings.grpcAddr }, 'caller authentication');
  const plaintext = grants.filter((g) => g.fromPlaintext).length;
  if (plaintext > 0) {
    log.warn(
      { variable: TOKENS_FILE_VARIABLE, plaintextTokens: plaintext },
      'token file stores plaintext tokens; prefer "token_sha256"',
    );
  }
  for (const warning of decision.warnings) log.warn({ insecure: true }, warning);
  return {
    credentials,
    interceptors: grants.length > 0 ? [bearerAuthInterceptor(grants, logger)] : [],
    warnings: decision.warnings,
    transport: mode,
    tokens: grants.length,
  };
}
