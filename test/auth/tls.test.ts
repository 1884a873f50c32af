/**
 * TLS and mutual TLS at the gRPC boundary with certificates made by `openssl` at test time
 * in a temp dir (no private key is committed). Skipped, with a notice, only where openssl is missing.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { type ChannelCredentials, Client, credentials, type StatusObject, status } from '@grpc/grpc-js';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { setupAuth } from '../../src/auth/setup-auth.js';
import { loadTransportCredentials } from '../../src/auth/tls-credentials.js';
import type { AuthSettings } from '../../src/config/settings.js';
import { createGrpcServer, type GrpcServer } from '../../src/grpc/grpc-server.js';
import {
  type AssembleContextRequestInput,
  type AssembleContextResponse,
  contextServiceDefinition,
} from '../../src/wire/proto.js';
import { authSettings, thrownMessage } from '../helpers/auth.js';
import { hasOpenssl } from '../helpers/pki.js';
import { stubResponse } from '../helpers/stub-response.js';

const ORG = '0b8f8c1e-6a5e-4c3b-9d7e-1f2a3b4c5d6e';
const AGENT = 'a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d';

const OPENSSL = hasOpenssl();
if (!OPENSSL) console.warn('NOTICE: openssl not found; TLS and mTLS tests are skipped');

interface Pki {
  dir: string;
  caCert: Buffer;
  serverCert: string;
  serverKey: string;
  clientCert: Buffer;
  clientKey: Buffer;
  rogueCert: Buffer;
  rogueKey: Buffer;
  clientCaPath: string;
  clientKeyPath: string;
}

/** A CA, a server cert for 127.0.0.1/localhost, a client cert from the CA and one from a rogue CA. */
function makePki(): Pki {
  const dir = mkdtempSync(path.join(tmpdir(), 'ibex-tls-'));
  const p = (f: string) => path.join(dir, f);
  const ssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  const ca = (name: string) =>
    ssl(
      'req',
      '-x509',
      ...ec,
      '-keyout',
      p(`${name}.key`),
      '-out',
      p(`${name}.crt`),
      '-subj',
      `/CN=${name}`,
      '-days',
      '1',
    );
  const leaf = (name: string, caName: string, ext: string) => {
    writeFileSync(p(`${name}.ext`), ext);
    ssl('req', ...ec, '-keyout', p(`${name}.key`), '-out', p(`${name}.csr`), '-subj', `/CN=${name}`);
    ssl(
      'x509',
      '-req',
      '-in',
      p(`${name}.csr`),
      '-CA',
      p(`${caName}.crt`),
      '-CAkey',
      p(`${caName}.key`),
      '-CAcreateserial',
      '-out',
      p(`${name}.crt`),
      '-days',
      '1',
      '-extfile',
      p(`${name}.ext`),
    );
  };
  ca('test-ca');
  ca('rogue-ca');
  leaf('server', 'test-ca', 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n');
  leaf('client', 'test-ca', 'extendedKeyUsage=clientAuth\n');
  leaf('rogue', 'rogue-ca', 'extendedKeyUsage=clientAuth\n');
  const read = (f: string) => readFileSync(p(f));
  return {
    dir,
    caCert: read('test-ca.crt'),
    serverCert: p('server.crt'),
    serverKey: p('server.key'),
    clientCert: read('client.crt'),
    clientKey: read('client.key'),
    rogueCert: read('rogue.crt'),
    rogueKey: read('rogue.key'),
    clientCaPath: p('test-ca.crt'),
    clientKeyPath: p('client.key'),
  };
}

const silent = pino({ level: 'silent' });
const auth = authSettings;

/** One AssembleContext call on a raw grpc-js client; resolves with the status and the context text. */
function call(port: number, creds: ChannelCredentials): Promise<StatusObject & { context?: string }> {
  // SNI must be a host name (RFC 6066); the server certificate also names localhost.
  const client = new Client(`127.0.0.1:${port}`, creds, { 'grpc.ssl_target_name_override': 'localhost' });
  const m = contextServiceDefinition.AssembleContext!;
  const req: AssembleContextRequestInput = { org_id: ORG, agent_id: AGENT, model: 'gpt-4o' };
  return new Promise<StatusObject & { context?: string }>((resolve) => {
    let context: string | undefined;
    const c = client.makeUnaryRequest(
      m.path,
      m.requestSerialize,
      m.responseDeserialize,
      req,
      { deadline: Date.now() + 3000 },
      (_err, res) => {
        context = (res as AssembleContextResponse | undefined)?.assembled_context;
      },
    );
    c.on('status', (s: StatusObject) => resolve({ ...s, context }));
  }).finally(() => client.close());
}

function reachedResponse(orgId: string): AssembleContextResponse {
  return stubResponse(undefined, { assembled_context: `reached ${orgId}` });
}

async function serve(settings: AuthSettings): Promise<{ grpc: GrpcServer; port: number }> {
  const setup = setupAuth({ auth: settings, grpcAddr: '127.0.0.1:0' }, silent);
  const grpc = createGrpcServer({
    assemble: async (req) => ({ response: reachedResponse(req.orgId), level: 'L0' }),
    logger: silent,
    settings: { timeoutMs: 5000, maxReceiveMessageBytes: 4 * 1024 * 1024, maxMetadataBytes: 16 * 1024 },
    interceptors: setup.interceptors,
  });
  const port = await grpc.bind('127.0.0.1:0', setup.credentials);
  return { grpc, port };
}

const configError = (fn: () => unknown) => thrownMessage('IBEX_ERR_CONFIG', fn);

describe('loadTransportCredentials without files', () => {
  it('is plaintext when nothing is set', () => {
    expect(loadTransportCredentials(auth({})).mode).toBe('plaintext');
  });

  it('names the variable when a pair is incomplete or a file is missing', () => {
    expect(configError(() => loadTransportCredentials(auth({ tlsKey: '/k.pem' })))).toBe(
      'IBEX_CONTEXT_TLS_CERT: required when IBEX_CONTEXT_TLS_KEY is set',
    );
    expect(configError(() => loadTransportCredentials(auth({ tlsCert: '/c.pem' })))).toBe(
      'IBEX_CONTEXT_TLS_KEY: required when IBEX_CONTEXT_TLS_CERT is set',
    );
    expect(configError(() => loadTransportCredentials(auth({ tlsClientCa: '/ca.pem' })))).toBe(
      'IBEX_CONTEXT_TLS_CLIENT_CA: requires IBEX_CONTEXT_TLS_CERT and IBEX_CONTEXT_TLS_KEY',
    );
    expect(
      configError(() =>
        loadTransportCredentials(auth({ tlsCert: '/nonexistent/c.pem', tlsKey: '/nonexistent/k.pem' })),
      ),
    ).toBe("IBEX_CONTEXT_TLS_CERT: cannot read '/nonexistent/c.pem': ENOENT");
  });
});

describe.skipIf(!OPENSSL)('TLS and mutual TLS (openssl certificates)', () => {
  let pki: Pki;
  beforeAll(() => {
    pki = makePki();
  });
  afterAll(() => {
    rmSync(pki.dir, { recursive: true, force: true });
  });

  it('refuses a key that does not match the certificate, and files that are not PEM', () => {
    expect(
      configError(() =>
        loadTransportCredentials(auth({ tlsCert: pki.serverCert, tlsKey: pki.clientKeyPath })),
      ),
    ).toBe('IBEX_CONTEXT_TLS_KEY: does not match the certificate in IBEX_CONTEXT_TLS_CERT');
    expect(
      configError(() => loadTransportCredentials(auth({ tlsCert: pki.serverKey, tlsKey: pki.serverKey }))),
    ).toBe('IBEX_CONTEXT_TLS_CERT: not a PEM certificate');
    expect(
      configError(() => loadTransportCredentials(auth({ tlsCert: pki.serverCert, tlsKey: pki.serverCert }))),
    ).toBe('IBEX_CONTEXT_TLS_KEY: not an unencrypted PEM private key');
    expect(
      configError(() =>
        loadTransportCredentials(
          auth({ tlsCert: pki.serverCert, tlsKey: pki.serverKey, tlsClientCa: pki.serverKey }),
        ),
      ),
    ).toBe('IBEX_CONTEXT_TLS_CLIENT_CA: not a PEM certificate');
  });

  it('TLS: a client trusting the CA gets through; a plaintext client does not', async () => {
    const { grpc, port } = await serve(auth({ tlsCert: pki.serverCert, tlsKey: pki.serverKey }));
    try {
      const tls = await call(port, credentials.createSsl(pki.caCert));
      expect(tls.code).toBe(status.OK);
      expect(tls.context).toBe(`reached ${ORG}`);
      const plain = await call(port, credentials.createInsecure());
      expect(plain.code).toBe(status.UNAVAILABLE);
      // A client that does not trust the server's CA refuses the server.
      const untrusting = await call(port, credentials.createSsl(pki.rogueCert));
      expect(untrusting.code).toBe(status.UNAVAILABLE);
    } finally {
      await grpc.drain(500);
    }
  });

  it('mTLS: only a client certificate from the client CA gets through, and the server keeps serving', async () => {
    const settings = auth({ tlsCert: pki.serverCert, tlsKey: pki.serverKey, tlsClientCa: pki.clientCaPath });
    expect(loadTransportCredentials(settings).mode).toBe('mtls');
    const { grpc, port } = await serve(settings);
    try {
      const noCert = await call(port, credentials.createSsl(pki.caCert));
      expect(noCert.code).toBe(status.UNAVAILABLE);
      const rogue = await call(port, credentials.createSsl(pki.caCert, pki.rogueKey, pki.rogueCert));
      expect(rogue.code).toBe(status.UNAVAILABLE);
      const plain = await call(port, credentials.createInsecure());
      expect(plain.code).toBe(status.UNAVAILABLE);
      const good = await call(port, credentials.createSsl(pki.caCert, pki.clientKey, pki.clientCert));
      expect(good.code).toBe(status.OK);
      expect(good.context).toBe(`reached ${ORG}`);
    } finally {
      await grpc.drain(500);
    }
  });
});
