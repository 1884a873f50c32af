// Admin HTTP endpoint: `/metrics`, `/healthz` (process answers), `/readyz` (pool warm, not draining).
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';

/** What `/readyz` reports. */
export interface Readiness {
  ready: boolean;
  draining: boolean;
  /** Warnings repeated on /readyz, e.g. insecure binding. */
  warnings: string[];
  /** Active stores, e.g. `{memory: 'postgres', directive: 'redis'}`; shown on /readyz. */
  stores?: { memory: string; directive: string };
}

export interface AdminServer {
  /** `http://host:port`. */
  url: string;
  close(): Promise<void>;
}

function splitAddr(addr: string): { host: string; port: number } {
  const i = addr.lastIndexOf(':');
  return { host: addr.slice(0, i).replace(/^\[|\]$/g, ''), port: Number(addr.slice(i + 1)) };
}

/** Starts the admin server on `addr` (`host:port`, port 0: a free one). @throws the listen error. */
export async function startAdminServer(
  addr: string,
  registry: Registry,
  readiness: () => Readiness,
): Promise<AdminServer> {
  const server = http.createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
      return;
    }
    if (path === '/metrics') {
      registry.metrics().then(
        (body) => res.writeHead(200, { 'content-type': registry.contentType }).end(body),
        (err: Error) => res.writeHead(500, { 'content-type': 'text/plain' }).end(err.message),
      );
      return;
    }
    if (path === '/healthz') {
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"status":"alive"}');
      return;
    }
    if (path === '/readyz') {
      const r = readiness();
      const ok = r.ready && !r.draining;
      res.writeHead(ok ? 200 : 503, { 'content-type': 'application/json' }).end(
        JSON.stringify({
          status: ok ? 'ready' : r.draining ? 'draining' : 'starting',
          warnings: r.warnings,
          ...(r.stores === undefined ? {} : { stores: r.stores }),
        }),
      );
      return;
    }
    res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
  });
  server.keepAliveTimeout = 5_000;
  const { host, port } = splitAddr(addr);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const bound = server.address() as AddressInfo;
  const shownHost = bound.family === 'IPv6' ? `[${bound.address}]` : bound.address;
  return {
    url: `http://${shownHost}:${bound.port}`,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
