/** Server credentials; the PEM files are checked at start-up, so a bad pair fails there, not per handshake. */
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { ServerCredentials } from '@grpc/grpc-js';
import type { AuthSettings } from '../config/settings.js';
import { Errors } from '../wire/errors.js';

export type TransportMode = 'plaintext' | 'tls' | 'mtls';

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
 * Server credentials: cert + key → TLS (chain allowed, leaf first), plus client CA → mTLS, none → plaintext.
 * @throws IbexError `IBEX_ERR_CONFIG` naming the variable; messages never include key material.
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
