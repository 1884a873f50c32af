/**
 * Random AssembleContext requests over real gRPC — random and odd Unicode
 * strings (lone surrogates, NUL, BOM, RTL override, astral), lengths at and past every contract.md §11 bound,
 * recent_messages counts around 100, any int32 max_memories — answer OK or INVALID_ARGUMENT and nothing
 * else, and the server keeps serving. Where every string is well-formed UTF-16 (so the wire cannot alter
 * it) the answer must be exactly what local validation predicts, detail string included.
 */
import { Writable } from 'node:stream';
import { status } from '@grpc/grpc-js';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createGrpcServer, type GrpcServer } from '../../src/grpc/grpc-server.js';
import { LIMITS, type ValidatedRequest, validateAssembleRequest } from '../../src/request/validate.js';
import { CONTENT_OVER, checkHistoryContents } from '../../src/request/wire-request.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { Errors, isIbexError } from '../../src/wire/errors.js';
import type { AssembleContextRequestInput, AssembleContextResponse } from '../../src/wire/proto.js';
import { createTestClient, type TestClient } from '../helpers/grpc-client.js';
import { stubResponse } from '../helpers/stub-response.js';

/**
 * A per-request weight: mostly a valid one (finite, ≥ 0) so that OK answers stay common, sometimes any
 * float32 (negative, infinite, NaN: INVALID_ARGUMENT naming the field).
 */
const weight = fc.oneof(
  { weight: 8, arbitrary: fc.float({ min: 0, max: 10, noNaN: true, noDefaultInfinity: true }) },
  { weight: 1, arbitrary: fc.float() },
);

const ORG = '0b8f8c1e-6a5e-4c3b-9d7e-1f2a3b4c5d6e';
const AGENT = 'a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d';

/** One "character" of generated text: 1 or 2 UTF-16 code units, often hostile. */
const unit = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom('a', 'Z', '0', ' ', '-', '\t', '\n') },
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      '\ud800',
      '\udbff',
      '\udc00',
      '\udfff',
      '\u0000',
      '\ufeff',
      '\u202e',
      '\u200b',
      '\u0301',
      '\uffff',
      '\ufffd',
      'é',
      '😀',
      '𝔸',
      '<',
      '&',
      '"',
    ),
  },
  { weight: 2, arbitrary: fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }) },
);

/** Text of `n` units: a short random pattern repeated, so long strings cost little to generate. */
function textOf(lengths: fc.Arbitrary<number>): fc.Arbitrary<string> {
  return fc.tuple(lengths, fc.array(unit, { minLength: 1, maxLength: 6 })).map(([n, pattern]) => {
    const parts: string[] = [];
    for (let i = 0; i < n; i++) parts.push(pattern[i % pattern.length]!);
    return parts.join('');
  });
}

/** Lengths at and around `limit` (contract.md §11), plus short random ones. */
const around = (limit: number) =>
  fc.oneof(
    fc.integer({ min: 0, max: 8 }),
    fc.constantFrom(0, 1, limit - 1, limit, limit + 1, 2 * limit, 2 * limit + 1),
    fc.integer({ min: limit - 3, max: limit + 3 }),
  );

const short = textOf(fc.integer({ min: 0, max: 8 }));

const uuidLike = fc.oneof(
  { weight: 6, arbitrary: fc.oneof(fc.constantFrom(ORG, ORG.toUpperCase(), ` ${ORG}\t`), fc.uuid()) },
  {
    weight: 1,
    arbitrary: fc.constantFrom('', '   ', `${ORG}x`, ORG.slice(1), ORG.replaceAll('-', ''), `{${ORG}}`),
  },
  { weight: 1, arbitrary: textOf(fc.constantFrom(0, 35, 36, 37)) },
);

const int32 = fc.oneof(
  { weight: 4, arbitrary: fc.integer({ min: -3, max: LIMITS.maxMemories + 3 }) },
  { weight: 1, arbitrary: fc.constantFrom(-(2 ** 31), 2 ** 31 - 1, 0, 100, 101, -1) },
  { weight: 1, arbitrary: fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }) },
);

const message = fc.record({ role: short, content: short });

/** recent_messages around 100 items; at most one of them carries a role or content at a bound. */
const messages = fc
  .tuple(
    fc.oneof(
      fc.integer({ min: 0, max: 3 }),
      fc.integer({ min: LIMITS.recentMessages - 2, max: LIMITS.recentMessages + 2 }),
    ),
    fc.array(
      fc.record({
        at: fc.nat(),
        role: fc.option(textOf(around(LIMITS.roleChars)), { nil: undefined }),
        content: fc.option(textOf(around(LIMITS.contentChars)), { nil: undefined }),
      }),
      { maxLength: 1 },
    ),
    message,
  )
  .chain(([count, overrides, filler]) =>
    fc.array(fc.oneof(message, fc.constant(filler)), { minLength: count, maxLength: count }).map((list) => {
      for (const o of overrides) {
        if (list.length === 0) break;
        const m = list[o.at % list.length]!;
        list[o.at % list.length] = { role: o.role ?? m.role, content: o.content ?? m.content };
      }
      return list;
    }),
  );

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** Deep copy with every lone surrogate replaced by U+FFFD. */
function toWellFormed<T>(v: T): T {
  if (typeof v === 'string') return v.replace(new RegExp(LONE_SURROGATE, 'g'), '\ufffd') as T;
  if (Array.isArray(v)) return v.map(toWellFormed) as T;
  if (v !== null && typeof v === 'object') {
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, toWellFormed(x)])) as T;
  }
  return v;
}

const request: fc.Arbitrary<AssembleContextRequestInput> = fc
  .record({
    org_id: uuidLike,
    agent_id: fc.oneof(fc.constant(AGENT), fc.constant(AGENT.toUpperCase()), uuidLike),
    session_id: short,
    query: textOf(around(LIMITS.queryChars)),
    model: fc.oneof(
      { weight: 4, arbitrary: fc.constantFrom('gpt-4o', ' gpt-4o ') },
      { weight: 1, arbitrary: fc.constantFrom('', '  \t') },
      { weight: 3, arbitrary: textOf(around(LIMITS.modelChars)) },
    ),
    directive_version_id: short,
    available_tokens: int32,
    recent_messages: messages,
    options: fc.option(
      fc.record({
        skip_cold_memories: fc.boolean(),
        skip_hot_memories: fc.boolean(),
        recency_weight: weight,
        relevance_weight: weight,
        usefulness_weight: weight,
        confidence_weight: weight,
        max_memories: int32,
      }),
      { nil: undefined },
    ),
    request_id: short,
    trace_id: short,
    span_id: short,
    principal: fc.constantFrom('absent', 'matching', 'matching-odd-case'),
    principal_extra: short,
    wellFormed: fc.boolean(),
  })
  .map(({ principal, principal_extra, wellFormed, ...raw }) => {
    // Half the requests are repaired to well-formed UTF-16 so that the exact prediction below gets runs.
    const req = wellFormed ? toWellFormed(raw) : raw;
    if (principal === 'absent') return req;
    const odd = principal === 'matching-odd-case';
    // A principal naming the request's own org and agent must never turn a valid request into a denial.
    return {
      ...req,
      principal_context: {
        org_id: odd ? ` ${String(req.org_id).toUpperCase()} ` : req.org_id,
        agent_id: odd ? String(req.agent_id).toLowerCase() : req.agent_id,
        principal_id: principal_extra,
        authority: principal_extra,
        token_id: principal_extra,
        permissions: '-1',
      },
    };
  });

function strings(v: unknown, out: string[] = []): string[] {
  if (typeof v === 'string') out.push(v);
  else if (Array.isArray(v)) for (const x of v) strings(x, out);
  else if (v !== null && typeof v === 'object') for (const x of Object.values(v)) strings(x, out);
  return out;
}

/** What contract.md §11 says about `req`: OK with the echoed request_id, or INVALID_ARGUMENT with its detail. */
function predict(req: AssembleContextRequestInput): { code: status; details: string } {
  try {
    validateAssembleRequest(req);
    return { code: status.OK, details: 'OK' };
  } catch (err) {
    if (!isIbexError(err, 'IBEX_ERR_INVALID_ARGUMENT')) throw err;
    return { code: status.INVALID_ARGUMENT, details: err.message };
  }
}

function minimalResponse(req: ValidatedRequest): AssembleContextResponse {
  return stubResponse(req);
}

describe('AssembleContext under random hostile requests (real gRPC)', () => {
  let grpc: GrpcServer;
  let client: TestClient;
  let errorLines = 0;
  beforeAll(async () => {
    const sink = new Writable({
      write(chunk, _enc, cb) {
        for (const line of String(chunk).split('\n')) if (line.includes('"level":"error"')) errorLines++;
        cb();
      },
    });
    grpc = createGrpcServer({
      // The pipeline decides contents whose bytes cannot (the CPU stage does); the stub does too.
      assemble: async (req) => {
        if (checkHistoryContents(req.history)) throw Errors.invalidArgument('message.content', CONTENT_OVER);
        return { response: minimalResponse(req), level: 'L0' };
      },
      logger: createLogger({ logLevel: 'info' }, sink),
      settings: { timeoutMs: 10_000, maxReceiveMessageBytes: 4 * 1024 * 1024, maxMetadataBytes: 16 * 1024 },
    });
    const port = await grpc.bind('127.0.0.1:0');
    grpc.markServing();
    client = createTestClient(`127.0.0.1:${port}`);
  });
  afterAll(async () => {
    client.close();
    await grpc.drain(1000);
  });

  it('answers OK or INVALID_ARGUMENT — exactly as predicted for well-formed text — and keeps serving', async () => {
    const seen = { ok: 0, invalid: 0, predicted: 0 };
    await fc.assert(
      fc.asyncProperty(request, async (req) => {
        const out = await client.assemble(req);
        expect([status.OK, status.INVALID_ARGUMENT]).toContain(out.status.code);
        if (out.status.code === status.OK) seen.ok++;
        else seen.invalid++;
        if (strings(req).some((s) => LONE_SURROGATE.test(s))) return;
        // Well-formed strings cross the wire unchanged, so the server must agree with local validation.
        seen.predicted++;
        const expected = predict(req);
        expect({ code: out.status.code, details: out.status.details }).toEqual(expected);
        if (expected.code === status.OK) expect(out.response?.request_id).toBe(req.request_id);
      }),
      { numRuns: 200 },
    );
    // Both outcomes and the exact-prediction branch were really exercised.
    expect(seen.ok).toBeGreaterThanOrEqual(10);
    expect(seen.invalid).toBeGreaterThanOrEqual(10);
    expect(seen.predicted).toBeGreaterThanOrEqual(50);

    expect(errorLines).toBe(0);
    expect(grpc.inFlight()).toBe(0);
    const health = await client.healthCheck('');
    expect(health.response?.status).toBe('SERVING');
    const fine = await client.assemble({
      org_id: ORG,
      agent_id: AGENT,
      model: 'gpt-4o',
      request_id: 'after',
    });
    expect(fine.status.code).toBe(status.OK);
    expect(fine.response?.request_id).toBe('after');
  }, 60_000);
});
