// Dev memory server (`ibex-context memory-server`): a store over the memory service wire (contract.md
// §4.1, §4.3) with injected latency and faults. The wire has no org, so answers hold every org's memories.
import { createHash, timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { WireStore } from '../../retrieval/postgres/wire-store.js';
import { EmbeddedStore, type StoreHit } from '../../retrieval/sqlite/embedded-store.js';
import { HOT_LIMIT, SEARCH_LIMIT } from '../../retrieval/validate.js';
import { canonicalUuid, uuidV5 } from '../../util/uuid.js';

/** Latency distributions with mean `latencyMs`: fixed n; uniform on [0, 2n]; exponential of mean n. */
export type LatencyDist = 'fixed' | 'uniform' | 'exponential';

export interface MemoryServerFaults {
  /** Mean added latency per answered request, ms. 0 = none. */
  latencyMs: number;
  latencyDist: LatencyDist;
  latencyRoute: 'both' | 'hot' | 'search';
  /** Probability in [0,1] of answering 503. */
  errorRate: number;
  /** Probability in [0,1] of answering a truncated (invalid JSON) body. */
  malformedRate: number;
  /** Adds one hit of another org and one of another agent to every answer. */
  plantForeign: boolean;
  /** Adds one invalid hit (similarity 1.5) to every answer. */
  plantInvalid: boolean;
}

/** Options of {@link startMemoryServer}: `store` (not closed), or `postgres` / `db` (owned). */
export interface MemoryServerOptions extends Partial<MemoryServerFaults> {
  token: string;
  store?: EmbeddedStore;
  db?: string;
  postgres?: { url: string; schema: string };
  host?: string;
  /** Default 8088; 0 = any free port. */
  port?: number;
  random?: () => number;
}

export interface MemoryServerStats {
  total: number;
  hot: number;
  search: number;
  unauthorized: number;
}

export interface MemoryServerHandle {
  url: string;
  readonly stats: MemoryServerStats;
  setFaults(faults: Partial<MemoryServerFaults>): void;
  close(): Promise<void>;
}

const MAX_REQUEST_BODY = 1024 * 1024;
export const PLANTED_FOREIGN_ORG = 'f0f0f0f0-0000-4000-8000-00000000f0f0';
const PLANT_NS = '3b8e1a52-5f0c-4d8e-9f51-6f6d3b1f7a10';

function digest(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest();
}

/** Constant-time check of `Authorization: Bearer <token>`; hashing first equalises lengths. */
function authorized(header: string | undefined, expected: Buffer): boolean {
  const match = header === undefined ? null : /^Bearer[ \t]+(.+)$/i.exec(header);
  const given = digest(match?.[1] ?? '');
  return timingSafeEqual(given, expected) && match !== null;
}

function delayFor(f: MemoryServerFaults, random: () => number): number {
  if (!(f.latencyMs > 0)) return 0;
  switch (f.latencyDist) {
    case 'uniform':
      return random() * 2 * f.latencyMs;
    case 'exponential':
      return -f.latencyMs * Math.log(1 - random());
    default:
      return f.latencyMs;
  }
}

/** An answer item: a store hit, or a planted one whose `source` says so. */
type WireHit = Omit<StoreHit, 'source'> & { source: string };

function planted(hits: StoreHit[], agentId: string, faults: MemoryServerFaults): WireHit[] {
  if (!faults.plantForeign && !faults.plantInvalid) return hits;
  const out: WireHit[] = hits.slice();
  const realOrg = hits[0]?.memory.org_id ?? PLANTED_FOREIGN_ORG;
  const fake = (kind: string, orgId: string, agent: string, similarity: number): WireHit => ({
    memory: {
      id: uuidV5(`${kind}:${agentId}`, PLANT_NS),
      org_id: orgId,
      agent_id: agent,
      content: `planted ${kind} memory`,
      category: 'factual',
      confidence: 0.9,
      created_at: new Date(0).toISOString(),
    },
    similarity,
    rank: out.length + 1,
    source: 'planted',
  });
  if (faults.plantForeign) {
    out.push(fake('foreign-org', PLANTED_FOREIGN_ORG, agentId, 0.99));
    out.push(fake('foreign-agent', realOrg, uuidV5(`other-agent:${agentId}`, PLANT_NS), 0.99));
  }
  if (faults.plantInvalid) out.push(fake('invalid', realOrg, agentId, 1.5));
  return out;
}

function send(res: http.ServerResponse, status: number, body: string): void {
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
  });
  res.end(body);
}

function problem(res: http.ServerResponse, status: number, detail: string): void {
  send(res, status, JSON.stringify({ error: detail }));
}

function readBody(req: http.IncomingMessage): Promise<string | null> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_REQUEST_BODY) {
        resolve(null);
        req.resume();
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

interface Query {
  agentId: string;
  query: string;
  limit: number;
  minConfidence: number;
}

function parseParams(
  raw: { agent_id?: unknown; limit?: unknown; min_confidence?: unknown; query?: unknown },
  defaultLimit: number,
  needsQuery: boolean,
): Query | { status: number; error: string } {
  const agentId = canonicalUuid(raw.agent_id);
  if (agentId === null) return { status: 400, error: 'agent_id must be a UUID' };
  const limit = raw.limit === undefined || raw.limit === '' ? defaultLimit : Number(raw.limit);
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > 100)
    return { status: 400, error: 'limit must be 1..100' };
  const minConfidence =
    raw.min_confidence === undefined || raw.min_confidence === '' ? 0 : Number(raw.min_confidence);
  if (!Number.isFinite(minConfidence) || minConfidence < 0 || minConfidence > 1) {
    return { status: 400, error: 'min_confidence must be in [0,1]' };
  }
  let query = '';
  if (needsQuery) {
    if (typeof raw.query !== 'string') return { status: 400, error: 'query must be a string' };
    // The real memory service rejects an empty query (contract.md §4.1), so the dev server does too.
    if (raw.query.trim() === '') return { status: 422, error: 'query must not be empty' };
    query = raw.query;
  }
  return { agentId, query, limit, minConfidence };
}

/**
 * Starts the dev memory server: `GET /v1/memories/hot`, `POST /v1/memories/search`, `GET /healthz` (no auth).
 * 401 without the token, 400/422 for bad parameters, 503 or truncated JSON when faults fire.
 * @throws Error when `token` is blank, neither `store` nor `db` is given, or listening fails.
 */
export async function startMemoryServer(opts: MemoryServerOptions): Promise<MemoryServerHandle> {
  if (opts.token.trim() === '') throw new Error('memory-server: a bearer token is required');
  if (opts.store === undefined && opts.db === undefined && opts.postgres === undefined)
    throw new Error('memory-server: store, postgres or db is required');
  const ownsStore = opts.store === undefined;
  // Loaded on demand so the embedded path never loads `pg`.
  const store: WireStore =
    opts.store ??
    (opts.postgres
      ? await (await import('../../retrieval/postgres/wire-store.js')).openPgWireStore(opts.postgres)
      : EmbeddedStore.open(opts.db!));
  const expected = digest(opts.token);
  const random = opts.random ?? Math.random;
  const faults: MemoryServerFaults = {
    latencyMs: opts.latencyMs ?? 0,
    latencyDist: opts.latencyDist ?? 'fixed',
    latencyRoute: opts.latencyRoute ?? 'both',
    errorRate: opts.errorRate ?? 0,
    malformedRate: opts.malformedRate ?? 0,
    plantForeign: opts.plantForeign ?? false,
    plantInvalid: opts.plantInvalid ?? false,
  };
  const stats: MemoryServerStats = { total: 0, hot: 0, search: 0, unauthorized: 0 };
  const pending = new Set<NodeJS.Timeout>();

  const answer = (
    res: http.ServerResponse,
    route: 'hot' | 'search',
    build: () => StoreHit[] | Promise<StoreHit[]>,
    agentId: string,
  ) => {
    const respond = async () => {
      if (res.destroyed) return;
      if (random() < faults.errorRate) return problem(res, 503, 'injected fault');
      if (random() < faults.malformedRate) return send(res, 200, '{"data": {"results": [{"memory": ');
      let hits: WireHit[];
      try {
        hits = planted(await build(), agentId, faults);
      } catch {
        return problem(res, 500, 'store error');
      }
      if (!res.destroyed) send(res, 200, JSON.stringify({ data: { results: hits } }));
    };
    const delay =
      faults.latencyRoute === 'both' || faults.latencyRoute === route ? delayFor(faults, random) : 0;
    if (delay <= 0) return respond();
    const timer = setTimeout(() => {
      pending.delete(timer);
      respond();
    }, delay);
    pending.add(timer);
    // A client that gave up (deadline) frees its delayed answer at once.
    res.on('close', () => {
      clearTimeout(timer);
      pending.delete(timer);
    });
  };

  const handler = async (req: http.IncomingMessage, res: http.ServerResponse): Promise<void> => {
    stats.total++;
    const url = new URL(req.url ?? '/', 'http://memory-server');
    if (url.pathname === '/healthz') return send(res, 200, '{"status":"ok"}');
    if (!authorized(req.headers.authorization, expected)) {
      stats.unauthorized++;
      res.setHeader('www-authenticate', 'Bearer');
      return problem(res, 401, 'unauthorized');
    }
    if (url.pathname === '/v1/memories/hot') {
      if (req.method !== 'GET') return problem(res, 405, 'method not allowed');
      stats.hot++;
      const p = parseParams(Object.fromEntries(url.searchParams), HOT_LIMIT, false);
      if ('error' in p) return problem(res, p.status, p.error);
      return answer(res, 'hot', () => store.hot(null, p.agentId, p), p.agentId);
    }
    if (url.pathname === '/v1/memories/search') {
      if (req.method !== 'POST') return problem(res, 405, 'method not allowed');
      stats.search++;
      const text = await readBody(req);
      if (text === null) return problem(res, 413, 'body too large');
      let body: unknown;
      try {
        body = JSON.parse(text);
      } catch {
        return problem(res, 400, 'invalid JSON');
      }
      if (typeof body !== 'object' || body === null) return problem(res, 400, 'body must be an object');
      const p = parseParams(body as Record<string, unknown>, SEARCH_LIMIT, true);
      if ('error' in p) return problem(res, p.status, p.error);
      return answer(res, 'search', () => store.search(null, p.agentId, p.query, p), p.agentId);
    }
    return problem(res, 404, 'not found');
  };

  const server = http.createServer({ keepAlive: true }, (req, res) => {
    handler(req, res).catch(() => {
      if (!res.headersSent) problem(res, 500, 'internal error');
      else res.destroy();
    });
  });
  // Longer than the client pool's idle timeout would race socket reuse; the client reads this hint.
  server.keepAliveTimeout = 30_000;

  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(opts.port ?? 8088, opts.host ?? '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch (err) {
    if (ownsStore) await store.close();
    throw err;
  }
  const addr = server.address() as AddressInfo;
  const host = addr.family === 'IPv6' ? `[${addr.address}]` : addr.address;
  let closed: Promise<void> | undefined;
  return {
    url: `http://${host}:${addr.port}`,
    stats,
    setFaults(f) {
      Object.assign(faults, f);
    },
    close() {
      closed ??= new Promise<void>((resolve) => {
        for (const t of pending) clearTimeout(t);
        pending.clear();
        server.close(async () => {
          if (ownsStore) await store.close();
          resolve();
        });
        server.closeAllConnections();
      });
      return closed;
    },
  };
}
