/**
 * Fault-test plumbing: metrics scraped from the admin endpoint, raw HTTP/TCP servers
 * that misbehave on purpose, a memory-service router that faults one agent's calls while every other
 * agent is served by the real dev memory server, a fake Redis that speaks just enough RESP to stall or
 * lie, the service wired to the fault-injecting pool worker, and `serve` as a child process.
 * Everything listens on 127.0.0.1 only.
 */
import { spawn } from 'node:child_process';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { type ChannelOptions, InterceptingCall, type Interceptor } from '@grpc/grpc-js';
import { CapabilityCatalog } from '../../src/budget/catalog.js';
import { loadSettings, type Settings } from '../../src/config/settings.js';
import { type CpuTaskInput, historyOf } from '../../src/cpu-stage/cpu-task.js';
import { createGrpcServer } from '../../src/grpc/grpc-server.js';
import { CpuPool } from '../../src/pool/pool-client.js';
import { projectRoot } from '../../src/pool/worker-file.js';
import { createAssembler } from '../../src/request/assemble.js';
import { createSources } from '../../src/retrieval/sources.js';
import { startAdminServer } from '../../src/telemetry/admin-server.js';
import { assemblyMetricsInterceptor } from '../../src/telemetry/assembly-metrics.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { createMetrics } from '../../src/telemetry/metrics.js';
import type { AssembleContextRequestInput } from '../../src/wire/proto.js';
import { request } from '../e2e/harness.js';
import type { Fault } from '../fixtures/faulty-cpu-worker.js';
import { CLI, ROOT } from '../helpers/cli.js';
import { createTestClient, type TestClient } from '../helpers/grpc-client.js';

// ---------------------------------------------------------------------------------------------------
// Metrics

/** One `/metrics` scrape: `name{a="x",b="y"}` (labels sorted) → value. */
export class MetricsSnapshot {
  readonly #samples = new Map<string, { name: string; labels: Record<string, string>; value: number }>();

  constructor(text: string) {
    for (const line of text.split('\n')) {
      if (line === '' || line.startsWith('#')) continue;
      const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$/.exec(line);
      if (!m) continue;
      const labels: Record<string, string> = {};
      for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g))
        labels[l[1]!] = l[2]!;
      this.#samples.set(line.slice(0, line.lastIndexOf(' ')), { name: m[1]!, labels, value: Number(m[3]) });
    }
  }

  /** Sum of the samples of `name` whose labels include `match` (0 when there is none yet). */
  value(name: string, match: Record<string, string> = {}): number {
    let total = 0;
    for (const s of this.#samples.values()) {
      if (s.name !== name) continue;
      if (Object.entries(match).every(([k, v]) => s.labels[k] === v)) total += s.value;
    }
    return total;
  }
}

/** GET `<adminUrl>/metrics`, parsed. */
export async function scrape(adminUrl: string): Promise<MetricsSnapshot> {
  const res = await fetch(`${adminUrl}/metrics`);
  if (res.status !== 200) throw new Error(`/metrics answered ${res.status}`);
  return new MetricsSnapshot(await res.text());
}

/** How much counter `name{match}` grew between two scrapes. */
export function moved(
  before: MetricsSnapshot,
  after: MetricsSnapshot,
  name: string,
  match: Record<string, string> = {},
): number {
  return after.value(name, match) - before.value(name, match);
}

// ---------------------------------------------------------------------------------------------------
// Raw servers

/** A server listening on 127.0.0.1. */
export interface Listening {
  port: number;
  /** `http://127.0.0.1:<port>`. */
  url: string;
  close(): Promise<void>;
}

/** Listens on 127.0.0.1:0; `close()` drops open connections too. */
export async function listen(server: net.Server): Promise<Listening> {
  const sockets = new Set<net.Socket>();
  server.on('connection', (s: net.Socket) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as net.AddressInfo;
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/** Reads a request body (small: the memory-service requests are a few hundred bytes). */
export function readBody(req: http.IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

/**
 * Streams `total` bytes of JSON-ish filler (`{"data":{"results":["xxxx…`) with backpressure, so the
 * server side never holds more than a chunk: any memory growth seen by a test is the client's.
 * @param declareLength send `content-length` (the client can refuse on the header) or stream chunked.
 */
export function streamHugeBody(res: http.ServerResponse, total: number, declareLength: boolean): void {
  const headers: http.OutgoingHttpHeaders = { 'content-type': 'application/json' };
  if (declareLength) headers['content-length'] = total;
  res.writeHead(200, headers);
  const chunk = Buffer.alloc(64 * 1024, 'x');
  let sent = 0;
  const head = Buffer.from('{"data":{"results":["');
  res.write(head);
  sent += head.length;
  const pump = () => {
    while (sent < total && !res.destroyed) {
      const n = Math.min(chunk.length, total - sent);
      sent += n;
      if (!res.write(n === chunk.length ? chunk : chunk.subarray(0, n))) {
        res.once('drain', pump);
        return;
      }
    }
    if (!res.destroyed) res.end();
  };
  res.on('close', () => res.off('drain', pump));
  pump();
}

// ---------------------------------------------------------------------------------------------------
// Memory-service router

/** What the router does with a faulted agent's request. */
export type RouteFault =
  /** Forward to another memory server (e.g. a dev memory server with injected latency or errors). */
  | { upstream: string }
  /** Answer by hand; `body` is the request body ("" for GET). */
  | { handle: (req: http.IncomingMessage, res: http.ServerResponse, body: string) => void };

/** A memory-service front that faults chosen agents and forwards the rest to a healthy server. */
export interface MemoryRouter extends Listening {
  /** Faults `agentId`'s calls (both routes) from now on; `null` serves it normally again. */
  fault(agentId: string, fault: RouteFault | null): void;
}

function agentOf(req: http.IncomingMessage, body: string): string | null {
  const url = new URL(req.url ?? '/', 'http://router');
  const fromQuery = url.searchParams.get('agent_id');
  if (fromQuery) return fromQuery.toLowerCase();
  try {
    const parsed = JSON.parse(body) as { agent_id?: unknown };
    return typeof parsed.agent_id === 'string' ? parsed.agent_id.toLowerCase() : null;
  } catch {
    return null;
  }
}

/** Forwards one request to `upstream` and streams the answer back; a client hang-up aborts it. */
function forward(req: http.IncomingMessage, res: http.ServerResponse, body: string, upstream: string): void {
  const target = new URL(req.url ?? '/', upstream);
  const out = http.request(
    target,
    { method: req.method, headers: { ...req.headers, host: target.host }, agent: false },
    (up) => {
      res.writeHead(up.statusCode ?? 502, up.headers);
      up.pipe(res);
    },
  );
  out.on('error', () => res.destroy());
  res.on('close', () => out.destroy());
  out.end(body);
}

/**
 * Starts the router in front of `healthyUpstream` (a real dev memory server).
 */
export async function startMemoryRouter(healthyUpstream: string): Promise<MemoryRouter> {
  const faults = new Map<string, RouteFault>();
  const server = http.createServer({ keepAlive: true }, (req, res) => {
    readBody(req).then(
      (body) => {
        const agent = agentOf(req, body);
        const fault = agent === null ? undefined : faults.get(agent);
        if (fault === undefined) return forward(req, res, body, healthyUpstream);
        if ('upstream' in fault) return forward(req, res, body, fault.upstream);
        fault.handle(req, res, body);
      },
      () => res.destroy(),
    );
  });
  server.keepAliveTimeout = 30_000;
  const l = await listen(server);
  return {
    ...l,
    fault(agentId, fault) {
      if (fault === null) faults.delete(agentId.toLowerCase());
      else faults.set(agentId.toLowerCase(), fault);
    },
  };
}

// ---------------------------------------------------------------------------------------------------
// Fake Redis

/** How the fake Redis answers `GET key`. */
export type FakeGet =
  /** A bulk string (the stored value). */
  | { value: Buffer | string }
  /** `$-1`: no such key. */
  | { nil: true }
  /** Waits this long, then answers `answer` — and, like a real Redis, answers nothing else meanwhile. */
  | { stallMs: number; answer: FakeGet }
  /** Any raw bytes as the reply (a RESP error `-ERR …`, an integer `:5`, …). */
  | { raw: string };

/** A TCP server speaking the RESP subset node-redis needs: OK to the handshake, scripted GETs. */
export interface FakeRedis extends Listening {
  /** `redis://127.0.0.1:<port>`. */
  redisUrl: string;
  /** Sets the answer for `GET key`; keys without one answer `$-1`. */
  set(key: string, answer: FakeGet): void;
  /** GET commands received, in order. */
  readonly gets: string[];
}

/** Parses every complete RESP array of bulk strings at the start of `buf`; returns the rest. */
function parseCommands(buf: Buffer): { commands: string[][]; rest: Buffer } {
  const commands: string[][] = [];
  let at = 0;
  outer: while (at < buf.length) {
    if (buf[at] !== 0x2a /* '*' */) throw new Error('fake redis: expected an array');
    let eol = buf.indexOf('\r\n', at);
    if (eol < 0) break;
    const count = Number(buf.toString('latin1', at + 1, eol));
    let p = eol + 2;
    const args: string[] = [];
    for (let i = 0; i < count; i++) {
      eol = buf.indexOf('\r\n', p);
      if (eol < 0) break outer;
      const len = Number(buf.toString('latin1', p + 1, eol));
      if (buf.length < eol + 2 + len + 2) break outer;
      args.push(buf.toString('utf8', eol + 2, eol + 2 + len));
      p = eol + 2 + len + 2;
    }
    commands.push(args);
    at = p;
  }
  return { commands, rest: buf.subarray(at) };
}

function encodeGet(answer: FakeGet): Buffer | null {
  if ('nil' in answer) return Buffer.from('$-1\r\n');
  if ('raw' in answer) return Buffer.from(answer.raw, 'latin1');
  if ('value' in answer) {
    const v = typeof answer.value === 'string' ? Buffer.from(answer.value, 'utf8') : answer.value;
    return Buffer.concat([Buffer.from(`$${v.length}\r\n`), v, Buffer.from('\r\n')]);
  }
  return null;
}

/** Starts the fake Redis. Replies go out strictly in command order, as Redis does. */
export async function startFakeRedis(): Promise<FakeRedis> {
  const answers = new Map<string, FakeGet>();
  const gets: string[] = [];
  const server = net.createServer((socket) => {
    let pending: Buffer = Buffer.alloc(0);
    // One chain per connection keeps replies in order even while a GET stalls.
    let chain = Promise.resolve();
    socket.on('error', () => {});
    socket.on('data', (data: Buffer) => {
      let parsed: { commands: string[][]; rest: Buffer };
      try {
        parsed = parseCommands(Buffer.concat([pending, data]));
      } catch {
        socket.destroy();
        return;
      }
      pending = parsed.rest;
      for (const args of parsed.commands) {
        chain = chain.then(async () => {
          if (socket.destroyed) return;
          if (args[0]?.toUpperCase() !== 'GET') {
            socket.write('+OK\r\n');
            return;
          }
          gets.push(args[1] ?? '');
          let answer: FakeGet = answers.get(args[1] ?? '') ?? { nil: true };
          while ('stallMs' in answer) {
            await new Promise((r) => setTimeout(r, (answer as { stallMs: number }).stallMs));
            answer = answer.answer;
          }
          if (!socket.destroyed) socket.write(encodeGet(answer)!);
        });
      }
    });
  });
  const l = await listen(server);
  return {
    ...l,
    redisUrl: `redis://127.0.0.1:${l.port}`,
    set: (key, answer) => answers.set(key, answer),
    gets,
  };
}

// ---------------------------------------------------------------------------------------------------
// The service on the fault-injecting pool worker

/** The test-only worker (`test/fixtures/faulty-cpu-worker.ts`, compiled by `npm run build`). */
export const FAULTY_WORKER = path.join(projectRoot(), 'dist', 'test', 'fixtures', 'faulty-cpu-worker.js');

/**
 * Marker a request carries (as a recent message) to ask the worker for a fault: `FAULT:throw`, `FAULT:exit`,
 * `FAULT:heap`, `FAULT:sleep:300`.
 */
export const FAULT_PREFIX = 'FAULT:';

/**
 * A request of tenant `t` whose recent messages ask the fault worker for `fault` (`throw`, `exit`,
 * `sleep:300`), then ask the user's `question`.
 */
export function faultedRequest(
  t: { org: string; agent: string },
  fault: string,
  question = 'Do you remember the lake?',
): AssembleContextRequestInput {
  return request(t, {
    recent_messages: [
      { role: 'user', content: `${FAULT_PREFIX}${fault}` },
      { role: 'user', content: question },
    ],
  });
}

/** The fault a task's recent messages ask for, if any. */
export function faultOf(input: CpuTaskInput): Fault | null {
  for (const m of historyOf(input)) {
    if (!m.content.startsWith(FAULT_PREFIX)) continue;
    const [kind, arg] = m.content.slice(FAULT_PREFIX.length).split(':');
    if (kind === 'throw' || kind === 'exit' || kind === 'heap') return { fault: kind };
    if (kind === 'sleep') return { fault: 'sleep', sleepMs: Number(arg) };
  }
  return null;
}

/** A service whose pool runs the fault-injecting worker. */
export interface PoolFaultService {
  grpcAddr: string;
  adminUrl: string;
  pool: CpuPool;
  client: TestClient;
  settings: Settings;
  stop(): Promise<void>;
}

/**
 * The real pipeline (sources, assembler, gRPC server, metrics, admin endpoint) wired as `startService`
 * does, except that the pool runs {@link FAULTY_WORKER} and each task is tagged with the fault its
 * request asks for ({@link faultOf}). The service cannot be pointed at another worker through settings,
 * hence this wiring; everything else is the production code.
 */
export async function startPoolFaultService(env: Record<string, string>): Promise<PoolFaultService> {
  const settings = loadSettings({
    IBEX_CONTEXT_GRPC_ADDR: '127.0.0.1:0',
    IBEX_CONTEXT_ADMIN_ADDR: '127.0.0.1:0',
    IBEX_CONTEXT_TIMEOUT: '3000',
    IBEX_CONTEXT_DEADLINE_MS: '400',
    IBEX_CONTEXT_HOT_TIMEOUT_MS: '400',
    IBEX_CONTEXT_COLD_TIMEOUT_MS: '400',
    IBEX_CONTEXT_DIRECTIVE_TIMEOUT_MS: '400',
    IBEX_CONTEXT_LOG_LEVEL: 'silent',
    ...env,
  });
  const logger = createLogger(settings);
  const sources = await createSources(settings);
  const pool = await CpuPool.start(settings.pool, { filename: FAULTY_WORKER, onError: () => {} });
  const metrics = createMetrics(() => pool.stats());
  const tagging = {
    run(input: CpuTaskInput, opts?: Parameters<CpuPool['run']>[1]) {
      const fault = faultOf(input);
      return pool.run(fault ? Object.assign(input, fault) : input, opts);
    },
  } as unknown as CpuPool;
  const grpc = createGrpcServer({
    assemble: createAssembler({
      settings,
      catalog: CapabilityCatalog.load(settings.catalogFile),
      sources,
      pool: tagging,
      logger,
      metrics,
    }),
    logger,
    settings,
    interceptors: [assemblyMetricsInterceptor(metrics)],
  });
  const port = await grpc.bind(settings.grpcAddr);
  const admin = await startAdminServer(settings.adminAddr, metrics.registry, () => ({
    ready: true,
    draining: false,
    warnings: [],
  }));
  grpc.markServing();
  const grpcAddr = `127.0.0.1:${port}`;
  const client = createTestClient(grpcAddr);
  return {
    grpcAddr,
    adminUrl: admin.url,
    pool,
    client,
    settings,
    async stop() {
      client.close();
      await grpc.drain(1000);
      await admin.close();
      await pool.close();
      await sources.close();
      metrics.stop();
    },
  };
}

// ---------------------------------------------------------------------------------------------------
// `serve` as a child process

/** A running `ibex-context serve` child. */
export interface ServeChild {
  pid: number;
  grpcAddr: string;
  adminUrl: string;
  /** Everything it logged so far (pino JSON lines). */
  log(): string;
  /** Resolves with the exit code (null when killed by a signal). */
  exited: Promise<number | null>;
  kill(signal: NodeJS.Signals): void;
}

/**
 * Spawns the compiled `serve` (`dist/src/tools/cli/main.js`; `npm run build` first) on loopback port 0 and
 * resolves once it logs `ibex-context serving`.
 */
export async function spawnServe(env: Record<string, string>, startTimeoutMs = 20_000): Promise<ServeChild> {
  const child = spawn(process.execPath, [CLI, 'serve'], {
    cwd: ROOT,
    env: {
      ...process.env,
      IBEX_CONTEXT_GRPC_ADDR: '127.0.0.1:0',
      IBEX_CONTEXT_ADMIN_ADDR: '127.0.0.1:0',
      IBEX_CONTEXT_LOG_LEVEL: 'info',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let log = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => {
    log += d;
  });
  child.stderr.setEncoding('utf8').on('data', (d: string) => {
    log += d;
  });
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const started = await new Promise<{ grpc: string; admin: string }>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`serve did not start:\n${log}`));
    }, startTimeoutMs);
    const check = () => {
      const line = log.split('\n').find((l) => l.includes('ibex-context serving'));
      if (!line) return;
      clearTimeout(timer);
      child.stdout.off('data', check);
      const parsed = JSON.parse(line) as { grpc: string; admin: string };
      resolve({ grpc: parsed.grpc, admin: parsed.admin });
    };
    child.stdout.on('data', check);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`serve exited ${code}:\n${log}`));
    });
  });
  return {
    pid: child.pid!,
    grpcAddr: started.grpc,
    adminUrl: started.admin,
    log: () => log,
    exited,
    kill: (signal) => child.kill(signal),
  };
}

// ---------------------------------------------------------------------------------------------------
// Per-call outcomes of a load run

/** One call as the client saw it. Times are `performance.now()`, ms. */
export interface CallRecord {
  sentAt: number;
  /** 0 while unanswered. */
  doneAt: number;
  /** gRPC status code; -1 while unanswered. */
  code: number;
  details: string;
  /** `x-ibex-context-level` of the answer ("" when none). */
  level: string;
}

/**
 * Records every call of the channels it is given to: `runLoad` reports totals only, and some checks need
 * each call's send time and status. Pass `channelOptions` to `runLoad` (grpc-js takes client interceptors
 * from the client options).
 */
export function callTracker(): { records: CallRecord[]; channelOptions: ChannelOptions } {
  const records: CallRecord[] = [];
  const interceptor: Interceptor = (options, nextCall) => {
    const rec: CallRecord = { sentAt: performance.now(), doneAt: 0, code: -1, details: '', level: '' };
    records.push(rec);
    return new InterceptingCall(nextCall(options), {
      start(metadata, _listener, next) {
        next(metadata, {
          onReceiveMetadata(md, nextMetadata) {
            rec.level = String(md.get('x-ibex-context-level')[0] ?? '');
            nextMetadata(md);
          },
          onReceiveStatus(st, nextStatus) {
            rec.doneAt = performance.now();
            rec.code = st.code;
            rec.details = st.details;
            nextStatus(st);
          },
        });
      },
    });
  };
  return { records, channelOptions: { interceptors: [interceptor] } };
}
