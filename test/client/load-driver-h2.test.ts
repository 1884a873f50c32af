/**
 * The raw HTTP/2 side of `ibex-context load` (issue 10) against a real gRPC server on 127.0.0.1 whose
 * pipeline is a test double: the response-byte walker, the budget mix (probe, seeded twins, counts of
 * constrained calls and packer choices), `--verify`, the grpc-js transport counting the same, and
 * `replay` pacing and retries.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ServerCredentials } from '@grpc/grpc-js';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import {
  agentKey,
  budgetMix,
  FIT_HIGH,
  FIT_LOW,
  mixedSource,
  probeCandidateTokens,
} from '../../src/client/budget-mix.js';
import { ASSEMBLE_METHOD } from '../../src/client/context-client.js';
import { runLoad } from '../../src/client/load-driver.js';
import { summarizeResponse } from '../../src/client/raw-grpc.js';
import { runReplay } from '../../src/client/replay.js';
import { cyclingSource } from '../../src/client/request-source.js';
import { Errors } from '../../src/errors.js';
import { type AssembleResult, createGrpcServer, type GrpcServer } from '../../src/server/grpc-server.js';
import type {
  AssembleContextRequestInput,
  AssembleContextResponse,
  DegradationLevel,
} from '../../src/server/proto.js';
import type { ValidatedRequest } from '../../src/server/validate.js';
import { createLogger } from '../../src/telemetry/logger.js';

const ORG = '0b8f8c1e-6a5e-4c3b-9d7e-1f2a3b4c5d6e';
const AGENTS = ['a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d', 'b1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5e'];
/** Candidates per answer and their token estimates: agent 0 has 4 × 100, agent 1 has 4 × 250. */
const CANDIDATE_TOKENS = [100, 250];

function metrics() {
  return {
    budget_calculation_ms: 0,
    directive_load_ms: 0,
    hot_memory_retrieval_ms: 0,
    cold_memory_retrieval_ms: 0,
    ranking_ms: 0,
    packing_ms: 0,
    formatting_ms: 0,
    total_ms: 1,
    candidates_evaluated: 4,
    pool_wait_us: 0,
    pool_run_us: 0,
  };
}

/** A packer stand-in: candidates in order while they fit `availableTokens` (0 = all fit). */
function answer(req: ValidatedRequest, level: DegradationLevel, bodyLevel = level): AssembleResult {
  const each = CANDIDATE_TOKENS[AGENTS.indexOf(req.agentId)] ?? 100;
  let room = req.availableTokens > 0 ? req.availableTokens : Number.POSITIVE_INFINITY;
  const rows = [0, 1, 2, 3].map((i) => {
    const fits = each <= room;
    if (fits) room -= each;
    return {
      memory_id: `m${i}`,
      composite_score: 0.5,
      relevance_score: 0.5,
      recency_score: 0,
      usefulness_score: 0,
      rank: i + 1,
      category: 'fact',
      exclusion: fits ? ('included' as const) : ('budget' as const),
      similarity: 0.5,
      confidence: 1,
      token_estimate: each,
    };
  });
  const included = rows.filter((r) => r.exclusion === 'included').length;
  const response: AssembleContextResponse = {
    // The walker must not be fooled by the word in the text.
    assembled_context: `budget budget user: ${req.query}`,
    tokens_used: 3 + included * each,
    memories_included: included,
    memories_used: rows,
    directive_tokens: 0,
    history_tokens: 3,
    memory_tokens: included * each,
    metrics: metrics(),
    request_id: req.requestId,
    trace_id: req.traceId,
    span_id: req.spanId,
    score_schema: 'interim_v1',
    degradation: { level: bodyLevel, intentional: false, reasons: [], branches: [] },
  };
  return { response, level };
}

interface Tally {
  calls: number;
  constrained: number;
  budgetAnswers: number;
  available: { agent: string; tokens: number }[];
}

const servers: GrpcServer[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.drain(500)));
});

async function startFake(
  b: { l1Every?: number; lieEvery?: number; deadlineFirstOf?: number; bare?: boolean } = {},
): Promise<{ addr: string; tally: Tally }> {
  const tally: Tally = { calls: 0, constrained: 0, budgetAnswers: 0, available: [] };
  const seenQueries = new Map<string, number>();
  const assemble = async (req: ValidatedRequest): Promise<AssembleResult> => {
    const n = ++tally.calls;
    const attempt = (seenQueries.get(req.query) ?? 0) + 1;
    seenQueries.set(req.query, attempt);
    // Every n-th distinct query misses the deadline on its first attempt: an overloaded server.
    if (b.deadlineFirstOf && attempt === 1 && Number(req.query.slice(1)) % b.deadlineFirstOf === 0) {
      throw Errors.deadlineExceeded();
    }
    if (req.availableTokens > 0) {
      tally.constrained++;
      tally.available.push({ agent: req.agentId, tokens: req.availableTokens });
    }
    const level: DegradationLevel = b.l1Every && n % b.l1Every === 0 ? 'L1' : 'L0';
    const result = answer(req, level, b.lieEvery && n % b.lieEvery === 0 ? 'L2' : level);
    // Replay checks memory blocks against memories_used: a bare answer has neither.
    if (b.bare) Object.assign(result.response, { memories_used: [], memories_included: 0, memory_tokens: 0 });
    if (result.response.memories_used.some((r) => r.exclusion === 'budget')) tally.budgetAnswers++;
    return result;
  };
  const grpc = createGrpcServer({
    assemble,
    logger: createLogger({ logLevel: 'silent' }),
    settings: { timeoutMs: 10_000, maxReceiveMessageBytes: 4 * 1024 * 1024, maxMetadataBytes: 16 * 1024 },
  });
  const port = await grpc.bind('127.0.0.1:0');
  grpc.markServing();
  servers.push(grpc);
  return { addr: `127.0.0.1:${port}`, tally };
}

function requests(n: number): AssembleContextRequestInput[] {
  return Array.from({ length: n }, (_, i) => ({
    org_id: ORG,
    agent_id: AGENTS[i % AGENTS.length]!,
    query: `q${i}`,
    model: 'gpt-4o',
  }));
}

describe('summarizeResponse', () => {
  it('reads memory_tokens, candidates, budget exclusions and level exactly as protobuf wrote them', () => {
    const exclusion = fc.constantFrom('included', 'budget', 'filter', 'truncated', 'budgets', '');
    fc.assert(
      fc.property(
        fc.array(fc.record({ exclusion, tokens: fc.nat(5000) }), { maxLength: 40 }),
        fc.nat(100_000),
        fc.constantFrom('L0', 'L1', 'L2', ''),
        fc.string(),
        (rows, memoryTokens, level, text) => {
          const res = answer(
            { agentId: AGENTS[0], availableTokens: 0, query: text } as unknown as ValidatedRequest,
            'L0',
          ).response;
          res.memories_used = rows.map((r, i) => ({
            ...res.memories_used[0]!,
            memory_id: `budget${i}`,
            // Wire strings, including ones the server never sends ('budgets', ''): the walker must not
            // mistake them for `budget`.
            exclusion: r.exclusion as never,
            token_estimate: r.tokens,
          }));
          res.memory_tokens = memoryTokens;
          res.degradation = (
            level === '' ? null : { level, intentional: false, reasons: ['budget'], branches: [] }
          ) as never;
          const bytes = ASSEMBLE_METHOD.responseSerialize(res) as Buffer;
          expect(summarizeResponse(bytes)).toEqual({
            memoryTokens,
            candidateTokens: rows.reduce((s, r) => s + r.tokens, 0),
            candidates: rows.length,
            budgetExcluded: rows.filter((r) => r.exclusion === 'budget').length,
            level,
          });
        },
      ),
      { numRuns: 200 },
    );
  });
});

describe('the budget mix against a real server', () => {
  it('probes candidates per agent, constrains the seeded share to 30–80 % of them, and counts packer choices exactly', async () => {
    const fake = await startFake({ l1Every: 7 });
    const list = requests(64);
    const tokens = await probeCandidateTokens({ addr: fake.addr }, list);
    expect(Object.fromEntries(tokens)).toEqual({
      [agentKey(list[0]!)]: 400,
      [agentKey(list[1]!)]: 1000,
    });
    expect(fake.tally.calls).toBe(6); // 3 probes per agent
    const probeCalls = fake.tally.calls;
    const source = mixedSource(cyclingSource('mix', list), budgetMix(tokens, { share: 0.5, seed: 7 }), 0.5);
    const report = await runLoad({ addr: fake.addr, connections: 2, rate: 200, durationS: 1.5, source });
    expect(report.requests.sent).toBe(300);
    expect(report.requests.ok).toBe(300);
    expect(fake.tally.calls - probeCalls).toBe(300);
    expect(report.packing.constrained_sent).toBe(fake.tally.constrained);
    expect(report.packing.constrained_share).toBeGreaterThan(0.38);
    expect(report.packing.constrained_share).toBeLessThan(0.62);
    // Any fit in [0.3, 0.8) of 4 equal candidates excludes at least one of them.
    expect(report.packing.budget_choice).toBe(fake.tally.constrained);
    expect(report.packing.budget_choice).toBe(fake.tally.budgetAnswers);
    expect(report.packing.unreadable).toBe(0);
    expect(report.requests.levels.L1).toBeGreaterThan(0);
    for (const a of fake.tally.available) {
      const all = a.agent === AGENTS[0] ? 400 : 1000;
      expect(a.tokens).toBeGreaterThanOrEqual(Math.floor(all * FIT_LOW));
      expect(a.tokens).toBeLessThan(all * FIT_HIGH);
    }
  });

  it('the same seed draws the same twins; no candidates at all is an error, not a silent 0 % mix', () => {
    const list = requests(10);
    const tokens = new Map([[agentKey(list[0]!), 400]]);
    const draw = () => {
      const mix = budgetMix(tokens, { share: 1, seed: 3 });
      return list.map((r) => mix.apply(r).available_tokens);
    };
    expect(draw()).toEqual(draw());
    expect(() => budgetMix(new Map(), { share: 0.5 })).toThrow(/no agent has candidates/);
    expect(() => budgetMix(tokens, { share: 1.5 })).toThrow(RangeError);
  });
});

describe('transports and --verify', () => {
  it('grpc-js and h2 transports count levels and packer choices the same against the same server', async () => {
    const fake = await startFake({ l1Every: 5 });
    const list = requests(20).map((r, i) => (i % 2 === 0 ? { ...r, available_tokens: 150 } : r));
    for (const transport of ['h2', 'grpc-js'] as const) {
      const before = { ...fake.tally, calls: fake.tally.calls };
      const report = await runLoad({
        addr: fake.addr,
        connections: 2,
        rate: 100,
        durationS: 1,
        transport,
        source: cyclingSource('t', list),
      });
      expect(report.transport).toBe(transport);
      expect(report.requests.ok).toBe(100);
      expect(report.requests.levels.L1).toBe(Math.floor(fake.tally.calls / 5) - Math.floor(before.calls / 5));
      expect(report.packing.constrained_sent).toBe(50);
      expect(report.packing.budget_choice).toBe(50);
    }
  });

  it('--verify flags answers whose body level disagrees with the level header', async () => {
    const fake = await startFake({ lieEvery: 4 });
    const source = cyclingSource('v', requests(8));
    const plain = await runLoad({ addr: fake.addr, connections: 1, rate: 100, durationS: 0.4, source });
    expect(plain.requests.ok).toBe(40);
    expect(plain.packing.unreadable).toBe(0);
    const verified = await runLoad({
      addr: fake.addr,
      connections: 1,
      rate: 100,
      durationS: 0.4,
      source,
      verify: true,
    });
    expect(verified.requests.ok).toBe(40);
    expect(verified.packing.unreadable).toBe(10);
    expect(verified.warnings.some((w) => w.includes('failed --verify'))).toBe(true);
  });
});

describe('replay pacing', () => {
  const conversation = {
    sampleId: 'x',
    agentId: AGENTS[0]!,
    sessions: [1, 2, 3].map((s) => ({
      dateTime: '1:56 pm on 8 May, 2023',
      turns: Array.from({ length: 10 }, (_, i) => ({
        speaker: 'Ann',
        diaId: `D${s}:${i}`,
        text: `q${s * 100 + i}`,
      })),
    })),
  };

  it('paces calls at -R, retries overload statuses and exits clean when the retry succeeds', async () => {
    const fake = await startFake({ deadlineFirstOf: 5, bare: true });
    const started = performance.now();
    const report = await runReplay({
      addr: fake.addr,
      conversations: [conversation] as never,
      rate: 40,
      concurrency: 8,
      retries: 2,
      limit: 20,
      skipFraction: 1 / 3,
    });
    // 20 calls at 40/s: the last is due at 475 ms.
    expect(performance.now() - started).toBeGreaterThanOrEqual(470);
    expect(report.rate).toBe(40);
    expect(report.calls).toBe(20);
    expect(report.ok).toBe(20);
    expect(report.errors).toEqual({});
    // Queries q200…q209 and q300…q309: q200, q205, q300, q305 miss their first deadline.
    expect(report.retried).toEqual({ DEADLINE_EXCEEDED: 4 });
    expect(report.invariant_violations).toBe(0);
  });

  it('counts the last status when retries run out', async () => {
    const fake = await startFake({ deadlineFirstOf: 5, bare: true });
    const report = await runReplay({
      addr: fake.addr,
      conversations: [conversation] as never,
      rate: 100,
      retries: 0,
      limit: 20,
    });
    expect(report.errors).toEqual({ DEADLINE_EXCEEDED: 4 });
    expect(report.retried).toEqual({});
  });
});

describe('the driver side of the deadline', () => {
  it('ends calls to a server that never answers as DEADLINE_EXCEEDED, worded like the client timer', async () => {
    // A bare HTTP/2 server that accepts every stream and never answers: only the driver can end them.
    const http2 = await import('node:http2');
    const silent = http2.createServer();
    const held: unknown[] = [];
    silent.on('stream', (stream) => held.push(stream));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const port = (silent.address() as { port: number }).port;
    try {
      const report = await runLoad({
        addr: `127.0.0.1:${port}`,
        connections: 1,
        rate: 20,
        durationS: 0.5,
        timeoutMs: 150,
        source: cyclingSource('silent', requests(2)),
      });
      expect(report.requests.sent).toBe(10);
      expect(report.requests.errors).toEqual({ DEADLINE_EXCEEDED: 10 });
      expect(report.requests.error_details.DEADLINE_EXCEEDED).toEqual([
        'Deadline exceeded after 150 ms (driver)',
      ]);
      expect(report.requests.unfinished).toBe(0);
      expect(held).toHaveLength(10);
      expect(report.latency_ms.min).toBeGreaterThanOrEqual(150);
    } finally {
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });
});

describe('ibex-context load --constrained (compiled CLI)', () => {
  it('probes, mixes and reports the constrained share and packer choices in --json', async () => {
    const { runCli } = await import('../helpers/cli.js');
    const fake = await startFake();
    // The synthetic source's agents are not the double's two: it gives them 4 candidates × 100 tokens.
    const res = await runCli([
      'load',
      '--addr',
      fake.addr,
      '-c',
      '2',
      '-d',
      '1',
      '-R',
      '100',
      '--constrained',
      '1',
      '--json',
    ]);
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    const report = JSON.parse(res.stdout) as { packing: Record<string, number>; requests: { ok: number } };
    expect(report.requests.ok).toBe(100);
    expect(report.packing.constrained_sent).toBe(100);
    expect(report.packing.budget_choice).toBe(100);
    const bad = await runCli(['load', '--addr', fake.addr, '--constrained', '2']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--constrained must be a number in 0..1');
  });
});

function hasOpenssl(): boolean {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}
const OPENSSL = hasOpenssl();
if (!OPENSSL)
  console.warn('NOTICE: openssl not found; the load driver TLS test is skipped (install openssl)');

describe.skipIf(!OPENSSL)('the h2 driver over TLS (certificates made with openssl at test time)', () => {
  it('connects with --tls-ca semantics, sends the token, and refuses a server it cannot verify', async () => {
    const pki = mkdtempSync(path.join(tmpdir(), 'ibex-load-tls-'));
    try {
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
      const seenAuth = new Set<string>();
      const grpc = createGrpcServer({
        assemble: async (req, ctx) => {
          for (const v of ctx.metadata.get('authorization')) seenAuth.add(String(v));
          return answer(req, 'L0');
        },
        logger: createLogger({ logLevel: 'silent' }),
        settings: { timeoutMs: 10_000, maxReceiveMessageBytes: 4 * 1024 * 1024, maxMetadataBytes: 16 * 1024 },
      });
      const creds = ServerCredentials.createSsl(null, [
        {
          private_key: readFileSync(path.join(pki, 'server.key')),
          cert_chain: readFileSync(path.join(pki, 'server.crt')),
        },
      ]);
      const port = await grpc.bind('127.0.0.1:0', creds);
      grpc.markServing();
      servers.push(grpc);
      const addr = `127.0.0.1:${port}`;
      const report = await runLoad({
        addr,
        tls: { ca: readFileSync(path.join(pki, 'ca.crt')) },
        token: 'tls-s3cret',
        connections: 2,
        rate: 50,
        durationS: 0.4,
        source: cyclingSource('tls', requests(4)),
      });
      expect(report.requests.ok).toBe(20);
      expect([...seenAuth]).toEqual(['Bearer tls-s3cret']);
      expect(JSON.stringify(report)).not.toContain('tls-s3cret');
      // The system roots do not know the test CA: the connection is refused before any call.
      await expect(
        runLoad({ addr, tls: true, connections: 1, rate: 10, durationS: 0.2, connectTimeoutMs: 2000 }),
      ).rejects.toThrow(/cannot connect to 127\.0\.0\.1:\d+/);
    } finally {
      rmSync(pki, { recursive: true, force: true });
    }
  });
});
