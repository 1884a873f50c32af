import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { ServerCredentials } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { responseReserve } from '../../../src/budget/budget-calculator.js';
import { CapabilityCatalog } from '../../../src/budget/catalog.js';
import { type AssembleResult, createGrpcServer, type GrpcServer } from '../../../src/grpc/grpc-server.js';
import type { ValidatedRequest } from '../../../src/request/validate.js';
import { createLogger } from '../../../src/telemetry/logger.js';
import { estimateTokens } from '../../../src/text/estimate.js';
import { locomoRequests } from '../../../src/tools/client/locomo-requests.js';
import { type ReplayReport, runReplay } from '../../../src/tools/client/replay.js';
import { checkResponse, memoryBlockIds } from '../../../src/tools/client/response-checks.js';
import { LOCOMO_ORG_ID, locomoAgentId, readLocomo } from '../../../src/tools/locomo/dataset.js';
import { Errors } from '../../../src/wire/errors.js';
import type { AssembleContextResponse, DegradationLevel, MemoryUsed } from '../../../src/wire/proto.js';
import { servers, startAssembleServer } from '../../helpers/assemble-server.js';
import { assembleArgs, runCli } from '../../helpers/cli.js';
import { hasOpenssl, makeServerPki } from '../../helpers/pki.js';
import { usedRow } from '../../helpers/stub-response.js';

const catalog = CapabilityCatalog.create();
const NONCE = 'AAAAAAAAAAAAAAAAAAAAAA';

function used(id: string, exclusion: MemoryUsed['exclusion'] = 'included'): MemoryUsed {
  return usedRow({ memory_id: id, exclusion });
}

function block(id: string, content: string): string {
  return `<ibex_memory nonce="${NONCE}" id="${id}" category="episodic">\n${content}\n</ibex_memory>`;
}

interface Shape {
  context: string;
  memories: MemoryUsed[];
  included?: number;
  level?: DegradationLevel | '';
}

function response(shape: Shape): AssembleContextResponse {
  return {
    assembled_context: shape.context,
    tokens_used: 10,
    memories_included: shape.included ?? shape.memories.filter((m) => m.exclusion === 'included').length,
    memories_used: shape.memories,
    directive_tokens: 0,
    history_tokens: 5,
    memory_tokens: 5,
    metrics: {
      budget_calculation_ms: 0,
      directive_load_ms: 0,
      hot_memory_retrieval_ms: 1,
      cold_memory_retrieval_ms: 1,
      ranking_ms: 0,
      packing_ms: 0,
      formatting_ms: 0,
      total_ms: 2,
      candidates_evaluated: shape.memories.length,
      pool_wait_us: 10,
      pool_run_us: 20,
    },
    request_id: '',
    trace_id: '',
    span_id: '',
    score_schema: 'interim_v1',
    degradation: {
      level: (shape.level ?? 'L0') as DegradationLevel,
      intentional: false,
      reasons: [],
      branches: [{ name: 'hot', status: 'success', latency_ms: 1.25, detail: '' }],
    },
  };
}

describe('checkResponse', () => {
  const ID1 = '11111111-1111-4111-8111-111111111111';
  const ID2 = '22222222-2222-4222-8222-222222222222';

  it('accepts a well-formed answer and finds its memory blocks', () => {
    const res = response({
      context: `Ann: hi\n\n${block(ID1, 'a &lt;b&gt;')}\n${block(ID2, 'c')}`,
      memories: [used(ID1), used(ID2), used('33333333-3333-4333-8333-333333333333', 'budget')],
    });
    const check = checkResponse(catalog, 'gpt-4o', res, 'L0');
    expect(check.violations).toEqual([]);
    expect(check.blockIds).toEqual([ID1, ID2]);
    expect(check.budgetChecked).toBe(true);
    expect(check.limitTokens).toBe(128_000 - responseReserve(128_000, 16_384) - Math.trunc(128_000 * 0.02));
  });

  it('flags each broken rule by kind', () => {
    const res = response({
      context: block(ID1, 'x'),
      memories: [used(ID2), used(ID1, 'budget')],
      included: 1,
      level: '',
    });
    const kinds = checkResponse(catalog, 'gpt-4o', res).violations.map((v) => v.kind);
    expect(kinds).toEqual(['memory_ids', 'level']);
    const count = checkResponse(
      catalog,
      'gpt-4o',
      response({ context: '', memories: [used(ID1)], included: 0 }),
    );
    expect(count.violations.map((v) => v.kind)).toEqual(['included_count']);
    const header = checkResponse(catalog, 'gpt-4o', response({ context: '', memories: [] }), 'L2');
    expect(header.violations).toEqual([{ kind: 'level', detail: 'header level L2 ≠ degradation.level L0' }]);
    expect(checkResponse(catalog, 'nope', response({ context: '', memories: [] })).violations[0]?.kind).toBe(
      'unknown_model',
    );
  });

  it('checks estimate(context) ≤ window − reserve − safety, unless the fixed parts alone exceed it', () => {
    // gpt-3.5-turbo: 16385 − 2457 − 327 = 13601 tokens of chars_div_4.
    const limit = 16_385 - 2457 - 327;
    const over = response({ context: `q\n\n${block(ID1, 'x'.repeat(4 * limit))}`, memories: [used(ID1)] });
    const check = checkResponse(catalog, 'gpt-3.5-turbo', over);
    expect(check.limitTokens).toBe(limit);
    expect(check.contextTokens).toBe(estimateTokens(over.assembled_context, 'chars_div_4'));
    expect(check.violations.map((v) => v.kind)).toEqual(['budget']);
    const historyOnly = response({ context: 'h'.repeat(4 * limit + 8), memories: [] });
    const unchecked = checkResponse(catalog, 'gpt-3.5-turbo', historyOnly);
    expect(unchecked.budgetChecked).toBe(false);
    expect(unchecked.violations).toEqual([]);
  });

  it('unescapes attribute values of block ids', () => {
    expect(
      memoryBlockIds('<ibex_memory nonce="n" id="a&amp;b&quot;" category="c">\nx\n</ibex_memory>'),
    ).toEqual(['a&b"']);
  });
});

// ---- A LoCoMo-shaped fixture and a fake service ----

let dir: string;

function writeFixture(): string {
  const d = mkdtempSync(path.join(tmpdir(), 'ibex-replay-'));
  const session = (conv: string, s: number, n: number) =>
    Array.from({ length: n }, (_, i) => ({
      speaker: i % 2 === 0 ? `${conv}-A` : `${conv}-B`,
      dia_id: `D${s}:${i + 1}`,
      text: `${conv} session ${s} turn ${i + 1}`,
    }));
  for (const [stem, sessions] of [
    ['1', 3],
    ['2', 6],
  ] as const) {
    const conv: Record<string, unknown> = { speaker_a: `${stem}-A`, speaker_b: `${stem}-B` };
    for (let s = 1; s <= sessions; s++) {
      conv[`session_${s}_date_time`] = `1:56 pm on ${s} May, 2023`;
      conv[`session_${s}`] = session(stem, s, 4);
      conv[`session_${s}_summary`] = `summary ${s}`;
    }
    writeFileSync(path.join(d, `${stem}.json`), JSON.stringify(conv));
  }
  return d;
}

interface ReplayFake {
  addr: string;
  grpc: GrpcServer;
  seen: ValidatedRequest[];
  overLong: number;
  errors: number;
}

/**
 * Answers each call with its history and one memory block; calls for `overLongModel` get a block far
 * over the model's budget; every `errorEvery`-th call fails with INVALID_ARGUMENT.
 */
async function startReplayFake(
  opts: { overLongModel?: string; errorEvery?: number } = {},
): Promise<ReplayFake> {
  const fake: ReplayFake = {
    addr: '',
    grpc: undefined as unknown as GrpcServer,
    seen: [],
    overLong: 0,
    errors: 0,
  };
  const { addr, grpc } = await startAssembleServer(async (req): Promise<AssembleResult> => {
    fake.seen.push(req);
    if (opts.errorEvery && fake.seen.length % opts.errorEvery === 0) {
      fake.errors++;
      throw Errors.invalidArgument('query', 'test: rejected');
    }
    const id = '44444444-4444-4444-8444-444444444444';
    const history = req.recentMessages.map((m) => `${m.role}: ${m.content}`).join('\n');
    const overLong = req.model === opts.overLongModel;
    if (overLong) fake.overLong++;
    const content = overLong ? 'y'.repeat(400_000) : `memory for ${req.query}`;
    return {
      response: response({ context: `${history}\n\n${block(id, content)}`, memories: [used(id)] }),
      level: 'L0',
    };
  });
  fake.grpc = grpc;
  fake.addr = addr;
  return fake;
}

beforeAll(() => {
  dir = writeFixture();
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe('readLocomo', () => {
  it('a missing dataset path is one line naming the path and what to pass, not a bare ENOENT', async () => {
    const missing = path.join(dir, 'no-such-locomo');
    await expect(readLocomo(missing)).rejects.toThrow(
      `cannot read the LoCoMo dataset at ${missing}: no such file or directory (pass the folder of its .json files)`,
    );
  });
});

describe('locomoRequests', () => {
  it('takes the sessions after the first third, interleaves conversations and rotates models', async () => {
    const conversations = await readLocomo(dir);
    const reqs = locomoRequests(conversations);
    // Conversation 1: 3 sessions, skip 1 → 8 turns; conversation 2: 6 sessions, skip 2 → 16 turns.
    expect(reqs).toHaveLength(24);
    expect(reqs.slice(0, 4).map((r) => `${r.sampleId} ${r.diaId}`)).toEqual([
      '1 D2:1',
      '2 D3:1',
      '1 D2:2',
      '2 D3:2',
    ]);
    const models = catalog.modelIds();
    expect(reqs.map((r) => r.request.model)).toEqual(reqs.map((_, i) => models[i % models.length]));
    const first = reqs[0]!.request;
    expect(first.org_id).toBe(LOCOMO_ORG_ID);
    expect(first.agent_id).toBe(locomoAgentId('1'));
    expect(first.query).toBe('1 session 2 turn 1');
    expect(first.recent_messages).toEqual([
      { role: '1-A', content: '1 session 1 turn 1' },
      { role: '1-B', content: '1 session 1 turn 2' },
      { role: '1-A', content: '1 session 1 turn 3' },
      { role: '1-B', content: '1 session 1 turn 4' },
    ]);
    expect(Math.max(...reqs.map((r) => r.request.recent_messages?.length ?? 0))).toBe(10);
  });
});

describe('runReplay', () => {
  it('counts one invariant violation per over-long answer and nothing else', async () => {
    const fake = await startReplayFake({ overLongModel: 'gpt-3.5-turbo' });
    const report = await runReplay({ addr: fake.addr, conversations: await readLocomo(dir), concurrency: 3 });
    expect(report.calls).toBe(24);
    expect(fake.seen).toHaveLength(24);
    expect(report.ok).toBe(24);
    expect(report.errors).toEqual({});
    const expected = fake.seen.filter((r) => r.model === 'gpt-3.5-turbo').length;
    expect(expected).toBeGreaterThan(0);
    expect(fake.overLong).toBe(expected);
    expect(report.invariant_violations).toBe(expected);
    expect(report.violations_by_kind).toEqual({
      budget: expected,
      memory_ids: 0,
      included_count: 0,
      level: 0,
      unknown_model: 0,
    });
    expect(report.levels).toEqual({ L0: 24, L1: 0, L2: 0 });
    expect(report.memories_included).toEqual({ min: 1, median: 1, max: 1 });
    expect(report.violation_samples[0]?.kinds).toEqual(['budget']);
    expect(new Set(fake.seen.map((r) => r.agentId))).toEqual(
      new Set([locomoAgentId('1'), locomoAgentId('2')]),
    );
  });

  it('honours --limit and counts error statuses by code', async () => {
    const fake = await startReplayFake({ errorEvery: 3 });
    const report = await runReplay({
      addr: fake.addr,
      conversations: await readLocomo(dir),
      concurrency: 1,
      limit: 10,
    });
    expect(report.calls).toBe(10);
    expect(report.errors).toEqual({ INVALID_ARGUMENT: 3 });
    expect(report.error_details).toEqual({ INVALID_ARGUMENT: ['test: rejected'] });
    expect(report.ok).toBe(7);
    expect(report.invariant_violations).toBe(0);
  });
});

describe('ibex-context replay (compiled CLI)', () => {
  it('--json prints the documented shape and exits 1 on violations', async () => {
    const fake = await startReplayFake({ overLongModel: 'gpt-3.5-turbo' });
    const res = await runCli([
      'replay',
      '--locomo',
      dir,
      '--addr',
      fake.addr,
      '--concurrency',
      '2',
      '--json',
    ]);
    expect(res.code).toBe(1);
    const report = JSON.parse(res.stdout) as ReplayReport;
    expect(Object.keys(report)).toEqual(
      expect.arrayContaining([
        'calls',
        'ok',
        'errors',
        'levels',
        'memories_included',
        'latency_ms',
        'invariant_violations',
      ]),
    );
    expect(report.calls).toBe(24);
    expect(report.ok).toBe(24);
    expect(report.errors).toEqual({});
    expect(report.invariant_violations).toBe(fake.overLong);
    expect(Object.keys(report.latency_ms)).toEqual(expect.arrayContaining(['p50', 'p99']));
    expect(Object.keys(report.memories_included)).toEqual(['min', 'median', 'max']);
  });

  it('exits 0 with a clean summary when every answer holds', async () => {
    const fake = await startReplayFake();
    const res = await runCli(['replay', '--locomo', dir, '--addr', fake.addr, '--limit', '5']);
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    expect(res.stdout).toMatch(/│ calls +│ 5 \(of 24 turns in 2 conversations\)/);
    expect(res.stdout).toMatch(/│ invariant violations +│ 0 /);
  });

  it('exits 2 without --locomo', async () => {
    const res = await runCli(['replay']);
    expect(res.code).toBe(2);
    expect(res.stderr).toContain('--locomo <dir> is required');
  });
});

describe('ibex-context assemble (compiled CLI)', () => {
  const base = assembleArgs;

  it('sends the flags as the request and prints the context and a table', async () => {
    const fake = await startReplayFake();
    const res = await runCli([
      ...base(fake.addr),
      '--query',
      'what now?',
      '--message',
      'user:a: b',
      '--message',
      'assistant:c',
      '--skip-hot',
      '--max-memories',
      '7',
    ]);
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    const req = fake.seen[0]!;
    expect(req.query).toBe('what now?');
    expect(req.recentMessages).toEqual([
      { role: 'user', content: 'a: b' },
      { role: 'assistant', content: 'c' },
    ]);
    expect(req.skipHot).toBe(true);
    expect(req.skipCold).toBe(false);
    expect(req.maxMemories).toBe(7);
    expect(res.stdout).toContain('user: a: b\nassistant: c\n\n<ibex_memory');
    expect(res.stdout).toMatch(/│ memories_included +│ 1 +│/);
    expect(res.stdout).toMatch(/│ branch hot +│ success in 1\.25 ms/);
  });

  it('--json prints the response object', async () => {
    const fake = await startReplayFake();
    const res = await runCli([...base(fake.addr), '--query', 'q', '--json']);
    expect(res.code).toBe(0);
    const body = JSON.parse(res.stdout) as AssembleContextResponse;
    expect(body.memories_included).toBe(1);
    expect(body.degradation.level).toBe('L0');
    expect(body.assembled_context).toContain('memory for q');
  });

  it('exits non-zero with the gRPC status on an error', async () => {
    const fake = await startReplayFake();
    const res = await runCli([...base(fake.addr), '--query', 'q', '--max-memories', '101']);
    expect(res.code).toBe(1);
    expect(res.stderr.trim()).toBe(
      'ibex-context assemble: INVALID_ARGUMENT: max_memories must be in 0..100, got 101',
    );
    expect(fake.seen).toHaveLength(0);
    const json = await runCli([...base(fake.addr), '--org', 'not-a-uuid', '--query', 'q', '--json']);
    expect(json.code).toBe(1);
    expect(JSON.parse(json.stdout)).toEqual({
      error: 'INVALID_ARGUMENT: org_id must be a UUID',
      code: 'INVALID_ARGUMENT',
      details: 'org_id must be a UUID',
    });
  });
});

describe('ibex-context healthcheck (compiled CLI)', () => {
  it('exits 0 iff the server answers SERVING', async () => {
    const { addr, grpc } = await startAssembleServer(
      async () => {
        throw new Error('unused');
      },
      { serving: false },
    );

    const notYet = await runCli(['healthcheck', '--addr', addr]);
    expect(notYet.code).toBe(1);
    expect(notYet.stderr.trim()).toBe(`${addr}: NOT_SERVING`);

    grpc.markServing();
    const serving = await runCli(['healthcheck', '--addr', addr]);
    expect(serving.code).toBe(0);
    expect(serving.stdout.trim()).toBe(`${addr}: SERVING`);

    const viaEnv = await runCli(['healthcheck'], '', { env: { IBEX_CONTEXT_GRPC_ADDR: addr } });
    expect(viaEnv.code).toBe(0);

    await grpc.drain(500);
    const down = await runCli(['healthcheck', '--addr', addr]);
    expect(down.code).toBe(1);
    expect(down.stderr.trim()).toBe(
      `ibex-context healthcheck: cannot reach the service at ${addr} (connection refused); is it running, and is --addr right?`,
    );
  });
});

describe.skipIf(!hasOpenssl())('client TLS (certificates made with openssl at test time)', () => {
  let pki: string;
  beforeAll(() => {
    pki = makeServerPki('ibex-client-tls-');
  });
  afterAll(() => {
    rmSync(pki, { recursive: true, force: true });
  });

  it('healthcheck and assemble reach a TLS server with --tls-ca, and send the token from the environment', async () => {
    const fake = await startReplayFake();
    const creds = ServerCredentials.createSsl(null, [
      {
        private_key: readFileSync(path.join(pki, 'server.key')),
        cert_chain: readFileSync(path.join(pki, 'server.crt')),
      },
    ]);
    const tlsServer = createGrpcServer({
      assemble: async (req, ctx) => {
        fake.seen.push(req);
        const auth = ctx.metadata.get('authorization')[0];
        return { response: response({ context: `auth=${String(auth)}`, memories: [] }), level: 'L0' };
      },
      logger: createLogger({ logLevel: 'silent' }),
      settings: { timeoutMs: 5000, maxReceiveMessageBytes: 1024 * 1024, maxMetadataBytes: 16 * 1024 },
    });
    const port = await tlsServer.bind('127.0.0.1:0', creds);
    tlsServer.markServing();
    servers.push(tlsServer);
    const addr = `127.0.0.1:${port}`;
    const ca = path.join(pki, 'ca.crt');

    const ok = await runCli(['healthcheck', '--addr', addr, '--tls-ca', ca]);
    expect(ok.code).toBe(0);
    const plaintext = await runCli(['healthcheck', '--addr', addr, '--timeout', '1000']);
    expect(plaintext.code).toBe(1);
    // The Docker HEALTHCHECK: TLS because the service has a certificate, whose name/CA it does not check.
    const local = await runCli(['healthcheck', '--local'], '', {
      env: { IBEX_CONTEXT_GRPC_ADDR: addr, IBEX_CONTEXT_TLS_CERT: path.join(pki, 'server.crt') },
    });
    expect(local.stdout.trim()).toBe(`${addr}: SERVING`);
    expect(local.code).toBe(0);

    const res = await runCli(
      [
        'assemble',
        '--addr',
        addr,
        '--tls-ca',
        ca,
        '--org',
        LOCOMO_ORG_ID,
        '--agent',
        locomoAgentId('1'),
        '--model',
        'gpt-4o',
        '--query',
        'q',
        '--json',
      ],
      '',
      { env: { IBEX_CONTEXT_TOKEN: 'env-token-42' } },
    );
    expect(res.code).toBe(0);
    expect((JSON.parse(res.stdout) as AssembleContextResponse).assembled_context).toBe(
      'auth=Bearer env-token-42',
    );
    expect(res.stderr).not.toContain('env-token-42');

    const missing = await runCli(['healthcheck', '--addr', addr, '--tls-ca', path.join(pki, 'nope.crt')]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('cannot read TLS CA file');
  });
});
