/**
 * What the load-held benches (`bench:overload`, `bench:soak`; issue 6) share: a seeded embedded store of
 * a few agents × a few hundred memories and the requests that go with it, the service as a child process
 * (bench/lib/service-process.ts) with its RSS read from /proc, per-call outcomes seen by the client
 * (each call's status, who decided it and when, against the caller's deadline), and the saturation ramp.
 */
import { readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { type ChannelOptions, InterceptingCall, type Interceptor, status } from '@grpc/grpc-js';
import { build, type Histogram } from 'hdr-histogram-js';
import { statusName } from '../../src/client/cli-options.js';
import { type LoadReport, runLoad } from '../../src/client/load-driver.js';
import { cyclingSource, type RequestSource } from '../../src/client/request-source.js';
import { EmbeddedStore, type MemoryRow } from '../../src/retrieval/embedded-store.js';
import type { AssembleContextRequestInput } from '../../src/server/proto.js';
import { type ServiceProcess, startServiceProcess } from './service-process.js';
import { seededRandom } from './synthetic.js';

// ---------------------------------------------------------------------------------------------------
// Data

/** Shape of the generated data. */
export interface BenchDataOptions {
  seed?: number;
  orgs?: number;
  agentsPerOrg?: number;
  memoriesPerAgent?: number;
  /** Distinct requests, cycled by the driver. */
  requests?: number;
}

/** What was generated. */
export interface BenchData {
  agents: number;
  memories: number;
  requests: number;
  source: RequestSource;
  describe: string;
}

const WORDS = (
  'we planned the trip to the lake last summer and talked about sailing hiking camping with the kids ' +
  'budget deadline project meeting team launch release review design database migration backup ' +
  'birthday dinner recipe garden painting guitar concert marathon training doctor appointment school ' +
  'interview promotion volunteer shelter adoption family weekend morning evening coffee book movie ' +
  'music photo city beach mountain winter spring autumn friend sister brother mother father partner'
).split(' ');
const CATEGORIES = ['procedural', 'factual', 'preference', 'behavioral', 'episodic', 'notes'];
const MODELS = ['gpt-4o', 'gpt-4o-mini', 'claude-sonnet-4-5', 'claude-haiku-4-5'];

function uuid(rand: () => number): string {
  const h = Array.from({ length: 32 }, () => Math.floor(rand() * 16).toString(16));
  h[12] = '4';
  h[16] = (8 + Math.floor(rand() * 4)).toString(16);
  const s = h.join('');
  return `${s.slice(0, 8)}-${s.slice(8, 12)}-${s.slice(12, 16)}-${s.slice(16, 20)}-${s.slice(20)}`;
}

/**
 * Fills the embedded store `db` with `orgs × agentsPerOrg` agents of `memoriesPerAgent` memories each
 * (defaults 2 × 2 × 300: 20–80 words from a small vocabulary, so full-text search finds matches) plus a
 * directive per agent, and builds `requests` requests over those agents (query of 2–8 words, 0–4 turns of
 * history, models rotated). Same seed, same data.
 */
export function seedStore(db: string, opts: BenchDataOptions = {}): BenchData {
  const seed = opts.seed ?? 0x0fe1;
  const rand = seededRandom(seed);
  const between = (lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1));
  const words = (lo: number, hi: number) =>
    Array.from({ length: between(lo, hi) }, () => WORDS[Math.floor(rand() * WORDS.length)]!).join(' ');
  const perAgent = opts.memoriesPerAgent ?? 300;
  const tenants: { org: string; agent: string }[] = [];
  for (let o = 0; o < (opts.orgs ?? 2); o++) {
    const org = uuid(rand);
    for (let a = 0; a < (opts.agentsPerOrg ?? 2); a++) tenants.push({ org, agent: uuid(rand) });
  }
  const store = EmbeddedStore.open(db);
  try {
    for (const t of tenants) {
      const rows: MemoryRow[] = Array.from({ length: perAgent }, (_, i) => ({
        id: uuid(rand),
        org_id: t.org,
        agent_id: t.agent,
        content: `${words(20, 80)}.`,
        category: CATEGORIES[i % CATEGORIES.length]!,
        confidence: Math.round(rand() * 100) / 100,
        created_at: Date.UTC(2025, 0, 1) + i * 3_600_000,
      }));
      store.upsertMemories(rows);
      store.setDirective({
        org_id: t.org,
        agent_id: t.agent,
        content: `You are the assistant of agent ${t.agent.slice(0, 8)}. Answer briefly.`,
        injection_mode: 'system_first',
        version_id: uuid(rand),
      });
    }
  } finally {
    store.close();
  }
  const n = opts.requests ?? 1024;
  const requests: AssembleContextRequestInput[] = Array.from({ length: n }, (_, i) => {
    const t = tenants[Math.floor(rand() * tenants.length)]!;
    return {
      org_id: t.org,
      agent_id: t.agent,
      model: MODELS[i % MODELS.length]!,
      query: words(2, 8),
      recent_messages: Array.from({ length: between(0, 4) }, (_, k) => ({
        role: k % 2 === 0 ? 'user' : 'assistant',
        content: words(5, 30),
      })),
      request_id: `bench-${i}`,
    };
  });
  const describe = `synthetic(seed=${seed}, ${tenants.length} agents × ${perAgent} memories, ${n} requests)`;
  return {
    agents: tenants.length,
    memories: tenants.length * perAgent,
    requests: n,
    source: cyclingSource(describe, requests),
    describe,
  };
}

/** Seeds a store in `dir` and starts `serve` on it with production timings unless `env` says otherwise. */
export async function startBenchService(
  dir: string,
  env: Record<string, string> = {},
  data: BenchDataOptions = {},
): Promise<{ service: ServiceProcess; data: BenchData }> {
  const db = path.join(dir, 'bench.db');
  const seeded = seedStore(db, data);
  const service = await startServiceProcess({ db, env });
  return { service, data: seeded };
}

/** Request deadline the overload and soak benches run the service and the client with, ms. */
export const BENCH_DEADLINE_MS = 45;

/**
 * The common start of the overload and soak benches: prints the machine line, starts the service with the
 * production deadlines (45 ms request deadline, 40 ms wall) on generated data, and resolves the saturation
 * rate (`--rate` or a ramp). Stops the service again if the ramp fails.
 */
export async function startSaturatedBench(
  name: string,
  dir: string,
  opts: { rate?: number; connections: number },
): Promise<{
  service: ServiceProcess;
  data: BenchData;
  saturationRate: number;
  saturation: Awaited<ReturnType<typeof findSaturation>> | null;
}> {
  console.log(
    `bench:${name} — ${os.availableParallelism()} CPUs, load average ${os.loadavg()[0]!.toFixed(2)}`,
  );
  const { service, data } = await startBenchService(dir, {
    IBEX_CONTEXT_TIMEOUT: String(BENCH_DEADLINE_MS),
    IBEX_CONTEXT_DEADLINE_MS: '40',
  });
  try {
    console.log(`service pid ${service.pid} on ${service.grpcAddr}; data ${data.describe}`);
    const { rate, saturation } = await resolveSaturation(service.grpcAddr, data.source, {
      rate: opts.rate,
      connections: opts.connections,
      deadlineMs: BENCH_DEADLINE_MS,
    });
    return { service, data, saturationRate: rate, saturation };
  } catch (err) {
    await service.stop();
    throw err;
  }
}

// ---------------------------------------------------------------------------------------------------
// Process memory

/** VmRSS of `pid` in bytes (/proc/<pid>/status), or null where /proc is missing or the process is gone. */
export function rssBytes(pid: number): number | null {
  try {
    const m = /^VmRSS:\s+(\d+)\s+kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) * 1024 : null;
  } catch {
    return null;
  }
}

/** RSS of a process sampled every `intervalMs`: start, peak, end, MB. */
export function sampleRss(pid: number, intervalMs = 250) {
  const first = rssBytes(pid) ?? 0;
  let peak = first;
  let last = first;
  const timer = setInterval(() => {
    const v = rssBytes(pid);
    if (v === null) return;
    last = v;
    if (v > peak) peak = v;
  }, intervalMs);
  return {
    /** Stops sampling and reads the end value. */
    stop(): { start_mb: number; peak_mb: number; end_mb: number } {
      clearInterval(timer);
      const end = rssBytes(pid) ?? last;
      const mb = (b: number) => Math.round((b / 2 ** 20) * 10) / 10;
      return { start_mb: mb(first), peak_mb: mb(Math.max(peak, end)), end_mb: mb(end) };
    },
  };
}

// ---------------------------------------------------------------------------------------------------
// Per-call outcomes

/** Who decided a call's final status. */
export type Decider = 'ok' | 'service' | 'server_transport' | 'client' | 'connection';

/**
 * Classifies a final status. The service's own deadline answer carries `deadline exceeded` (errors.ts);
 * grpc-js's server timer `Deadline exceeded`; the client's own timer `Deadline exceeded after …`; a call
 * that never reached a server (refused, no connection) `UNAVAILABLE` with a connection detail.
 */
export function deciderOf(code: number, details: string): Decider {
  if (code === status.OK) return 'ok';
  if (code === status.DEADLINE_EXCEEDED) {
    if (details === 'deadline exceeded') return 'service';
    if (details.startsWith('Deadline exceeded after')) return 'client';
    return 'server_transport';
  }
  if (code === status.UNAVAILABLE && /No connection established|ECONNREFUSED|ECONNRESET/.test(details))
    return 'connection';
  if (code === status.CANCELLED) return 'client';
  return 'service';
}

/** Totals of a set of calls (one window, or the whole run). Latencies from the actual send, µs. */
export interface Tally {
  sent: number;
  /** Final statuses decided by the server (service or grpc-js server), any code. */
  answered: number;
  /** Server answers arriving within the caller's deadline + margin. */
  within: number;
  ok: number;
  levels: { L0: number; L1: number; L2: number; missing: number };
  errors: Record<string, number>;
  /** DEADLINE_EXCEEDED split by who decided it (and, for the service, whether it was on time). */
  deadline_exceeded: {
    service_before_deadline: number;
    service_late: number;
    server_transport: number;
    client_timeout: number;
  };
  hist: Histogram;
}

function newTally(): Tally {
  return {
    sent: 0,
    answered: 0,
    within: 0,
    ok: 0,
    levels: { L0: 0, L1: 0, L2: 0, missing: 0 },
    errors: {},
    deadline_exceeded: {
      service_before_deadline: 0,
      service_late: 0,
      server_transport: 0,
      client_timeout: 0,
    },
    hist: build({ lowestDiscernibleValue: 1, numberOfSignificantValueDigits: 3, autoResize: true }),
  };
}

/** Options of {@link outcomeTracker}. */
export interface TrackerOptions {
  /** The caller's deadline, ms (the client sets it at the actual send). */
  deadlineMs: number;
  /** Extra time an answer may take and still count as within the deadline, ms (default 2). */
  marginMs?: number;
  /** Width of the per-window tallies, ms (default 60000). */
  windowMs?: number;
}

/**
 * Records every call made on channels created with its `channelOptions` (grpc-js takes client
 * interceptors from the client options, so `runLoad` passes them through): one tally for the run and one
 * per window of `windowMs` by send time, window 0 starting at the first send after `reset()`.
 */
export function outcomeTracker(opts: TrackerOptions) {
  const margin = opts.marginMs ?? 2;
  const windowMs = opts.windowMs ?? 60_000;
  /** Start of window 0: the first send after a reset (connecting the channels is not part of it). */
  let t0 = Number.NaN;
  let total = newTally();
  let windows: Tally[] = [];
  let recording = true;

  const record = (sentAt: number, doneAt: number, code: number, details: string, level: string) => {
    if (!recording) return;
    const w = Math.max(0, Math.floor((sentAt - t0) / windowMs));
    while (windows.length <= w) windows.push(newTally());
    const latencyMs = doneAt - sentAt;
    const decider = deciderOf(code, details);
    for (const t of [total, windows[w]!]) {
      if (decider === 'service' || decider === 'server_transport' || decider === 'ok') {
        t.answered++;
        if (latencyMs <= opts.deadlineMs + margin) t.within++;
        t.hist.recordValue(Math.max(1, Math.round(latencyMs * 1000)));
      }
      if (code === status.OK) {
        t.ok++;
        if (level === 'L0' || level === 'L1' || level === 'L2') t.levels[level]++;
        else t.levels.missing++;
        continue;
      }
      const name = statusName(code);
      t.errors[name] = (t.errors[name] ?? 0) + 1;
      if (code === status.DEADLINE_EXCEEDED) {
        const d = t.deadline_exceeded;
        if (decider === 'service') {
          if (latencyMs <= opts.deadlineMs + margin) d.service_before_deadline++;
          else d.service_late++;
        } else if (decider === 'client') d.client_timeout++;
        else d.server_transport++;
      }
    }
  };

  const interceptor: Interceptor = (options, nextCall) => {
    const sentAt = performance.now();
    if (Number.isNaN(t0)) t0 = sentAt;
    if (recording) {
      const w = Math.max(0, Math.floor((sentAt - t0) / windowMs));
      while (windows.length <= w) windows.push(newTally());
      total.sent++;
      windows[w]!.sent++;
    }
    let level = '';
    return new InterceptingCall(nextCall(options), {
      start(metadata, _listener, next) {
        next(metadata, {
          onReceiveMetadata(md, nextMetadata) {
            level = String(md.get('x-ibex-context-level')[0] ?? '');
            nextMetadata(md);
          },
          onReceiveStatus(st, nextStatus) {
            record(sentAt, performance.now(), st.code, st.details, level);
            nextStatus(st);
          },
        });
      },
    });
  };

  return {
    channelOptions: { interceptors: [interceptor] } as ChannelOptions,
    /** Starts afresh (drops what was recorded) and restarts the windows' clock. */
    reset() {
      total = newTally();
      windows = [];
      t0 = Number.NaN;
      recording = true;
    },
    /** Stops recording (calls still in flight are not counted). */
    pause() {
      recording = false;
    },
    get total() {
      return total;
    },
    get windows() {
      return windows;
    },
  };
}

export type OutcomeTracker = ReturnType<typeof outcomeTracker>;

const round3 = (x: number) => Math.round(x * 1000) / 1000;

/** Latency percentiles of a tally, ms. */
export function latencyOf(t: Tally) {
  const at = (p: number) => round3(t.hist.getValueAtPercentile(p) / 1000);
  return {
    p50: at(50),
    p99: at(99),
    p99_9: at(99.9),
    max: round3(t.hist.maxValue / 1000),
  };
}

/** A tally as written to the results (no histogram). */
export function tallyJson(t: Tally) {
  const { hist: _hist, ...rest } = t;
  return { ...rest, latency_ms: t.answered > 0 ? latencyOf(t) : null };
}

// ---------------------------------------------------------------------------------------------------
// Saturation

/** One ramp step. */
export interface RampStep {
  rate: number;
  achieved_rps: number;
  /** From the intended send time (runLoad, coordinated omission corrected). */
  p99_ms: number;
  errors: number;
  degraded_share: number;
  clean: boolean;
  driver_limited: boolean;
}

/** Options of {@link findSaturation}. */
export interface RampOptions {
  /** First rate, rps (default 50). */
  start?: number;
  /** Factor between steps (default 1.5). */
  factor?: number;
  /** Highest rate tried (default 50000). */
  max?: number;
  /** Seconds per step, after 1 s of unrecorded warm-up (default 3). */
  stepSeconds?: number;
  connections: number;
  deadlineMs: number;
  /** Degraded share above which a step is not clean (default 0.005). */
  maxDegradedShare?: number;
  /** Error share (any non-OK status) above which a step is not clean (default 0.001). */
  maxErrorShare?: number;
  log?: (line: string) => void;
}

function stepOf(
  rate: number,
  r: LoadReport,
  deadlineMs: number,
  maxDegraded: number,
  maxErrors: number,
): RampStep {
  const answered = r.requests.ok;
  const degraded = r.requests.degraded.L1 + r.requests.degraded.L2;
  const degradedShare = answered > 0 ? degraded / answered : 1;
  const errors = r.requests.error_total + r.requests.unfinished;
  return {
    rate,
    achieved_rps: r.throughput_rps,
    p99_ms: r.latency_ms.p99,
    errors,
    degraded_share: round3(degradedShare),
    clean:
      errors <= maxErrors * r.requests.sent &&
      r.latency_ms.p99 <= deadlineMs &&
      degradedShare <= maxDegraded &&
      r.throughput_rps >= 0.95 * rate,
    driver_limited: r.warnings.some((w) => w.includes('could not keep its own schedule')),
  };
}

/**
 * The saturation rate: the highest open-loop rate answered in full — at most `maxErrorShare` errors and
 * `maxDegradedShare` degraded answers, p99 (from the intended send time) within the deadline, throughput
 * keeping up. Geometric steps until one is not clean (twice in a row), then two bisections between the
 * last clean rate and it.
 */
export async function findSaturation(addr: string, source: RequestSource, opts: RampOptions) {
  const factor = opts.factor ?? 1.5;
  const maxDegraded = opts.maxDegradedShare ?? 0.005;
  const maxErrors = opts.maxErrorShare ?? 0.001;
  const steps: RampStep[] = [];
  const step = async (rate: number) => {
    const r = await runLoad({
      addr,
      rate,
      durationS: opts.stepSeconds ?? 3,
      warmupS: 1,
      connections: opts.connections,
      timeoutMs: opts.deadlineMs,
      source,
    });
    const s = stepOf(rate, r, opts.deadlineMs, maxDegraded, maxErrors);
    steps.push(s);
    opts.log?.(
      `  ramp ${String(rate).padStart(6)} rps: achieved ${Math.round(s.achieved_rps)}, p99 ${s.p99_ms} ms, ` +
        `errors ${s.errors}, degraded ${(s.degraded_share * 100).toFixed(2)} % → ${s.clean ? 'clean' : 'not clean'}` +
        (s.driver_limited ? ' (driver behind schedule)' : ''),
    );
    // Let a backlog drain before the next step.
    await new Promise((r) => setTimeout(r, 500));
    return s.clean;
  };
  // A step that is not clean is run once more: one stall of a shared machine should not end the ramp.
  const clean = async (rate: number) => (await step(rate)) || (await step(rate));
  let good = 0;
  let bad = 0;
  for (let rate = opts.start ?? 50; rate <= (opts.max ?? 50_000); rate = Math.round(rate * factor)) {
    if (await clean(rate)) good = rate;
    else {
      bad = rate;
      break;
    }
  }
  if (good > 0 && bad > 0) {
    for (let i = 0; i < 2; i++) {
      const mid = Math.round((good + bad) / 2);
      if (mid === good || mid === bad) break;
      if (await clean(mid)) good = mid;
      else bad = mid;
    }
  }
  return { rate: good, first_unclean_rate: bad || null, steps };
}

// ---------------------------------------------------------------------------------------------------
// Flags and output

/** `--name value` flags of a bench (numbers only). @throws Error for an unknown or non-numeric flag. */
/**
 * The saturation rate a bench runs against: `--rate` when given, else found by a ramp (logged).
 * @returns the rate (req/s) and the ramp record (null when `--rate` was given).
 * @throws Error when not even the first ramp step is clean.
 */
export async function resolveSaturation(
  addr: string,
  source: RequestSource,
  opts: { rate?: number; connections: number; deadlineMs: number },
): Promise<{ rate: number; saturation: Awaited<ReturnType<typeof findSaturation>> | null }> {
  if (opts.rate) return { rate: opts.rate, saturation: null };
  console.log('finding the saturation rate (ramp):');
  const saturation = await findSaturation(addr, source, {
    connections: opts.connections,
    deadlineMs: opts.deadlineMs,
    log: (l) => console.log(l),
  });
  if (saturation.rate === 0) {
    throw new Error('not even the first ramp step was clean (a busy machine?); pass --rate <saturation rps>');
  }
  return { rate: saturation.rate, saturation };
}

export function numberFlags(argv: readonly string[], known: readonly string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!;
    const name = flag.replace(/^--/, '');
    if (!flag.startsWith('--') || !known.includes(name)) {
      throw new Error(`unknown argument ${flag}; known: ${known.map((k) => `--${k}`).join(' ')}`);
    }
    const value = Number(argv[++i]);
    if (!Number.isFinite(value) || value <= 0) throw new Error(`${flag} needs a positive number`);
    out[name] = value;
  }
  return out;
}

/** Prints rows as an aligned text table. */
export function printTable(rows: readonly (readonly [string, string | number])[]): void {
  const width = Math.max(...rows.map(([k]) => k.length));
  for (const [k, v] of rows) console.log(`  ${k.padEnd(width)}  ${v}`);
}
