/**
 * gRPC server credentials from `IBEX_CONTEXT_TLS_CERT`, `IBEX_CONTEXT_TLS_KEY` and
 * `IBEX_CONTEXT_TLS_CLIENT_CA`: plaintext, TLS, or mutual TLS. The PEM files are read and
 * checked once at start-up (certificate parses, key parses and matches it), so a wrong path or a
 * mismatched pair stops start-up with the variable's name instead of failing every handshake later.
 */
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { ServerCredentials } from '@grpc/grpc-js';
import type { AuthSettings } from '../config/settings.js';
import { Errors } from '../wire/errors.js';

/** Transport security mode. */
export type TransportMode = 'plaintext' | 'tls' | 'mtls';

/** Credentials plus the mode they give. */
export interface TransportCredentials {
  credentials: ServerCredentials;
  mode: TransportMode;
}

function readPem(variable: string, path: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
    throw Errors.config(variable, `cannot read '${path}': ${code}`);
  }
}

function parseCertificate(variable: string, pem: Buffer): X509Certificate {
  try {
    return new X509Certificate(pem);
  } catch {
    throw Errors.config(variable, 'not a PEM certificate');
  }
}

/**
 * Builds the server credentials.
 *
 * - cert and key blank, client CA blank → plaintext (insecure) credentials;
 * - cert + key → TLS; the cert file may hold a chain (leaf first);
 * - cert + key + client CA → mutual TLS: every client must present a certificate that chains to one
 *   of the CA file's certificates, or the handshake fails.
 * @throws IbexError `IBEX_ERR_CONFIG` naming the variable: cert without key (or the reverse), client
 *   CA without cert and key, an unreadable file, a file that is not PEM, a key that does not match the
 *   certificate. Messages never include key material.
 */
export function loadTransportCredentials(
  auth: Pick<AuthSettings, 'tlsCert' | 'tlsKey' | 'tlsClientCa'>,
): TransportCredentials {
  const certPath = auth.tlsCert.trim();
  const keyPath = auth.tlsKey.trim();
  const caPath = auth.tlsClientCa.trim();
  if (certPath === '' && keyPath === '') {
    if (caPath !== '') {
      throw Errors.config(
        'IBEX_CONTEXT_TLS_CLIENT_CA',
        'requires IBEX_CONTEXT_TLS_CERT and IBEX_CONTEXT_TLS_KEY',
      );
    }
    return { credentials: ServerCredentials.createInsecure(), mode: 'plaintext' };
  }
  if (certPath === '')
    throw Errors.config('IBEX_CONTEXT_TLS_CERT', 'required when IBEX_CONTEXT_TLS_KEY is set');
  if (keyPath === '')
    throw Errors.config('IBEX_CONTEXT_TLS_KEY', 'required when IBEX_CONTEXT_TLS_CERT is set');

  const certPem = readPem('IBEX_CONTEXT_TLS_CERT', certPath);
  const keyPem = readPem('IBEX_CONTEXT_TLS_KEY', keyPath);
  const cert = parseCertificate('IBEX_CONTEXT_TLS_CERT', certPem);
  let key: ReturnType<typeof createPrivateKey>;
  try {
    key = createPrivateKey(keyPem);
  } catch {
    throw Errors.config('IBEX_CONTEXT_TLS_KEY', 'not an unencrypted PEM private key');
  }
  if (!cert.checkPrivateKey(key)) {
    throw Errors.config('IBEX_CONTEXT_TLS_KEY', 'does not match the certificate in IBEX_CONTEXT_TLS_CERT');
  }

  let clientCa: Buffer | null = null;
  if (caPath !== '') {
    clientCa = readPem('IBEX_CONTEXT_TLS_CLIENT_CA', caPath);
    parseCertificate('IBEX_CONTEXT_TLS_CLIENT_CA', clientCa);
  }
  try {
    const credentials = ServerCredentials.createSsl(
      clientCa,
      [{ cert_chain: certPem, private_key: keyPem }],
      clientCa !== null,
    );
    return { credentials, mode: clientCa === null ? 'tls' : 'mtls' };
  } catch (err) {
    throw Errors.config('IBEX_CONTEXT_TLS_CERT', `cannot build TLS credentials: ${(err as Error).message}`);
  }
}
