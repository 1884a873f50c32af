/**
 * The start-up refusal: an unauthenticated non-loopback address does not start unless
 * IBEX_CONTEXT_ALLOW_INSECURE=true, which warns instead. Unit tests of the decision plus one real
 * `ibex-context serve` process (built by `npm test` before vitest).
 */

import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { decideBinding, hostOfAddr, isLoopbackHost } from '../../src/auth/binding-policy.js';
import { setupAuth } from '../../src/auth/setup-auth.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { isIbexError } from '../../src/wire/errors.js';
import { authSettings } from '../helpers/auth.js';
import { CLI, ROOT, runCli } from '../helpers/cli.js';
import { logSink } from '../helpers/log-sink.js';

const REFUSAL =
  'IBEX_CONTEXT_GRPC_ADDR: refusing to listen on 0.0.0.0:9092 (not loopback) without caller authentication: ' +
  'set IBEX_CONTEXT_AUTH_TOKENS_FILE (bearer tokens) and/or IBEX_CONTEXT_TLS_CERT, IBEX_CONTEXT_TLS_KEY and ' +
  'IBEX_CONTEXT_TLS_CLIENT_CA (mutual TLS), or set IBEX_CONTEXT_ALLOW_INSECURE=true to serve unauthenticated anyway';

describe('isLoopbackHost', () => {
  it.each(
    'localhost LOCALHOST 127.0.0.1 127.255.3.4 ::1 [::1] 0:0:0:0:0:0:0:1 ::ffff:127.0.0.1 [::ffff:127.1.2.3]'.split(
      ' ',
    ),
  )('%s is loopback', (host) => {
    expect(isLoopbackHost(host)).toBe(true);
  });

  it.each([
    '',
    ...'0.0.0.0 :: [::] 10.0.0.1 128.0.0.1 ::2 ::ffff:10.0.0.1 localhost.example.com example.com'.split(' '),
  ])('%s is not loopback', (host) => {
    expect(isLoopbackHost(host)).toBe(false);
  });

  it('takes the host of host:port', () => {
    expect(hostOfAddr('[::1]:9092')).toBe('::1');
    expect(hostOfAddr('0.0.0.0:0')).toBe('0.0.0.0');
  });
});

describe('decideBinding', () => {
  const base = {
    grpcAddr: '0.0.0.0:9092',
    tokens: false,
    transport: 'plaintext' as const,
    allowInsecure: false,
  };

  it('serves on loopback without authentication and without warnings', () => {
    for (const grpcAddr of ['127.0.0.1:9092', 'localhost:0', '[::1]:9092']) {
      expect(decideBinding({ ...base, grpcAddr })).toEqual({ action: 'serve', warnings: [] });
    }
  });

  it('refuses an unauthenticated non-loopback address, naming the variables (TLS alone is not authentication)', () => {
    for (const transport of ['plaintext', 'tls'] as const) {
      const d = decideBinding({ ...base, transport });
      expect(d.action).toBe('refuse');
      if (d.action !== 'refuse') return;
      expect(d.error.code).toBe('IBEX_ERR_CONFIG');
      expect(d.error.message).toBe(REFUSAL);
    }
  });

  it('serves with a loud warning when IBEX_CONTEXT_ALLOW_INSECURE=true', () => {
    expect(decideBinding({ ...base, allowInsecure: true })).toEqual({
      action: 'serve',
      warnings: [
        'INSECURE: gRPC listens on 0.0.0.0:9092 (not loopback) with no caller authentication ' +
          '(IBEX_CONTEXT_ALLOW_INSECURE=true): anyone who can reach it can read any org’s memory. Set ' +
          'IBEX_CONTEXT_AUTH_TOKENS_FILE or IBEX_CONTEXT_TLS_CLIENT_CA.',
      ],
    });
  });

  it('serves when tokens or mTLS authenticate callers; warns when tokens would travel in plaintext', () => {
    expect(decideBinding({ ...base, transport: 'mtls' })).toEqual({ action: 'serve', warnings: [] });
    expect(decideBinding({ ...base, tokens: true, transport: 'tls' })).toEqual({
      action: 'serve',
      warnings: [],
    });
    expect(decideBinding({ ...base, tokens: true })).toEqual({
      action: 'serve',
      warnings: [
        'INSECURE: bearer tokens travel unencrypted to 0.0.0.0:9092 (not loopback); set IBEX_CONTEXT_TLS_CERT ' +
          'and IBEX_CONTEXT_TLS_KEY.',
      ],
    });
  });
});

describe('setupAuth', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'ibex-setup-auth-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const auth = authSettings;
  const capture = () => {
    const { lines, stream } = logSink();
    return { lines, logger: createLogger({ logLevel: 'info' }, stream) };
  };

  it('throws the refusal for 0.0.0.0 without authentication', () => {
    const { logger } = capture();
    let error: unknown;
    try {
      setupAuth({ grpcAddr: '0.0.0.0:9092', auth: auth({}) }, logger);
    } catch (err) {
      error = err;
    }
    expect(isIbexError(error, 'IBEX_ERR_CONFIG')).toBe(true);
    expect((error as Error).message).toBe(REFUSAL);
  });

  it('logs the insecure warning at warn level and returns it for /readyz', () => {
    const { lines, logger } = capture();
    const setup = setupAuth({ grpcAddr: '0.0.0.0:9092', auth: auth({ allowInsecure: true }) }, logger);
    expect(setup.interceptors).toEqual([]);
    expect(setup.transport).toBe('plaintext');
    expect(setup.warnings).toHaveLength(1);
    expect(setup.warnings[0]).toMatch(/^INSECURE: gRPC listens on 0\.0\.0\.0:9092 \(not loopback\)/);
    const warn = lines.find((l) => l.level === 'warn');
    expect(warn).toMatchObject({ component: 'auth', insecure: true, msg: setup.warnings[0] });
  });

  it('installs the bearer interceptor from the token file and warns about plaintext tokens', () => {
    const file = path.join(dir, 'tokens.json');
    writeFileSync(
      file,
      JSON.stringify({ tokens: [{ name: 'a', token: 'plain-token-0123456789', orgs: ['*'] }] }),
    );
    const { lines, logger } = capture();
    const setup = setupAuth({ grpcAddr: '127.0.0.1:0', auth: auth({ tokensFile: file }) }, logger);
    expect(setup.interceptors).toHaveLength(1);
    expect(setup.tokens).toBe(1);
    expect(setup.warnings).toEqual([]);
    expect(lines.map((l) => [l.level, l.msg])).toEqual([
      ['info', 'caller authentication'],
      ['warn', 'token file stores plaintext tokens; prefer "token_sha256"'],
    ]);
    expect(JSON.stringify(lines)).not.toContain('plain-token-0123456789');
  });
});

describe('ibex-context serve', () => {
  it('exits 1 before opening anything on 0.0.0.0 without authentication, naming the variables', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'ibex-serve-refused-'));
    const db = path.join(dir, 'store.db');
    const out = await runCli(['serve'], '', {
      timeoutMs: 10_000,
      env: {
        IBEX_CONTEXT_EMBEDDED_DB: db,
        IBEX_CONTEXT_GRPC_ADDR: '0.0.0.0:0',
        IBEX_CONTEXT_ADMIN_ADDR: '127.0.0.1:0',
        IBEX_CONTEXT_AUTH_TOKENS_FILE: '',
        IBEX_CONTEXT_TLS_CERT: '',
        IBEX_CONTEXT_TLS_KEY: '',
        IBEX_CONTEXT_TLS_CLIENT_CA: '',
        IBEX_CONTEXT_ALLOW_INSECURE: 'false',
      },
    });
    expect(out.code).toBe(1);
    expect(out.stderr.trim()).toBe(`ibex-context: ${REFUSAL.replace('0.0.0.0:9092', '0.0.0.0:0')}`);
    // Refused before the store is opened (and so before any thread starts): no store file was created.
    expect(existsSync(db)).toBe(false);
    rmSync(dir, { recursive: true, force: true });
  });

  it('with IBEX_CONTEXT_ALLOW_INSECURE=true on 0.0.0.0: serves, logs the warning, and repeats it on /readyz', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'ibex-serve-insecure-'));
    const child = spawn(process.execPath, [CLI, 'serve'], {
      cwd: ROOT,
      env: {
        ...process.env,
        IBEX_CONTEXT_GRPC_ADDR: '0.0.0.0:0',
        IBEX_CONTEXT_ADMIN_ADDR: '127.0.0.1:0',
        IBEX_CONTEXT_ALLOW_INSECURE: 'true',
        IBEX_CONTEXT_AUTH_TOKENS_FILE: '',
        IBEX_CONTEXT_TLS_CERT: '',
        IBEX_CONTEXT_TLS_KEY: '',
        IBEX_CONTEXT_TLS_CLIENT_CA: '',
        IBEX_CONTEXT_EMBEDDED_DB: path.join(dir, 'ibex.db'),
        IBEX_CONTEXT_POOL_MIN_THREADS: '1',
        IBEX_CONTEXT_POOL_MAX_THREADS: '1',
        IBEX_CONTEXT_LOG_LEVEL: 'info',
      },
    });
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    try {
      const lines: Record<string, unknown>[] = [];
      let buffered = '';
      const serving = new Promise<Record<string, unknown>>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`not serving; stdout: ${buffered}`)), 20_000);
        child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
          buffered += chunk;
          let nl = buffered.indexOf('\n');
          while (nl >= 0) {
            const line = JSON.parse(buffered.slice(0, nl)) as Record<string, unknown>;
            buffered = buffered.slice(nl + 1);
            lines.push(line);
            if (line.msg === 'ibex-context serving') {
              clearTimeout(timer);
              resolve(line);
            }
            nl = buffered.indexOf('\n');
          }
        });
        child.once('exit', (code) => reject(new Error(`exited ${code}; stdout: ${buffered}`)));
      });
      const up = await serving;
      const warning = lines.find((l) => l.level === 'warn' && l.insecure === true);
      expect(String(warning?.msg)).toMatch(
        /^INSECURE: gRPC listens on 0\.0\.0\.0:0 \(not loopback\) with no caller authentication/,
      );
      const res = await fetch(`${String(up.admin)}/readyz`);
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual({
        status: 'ready',
        warnings: [warning?.msg],
        stores: { memory: 'embedded', directive: 'embedded' },
      });
    } finally {
      child.kill('SIGTERM');
      // Shutdown behaviour is tested elsewhere; here the child must only be gone before the test ends.
      const killer = setTimeout(() => child.kill('SIGKILL'), 3000);
      await exited;
      clearTimeout(killer);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
