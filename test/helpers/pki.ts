/**
 * Test certificates made with openssl at test time (nothing is committed or downloaded): whether openssl is
 * there, and a CA with a server certificate for 127.0.0.1/localhost.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

/** True when `openssl` runs; TLS tests skip with a notice otherwise. */
export function hasOpenssl(): boolean {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/**
 * A fresh temporary directory (`prefix` + random; the caller removes it) holding `ca.crt`/`ca.key` (CN
 * test-ca, P-256, 1 day) and `server.crt`/`server.key` signed by it for IP 127.0.0.1 and DNS localhost.
 * @throws Error when openssl fails.
 */
export function makeServerPki(prefix: string): string {
  const pki = mkdtempSync(path.join(tmpdir(), prefix));
  const ssl = (...args: string[]) => execFileSync('openssl', args, { cwd: pki, stdio: 'pipe' });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  ssl('req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.crt', '-subj', '/CN=test-ca', '-days', '1');
  writeFileSync(path.join(pki, 'server.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\n');
  ssl('req', ...ec, '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=server');
  ssl(
    'x509',
    '-req',
    '-in',
    'server.csr',
    '-CA',
    'ca.crt',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-out',
    'server.crt',
    '-days',
    '1',
    '-extfile',
    'server.ext',
  );
  return pki;
}
