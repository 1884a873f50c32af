/** Caller authentication built once at start-up: server credentials, token interceptor, warnings. */
import type { ServerCredentials, ServerInterceptor } from '@grpc/grpc-js';
import type { Settings } from '../config/settings.js';
import type { Logger } from '../telemetry/logger.js';
import { bearerAuthInterceptor } from './bearer-interceptor.js';
import { decideBinding } from './binding-policy.js';
import { loadTransportCredentials, type TransportMode } from './tls-credentials.js';
import { loadTokenFile, TOKENS_FILE_VARIABLE } from './token-file.js';

export interface AuthSetup {
  credentials: ServerCredentials;
  interceptors: ServerInterceptor[];
  /** Insecure-configuration warnings, already logged; repeat them on /readyz. */
  warnings: string[];
  transport: TransportMode;
  /** 0 = bearer tokens off. */
  tokens: number;
}

/** Loads credentials and tokens, applies {@link decideBinding}. @throws IbexError `IBEX_ERR_CONFIG`. */
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
