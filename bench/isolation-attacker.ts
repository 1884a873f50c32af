/**
 * The noisy side of `bench:isolation`, in worker threads of the bench process so that its work never runs
 * on the event loop that measures the quiet org. One file, two roles, one thread each:
 * - `memory`: a memory service over node:http that answers per agent (small bodies for the quiet org,
 *   5,000 hits or 20 × 300 KB HTML for the noisy one). Its own thread: sharing the senders' event loop,
 *   it answered the quiet org's hot and cold reads late while the senders pushed ~180 MB/s of requests,
 *   and the quiet org's L1/L2 answers measured the bench's dependency, not the service's isolation.
 * - `sender`: one open-loop sender per heavy request kind that sends pre-encoded request bytes at a fixed
 *   rate and tallies the outcomes by gRPC code and level.
 *
 * Protocol: workerData = {@link AttackerData}; posts `{ memoryUrl }` once ready (the URL is '' for a
 * sender); a sender, on `{ attack: ms }`, sends for that long (only `kinds`, when given), then posts
 * `{ result }` ({@link NoisyResult} per kind); on `{ stop: true }` either exits.
 */
import http from 'node:http';
import type net from 'node:net';
import { parentPort, workerData } from 'node:worker_threads';
import { type Client, Metadata } from '@grpc/grpc-js';
import { errorKey } from '../src/tools/client/cli-options.js';
import {
  ASSEMBLE_METHOD,
  createRawClient,
  startUnary,
  type UnaryMethod,
} from '../src/tools/client/context-client.js';
import type { AssembleContextRequestInput } from '../src/wire/proto.js';
import { LEVEL_HEADER } from '../src/wire/wire-headers.js';

/** What the bench hands the attacker. */
export interface AttackerData {
  /** What this thread is (see the file's comment). */
  role: 'memory' | 'sender';
  grpcAddr?: string;
  quiet: { org: string; agent: string };
  noisyOrg: string;
  /** Agent ids of the noisy org whose memory service answers are heavy. */
  agents: { hits5000: string; html: string };
  /** Requests per second of each heavy kind. */
  ratePerKind: number;
  /**
   * Per-call deadline of the noisy calls, ms (`--noisy-timeout-ms`): it covers a 10 MB upload and download
   * on top of the server's own D (arrival + IBEX_CONTEXT_TIMEOUT), as a real caller of such requests allows.
   */
  timeoutMs: number;
}

/** Outcomes of one heavy kind over the attack. */
export interface NoisyResult {
  sent: number;
  answered: number;
  /**
   * By gRPC code name; DEADLINE_EXCEEDED as `(client --timeout)` (the call lasted ≥ 90 % of the noisy
   * caller's own deadline: typically its upload never finished) or `(server cap)` (the service's
   * IBEX_CONTEXT_TIMEOUT from the message's arrival).
   */
  codes: Record<string, number>;
  /** OK answers by level. */
  levels: Record<string, number>;
  /** Request size on the wire, bytes. */
  request_bytes: number;
  /** A few distinct non-OK details. */
  details: string[];
}

const data = workerData as AttackerData;

function item(org: string, agent: string, i: number, content: string) {
  const hex = i.toString(16).padStart(12, '0');
  return {
    memory: {
      id: `${agent.slice(0, 24)}${hex}`,
      org_id: org,
      agent_id: agent,
      content,
      category: 'factual',
      confidence: 0.5,
    },
    similarity: 0.9 - i / 100_000,
    rank: i + 1,
    source: 'bench',
  };
}
const envelope = (items: unknown[]) => Buffer.from(JSON.stringify({ data: { results: items } }));

/** Memory-service bodies by agent id, built once. */
function buildBodies(): Map<string, { hot: Buffer; cold: Buffer }> {
  const { quiet, noisyOrg, agents } = data;
  const small = (org: string, agent: string, what: string) =>
    envelope(
      Array.from({ length: 5 }, (_, i) =>
        item(org, agent, i, `${what} memory ${i}: the lake, the boat and the weather on tuesday. `.repeat(3)),
      ),
    );
  const html = `<div class=memo><p>${'<b>bold</b> &amp; <i>markup</i> '.repeat(10_000)}</p></div>`;
  const many = (what: string) =>
    envelope(
      Array.from({ length: 5000 }, (_, i) => item(noisyOrg, agents.hits5000, i, `${what} memory ${i}`)),
    );
  return new Map([
    [quiet.agent, { hot: small(quiet.org, quiet.agent, 'hot'), cold: small(quiet.org, quiet.agent, 'cold') }],
    [agents.hits5000, { hot: many('hot'), cold: many('cold') }],
    [
      agents.html,
      {
        hot: envelope(Array.from({ length: 20 }, (_, i) => item(noisyOrg, agents.html, i, `${i} ${html}`))),
        cold: envelope([]),
      },
    ],
  ]);
}

async function startMemoryService(): Promise<{ url: string; server: http.Server }> {
  const bodies = buildBodies();
  const empty = envelope([]);
  const server = http.createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const hot = url.pathname === '/v1/memories/hot';
      let agent = url.searchParams.get('agent_id') ?? '';
      if (!hot) {
        try {
          agent = (JSON.parse(Buffer.concat(chunks).toString('utf8')) as { agent_id: string }).agent_id;
        } catch {
          agent = '';
        }
      }
      const b = bodies.get(agent);
      const body = b ? (hot ? b.hot : b.cold) : empty;
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length });
      res.end(body);
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  return { url: `http://127.0.0.1:${port}`, server };
}

/** The heavy requests, by kind, for the noisy org. */
function heavyRequests(): Record<string, AssembleContextRequestInput> {
  const { noisyOrg, agents } = data;
  const base = (agent: string): AssembleContextRequestInput => ({
    org_id: noisyOrg,
    agent_id: agent,
    model: 'gpt-4o',
    query: 'sailing',
    recent_messages: [{ role: 'user', content: 'hello' }],
  });
  const other = '00000000-0000-4000-8000-00000000beef';
  return {
    decode_bomb: { ...base(other), recent_messages: Array.from({ length: 2_000_000 }, () => ({})) },
    emoji_history: {
      ...base(other),
      recent_messages: Array.from({ length: 30 }, () => ({ role: 'user', content: '😀'.repeat(32_768) })),
    },
    memory_5000_hits: base(agents.hits5000),
    memory_html_300kb: base(agents.html),
    cjk_history: {
      ...base(other),
      recent_messages: Array.from({ length: 100 }, () => ({ role: 'user', content: '漢'.repeat(32_768) })),
    },
  };
}

/**
 * Pre-encoded bytes go out as they are (the sender must not spend a second encoding 2 M messages each
 * time), and answers stay bytes: decoding 10 MB contexts in this thread would slow the sender, not the
 * service. The level comes from the `x-ibex-context-level` header.
 */
const RAW_ASSEMBLE: UnaryMethod = {
  ...ASSEMBLE_METHOD,
  requestSerialize: (b: unknown) => b as Buffer,
  responseDeserialize: (b: Buffer) => b,
};

async function attack(client: Client, encoded: Record<string, Buffer>, ms: number, kinds?: string[]) {
  const results: Record<string, NoisyResult> = {};
  const pending: Promise<void>[] = [];
  const period = 1000 / data.ratePerKind;
  const start = performance.now();
  for (const [kind, bytes] of Object.entries(encoded)) {
    if (kinds && !kinds.includes(kind)) continue;
    const r: NoisyResult = {
      sent: 0,
      answered: 0,
      codes: {},
      levels: {},
      request_bytes: bytes.length,
      details: [],
    };
    results[kind] = r;
    pending.push(
      new Promise<void>((resolve) => {
        let inFlight = 0;
        let stopped = false;
        const finish = () => {
          if (stopped && inFlight === 0) resolve();
        };
        const tick = () => {
          const now = performance.now();
          if (now - start >= ms) {
            stopped = true;
            finish();
            return;
          }
          // Open loop: one send per period whatever the answers do.
          inFlight++;
          r.sent++;
          const sentAt = performance.now();
          startUnary<Buffer>(
            client,
            RAW_ASSEMBLE,
            bytes,
            new Metadata(),
            Date.now() + data.timeoutMs,
            (o) => {
              inFlight--;
              r.answered++;
              // DEADLINE_EXCEEDED split by whose deadline, from the call's duration (cli-options.ts).
              const name = errorKey(o.status, performance.now() - sentAt, data.timeoutMs);
              r.codes[name] = (r.codes[name] ?? 0) + 1;
              if (o.response) {
                const level = String(o.metadata.get(LEVEL_HEADER)[0] ?? 'none');
                r.levels[level] = (r.levels[level] ?? 0) + 1;
              } else if (r.details.length < 3 && !r.details.includes(o.status.details)) {
                r.details.push(o.status.details.slice(0, 160));
              }
              finish();
            },
          );
          const next = start + r.sent * period;
          setTimeout(tick, Math.max(0, next - performance.now()));
        };
        // Kinds start staggered within the first period so that bursts do not line up.
        setTimeout(tick, (Object.keys(results).length - 1) * (period / 5));
      }),
    );
  }
  await Promise.all(pending);
  return results;
}

async function main(): Promise<void> {
  const port = parentPort;
  if (!port) throw new Error('isolation-attacker must run as a worker thread');
  if (data.role === 'memory') {
    const memory = await startMemoryService();
    port.postMessage({ memoryUrl: memory.url });
    port.on('message', (msg: { stop?: boolean }) => {
      if (!msg.stop) return;
      memory.server.closeAllConnections();
      memory.server.close();
      port.close();
    });
    return;
  }
  const encoded: Record<string, Buffer> = {};
  for (const [kind, req] of Object.entries(heavyRequests()))
    encoded[kind] = ASSEMBLE_METHOD.requestSerialize(req) as Buffer;
  let client: Client | null = null;
  port.postMessage({ memoryUrl: '' });
  port.on('message', (msg: { attack?: number; grpcAddr?: string; kinds?: string[]; stop?: boolean }) => {
    if (msg.stop) {
      client?.close();
      port.close();
      return;
    }
    if (msg.attack !== undefined && msg.grpcAddr) {
      client ??= createRawClient({ addr: msg.grpcAddr });
      void attack(client, encoded, msg.attack, msg.kinds).then((result) => port.postMessage({ result }));
    }
  });
}

void main();
