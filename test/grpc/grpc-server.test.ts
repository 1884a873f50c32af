/**
 * The gRPC boundary over a real socket: validation statuses, unimplemented methods, health, reflection,
 * error mapping, deadlines, cancellation, limits and drain. The pipeline is injected (a test double);
 * it is exercised end to end elsewhere.
 */

import { status } from '@grpc/grpc-js';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Settings } from '../../src/config/settings.js';
import {
  type AssembleFn,
  type AssembleResult,
  createGrpcServer,
  type GrpcServer,
  type GrpcServerOptions,
  type LateAnswerPath,
} from '../../src/grpc/grpc-server.js';
import { abortCause, type CallContext, monotonicNow } from '../../src/request/call-context.js';
import type { ValidatedRequest } from '../../src/request/validate.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { Errors } from '../../src/wire/errors.js';
import type { AssembleContextRequestInput, DegradationLevel } from '../../src/wire/proto.js';
import { DEGRADED_HEADER, LEVEL_HEADER } from '../../src/wire/wire-headers.js';
import { createTestClient, type HealthStatus, type TestClient } from '../helpers/grpc-client.js';
import { logSink } from '../helpers/log-sink.js';
import { stubResponse, ZERO_METRICS } from '../helpers/stub-response.js';

const ORG = '0b8f8c1e-6a5e-4c3b-9d7e-1f2a3b4c5d6e';
const AGENT = 'a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d';
const valid = (): AssembleContextRequestInput => ({ org_id: ORG, agent_id: AGENT, model: 'gpt-4o' });

type TestSettings = Pick<Settings, 'timeoutMs' | 'maxReceiveMessageBytes' | 'maxMetadataBytes'>;
const SETTINGS: TestSettings = {
  timeoutMs: 10_000,
  maxReceiveMessageBytes: 4 * 1024 * 1024,
  maxMetadataBytes: 16 * 1024,
};

function response(req: ValidatedRequest, level: DegradationLevel = 'L0'): AssembleResult {
  const res = stubResponse(req, {
    assembled_context: JSON.stringify({ orgId: req.orgId, agentId: req.agentId, model: req.model }),
    metrics: { ...ZERO_METRICS, total_ms: 1, pool_wait_us: 12, pool_run_us: 34 },
    degradation: { level, intentional: false, reasons: [], branches: [] },
  });
  return { response: res, level };
}

interface Harness {
  grpc: GrpcServer;
  client: TestClient;
  logs: Record<string, unknown>[];
  /** Replace the pipeline for the next calls. */
  use(fn: AssembleFn): void;
  stop(): Promise<void>;
}

async function startServer(
  settings: Partial<TestSettings> = {},
  onLateAnswer?: GrpcServerOptions['onLateAnswer'],
): Promise<Harness> {
  let impl: AssembleFn = async (req) => response(req);
  const sink = logSink();
  const assemble: AssembleFn = Object.assign((req: ValidatedRequest, ctx: CallContext) => impl(req, ctx), {
    atDeadline: (req: ValidatedRequest, ctx: CallContext) => impl.atDeadline?.(req, ctx) ?? null,
  });
  const grpc = createGrpcServer({
    assemble,
    logger: createLogger({ logLevel: 'debug' }, sink.stream),
    settings: { ...SETTINGS, ...settings },
    onLateAnswer,
  });
  const port = await grpc.bind('127.0.0.1:0');
  const client = createTestClient(`127.0.0.1:${port}`);
  return {
    grpc,
    client,
    logs: sink.lines,
    use: (fn) => {
      impl = fn;
    },
    stop: async () => {
      client.close();
      await grpc.drain(1000);
    },
  };
}

/** A pipeline that never answers on its own and reports the signal it was given. */
function hanging(): { fn: AssembleFn; ctx: Promise<CallContext>; aborted: Promise<unknown> } {
  let gotCtx!: (c: CallContext) => void;
  let gotAbort!: (reason: unknown) => void;
  const ctx = new Promise<CallContext>((r) => {
    gotCtx = r;
  });
  const aborted = new Promise<unknown>((r) => {
    gotAbort = r;
  });
  const fn: AssembleFn = (req, c) => {
    gotCtx(c);
    return new Promise((resolve) => {
      c.signal.addEventListener('abort', () => {
        gotAbort(c.signal.reason);
        // Resolving after the abort must not produce a second answer or a crash.
        resolve(response(req));
      });
    });
  };
  return { fn, ctx, aborted };
}

const until = async (cond: () => boolean, timeoutMs = 5000) => {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error('condition not reached');
    await new Promise((r) => setTimeout(r, 5));
  }
};

describe('gRPC server', () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startServer();
    h.grpc.markServing();
  });
  afterAll(async () => {
    await h.stop();
  });
  afterEach(() => {
    h.use(async (req) => response(req));
  });

  describe('INVALID_ARGUMENT details (contract.md §11)', () => {
    // The messages and their order are validate.test.ts's; that the wire decoder answers the same as the
    // decoded object is test/request/wire-request.test.ts's property. Here: one sample of each kind over real gRPC.
    const cases: [string, AssembleContextRequestInput, string][] = [
      ['org_id malformed', { ...valid(), org_id: 'org-1' }, 'org_id must be a UUID'],
      [
        'content too long for its bytes (decided on the wire)',
        { ...valid(), recent_messages: [{ role: 'user', content: 'c'.repeat(4 * 32768 + 1) }] },
        'message.content exceeds 32768 characters',
      ],
    ];
    it.each(cases)('%s', async (_name, req, details) => {
      let called = false;
      h.use(async (r) => {
        called = true;
        return response(r);
      });
      const out = await h.client.assemble(req);
      expect(out.status.code).toBe(status.INVALID_ARGUMENT);
      expect(out.status.details).toBe(details);
      expect(out.response).toBeNull();
      expect(called).toBe(false);
    });

    it('leaves a content whose bytes cannot decide its length (32,769 ASCII) to the pipeline', async () => {
      let pending: boolean | undefined;
      h.use(async (r) => {
        pending = r.history.contentPending;
        return response(r);
      });
      const out = await h.client.assemble({
        ...valid(),
        recent_messages: [{ role: 'user', content: 'c'.repeat(32769) }],
      });
      expect(out.status.code).toBe(status.OK);
      expect(pending).toBe(true);
    });

    it('passes a catalog rejection through as INVALID_ARGUMENT', async () => {
      h.use(async (r) => {
        throw Errors.unknownModel(r.model);
      });
      const out = await h.client.assemble({ ...valid(), model: ' gpt-5 ' });
      expect(out.status.code).toBe(status.INVALID_ARGUMENT);
      expect(out.status.details).toBe("unknown model 'gpt-5'");
    });

    it('accepts every length exactly at its limit in emoji, and canonicalizes ids', async () => {
      const e = '😀';
      const out = await h.client.assemble({
        org_id: ORG.toUpperCase(),
        agent_id: ` ${AGENT} `,
        model: e.repeat(256),
        query: e.repeat(8192),
        recent_messages: [
          ...Array.from({ length: 99 }, () => ({ role: 'user', content: 'x' })),
          { role: e.repeat(64), content: e.repeat(32768) },
        ],
        options: { max_memories: 100 },
      });
      expect(out.status.code).toBe(status.OK);
      expect(JSON.parse(out.response!.assembled_context)).toEqual({
        orgId: ORG,
        agentId: AGENT,
        model: e.repeat(256),
      });
    });
  });

  it('answers UNIMPLEMENTED for the deferred methods', async () => {
    const search = await h.client.searchMemories({ org_id: ORG, agent_id: AGENT, query: 'q' });
    expect(search.status.code).toBe(status.UNIMPLEMENTED);
    expect(search.status.details).toBe('SearchMemories deferred \u2014 ADR-0038');
    const feedback = await h.client.recordMemoryFeedback({ memory_ids: ['m'] });
    expect(feedback.status.code).toBe(status.UNIMPLEMENTED);
    expect(feedback.status.details).toBe('RecordMemoryFeedback deferred \u2014 ADR-0038');
  });

  it('sends the level as response metadata and the response body', async () => {
    const ok = await h.client.assemble({ ...valid(), request_id: 'r-1', trace_id: 't-1', span_id: 's-1' });
    expect(ok.status.code).toBe(status.OK);
    expect(ok.metadata.get(LEVEL_HEADER)).toEqual(['L0']);
    expect(ok.metadata.get(DEGRADED_HEADER)).toEqual(['false']);
    expect(ok.response).toMatchObject({
      request_id: 'r-1',
      trace_id: 't-1',
      span_id: 's-1',
      score_schema: 'interim_v1',
      degradation: { level: 'L0' },
      metrics: { pool_wait_us: 12, pool_run_us: 34 },
    });

    for (const level of ['L1', 'L2'] as const) {
      h.use(async (req) => response(req, level));
      const out = await h.client.assemble(valid());
      expect(out.metadata.get(LEVEL_HEADER)).toEqual([level]);
      expect(out.metadata.get(DEGRADED_HEADER)).toEqual(['true']);
    }
  });

  it('answers INTERNAL for a handler bug, logs the stack, and keeps serving', async () => {
    h.use(async () => {
      throw new Error('boom: secret detail');
    });
    const bad = await h.client.assemble(valid());
    expect(bad.status.code).toBe(status.INTERNAL);
    expect(bad.status.details).toBe('internal error');
    const logged = h.logs.find(
      (l) => l.level === 'error' && (l.err as { message?: string })?.message === 'boom: secret detail',
    );
    expect((logged?.err as { stack?: string })?.stack).toContain('boom: secret detail');

    h.use(() => {
      throw new TypeError('synchronous throw');
    });
    expect((await h.client.assemble(valid())).status.code).toBe(status.INTERNAL);

    h.use(async (req) => response(req));
    expect((await h.client.assemble(valid())).status.code).toBe(status.OK);
    expect(h.grpc.inFlight()).toBe(0);
  });

  it("answers DEADLINE_EXCEEDED when the caller's deadline passes mid-assembly and aborts ctx.signal", async () => {
    const hang = hanging();
    h.use(hang.fn);
    const started = Date.now();
    const out = await h.client.assemble(valid(), { deadlineMs: 150 });
    expect(out.status.code).toBe(status.DEADLINE_EXCEEDED);
    expect(Date.now() - started).toBeGreaterThanOrEqual(140);
    const ctx = await hang.ctx;
    expect(ctx.deadline - ctx.arrival).toBeLessThanOrEqual(151);
    const reason = await hang.aborted;
    expect((reason as DOMException).name).toBe('TimeoutError');
    expect(abortCause(ctx.signal)).toBe('deadline');
    await until(() => h.grpc.inFlight() === 0);
    h.use(async (req) => response(req));
    expect((await h.client.assemble(valid())).status.code).toBe(status.OK);
  });

  it('aborts ctx.signal when the caller cancels', async () => {
    const hang = hanging();
    h.use(hang.fn);
    const controller = new AbortController();
    const pending = h.client.assemble(valid(), { signal: controller.signal });
    await hang.ctx;
    controller.abort();
    const out = await pending;
    expect(out.status.code).toBe(status.CANCELLED);
    const reason = await hang.aborted;
    expect((reason as DOMException).name).toBe('AbortError');
    await until(() => h.grpc.inFlight() === 0);
    h.use(async (req) => response(req));
    expect((await h.client.assemble(valid())).status.code).toBe(status.OK);
  });

  it('refuses a 5 MB request with RESOURCE_EXHAUSTED and keeps serving', async () => {
    const out = await h.client.assemble({ ...valid(), query: 'a'.repeat(5 * 1024 * 1024) });
    expect(out.status.code).toBe(status.RESOURCE_EXHAUSTED);
    expect((await h.client.assemble(valid())).status.code).toBe(status.OK);
  });

  it('refuses oversized request metadata with RESOURCE_EXHAUSTED', async () => {
    const out = await h.client.assemble(valid(), { metadata: { 'x-big': 'v'.repeat(20 * 1024) } });
    expect(out.status.code).toBe(status.RESOURCE_EXHAUSTED);
    const fine = await h.client.assemble(valid(), { metadata: { 'x-small': 'v'.repeat(1024) } });
    expect(fine.status.code).toBe(status.OK);
  });

  it('hands the request metadata to the pipeline', async () => {
    let seen: string[] = [];
    h.use(async (req, ctx) => {
      seen = ctx.metadata.get('x-tenant').map(String);
      return response(req);
    });
    await h.client.assemble(valid(), { metadata: { 'x-tenant': 'acme' } });
    expect(seen).toEqual(['acme']);
  });

  it('lists the service through reflection', async () => {
    const services = await h.client.listServices();
    expect(services).toContain('ibex.context.v1.ContextAssemblyService');
    expect(services).toContain('grpc.health.v1.Health');
  });

  it('serves linkable descriptors: imports listed, type names fully qualified (grpc-node#3034)', async () => {
    const files = await h.client.fileContainingSymbol('ibex.context.v1.ContextAssemblyService');
    const byPackage = new Map(files.map((f) => [f.package, f]));
    const context = byPackage.get('ibex.context.v1')!;
    const auth = byPackage.get('ibex.auth.v1')!;
    const wkt = byPackage.get('google.protobuf')!;
    expect(context.dependency).toEqual([auth.name]);
    expect(auth.dependency).toEqual([wkt.name]);
    expect(context.typeNames).toContain('.ibex.auth.v1.PrincipalContext');
    expect(context.typeNames).toContain('.ibex.context.v1.Degradation');
    expect(auth.typeNames).toEqual(['.google.protobuf.Timestamp', '.google.protobuf.Timestamp']);
    // Every import the client must fetch is in the answer (the transitive closure).
    const names = new Set(files.map((f) => f.name));
    for (const f of files) for (const d of f.dependency) expect(names).toContain(d);
    expect((await h.client.fileContainingSymbol('grpc.health.v1.Health')).length).toBeGreaterThan(0);
  });
});

describe('server-side deadline', () => {
  it('answers DEADLINE_EXCEEDED at arrival + IBEX_CONTEXT_TIMEOUT when the caller set no deadline', async () => {
    const s = await startServer({ timeoutMs: 80 });
    try {
      const hang = hanging();
      s.use(hang.fn);
      const started = Date.now();
      const out = await s.client.assemble(valid());
      expect(out.status.code).toBe(status.DEADLINE_EXCEEDED);
      expect(out.status.details).toBe('deadline exceeded');
      expect(Date.now() - started).toBeGreaterThanOrEqual(75);
      expect(((await hang.aborted) as DOMException).name).toBe('TimeoutError');
    } finally {
      await s.stop();
    }
  });

  it('sends an answer that became ready past D (a late event loop) and reports it late, not DEADLINE_EXCEEDED', async () => {
    const late: { path: LateAnswerPath; lateMs: number }[] = [];
    const s = await startServer({ timeoutMs: 30 }, (path, lateMs) => late.push({ path, lateMs }));
    try {
      s.use(async (req) => {
        // Block the event loop past D so the deadline timer cannot fire first.
        const end = Date.now() + 60;
        while (Date.now() < end) {}
        return response(req);
      });
      const out = await s.client.assemble(valid());
      expect(out.status.code, out.status.details).toBe(status.OK);
      expect(out.response?.degradation?.level).toBe('L0');
      expect(late).toHaveLength(1);
      expect(late[0]!.path).toBe('ready_after_deadline');
      expect(late[0]!.lateMs).toBeGreaterThanOrEqual(25);
    } finally {
      await s.stop();
    }
  });

  it("answers with the pipeline's answer at D when D's timer fires before the pipeline answered", async () => {
    const late: LateAnswerPath[] = [];
    const s = await startServer({ timeoutMs: 40 }, (path) => late.push(path));
    try {
      const hang = hanging();
      const fn: AssembleFn = Object.assign((req: ValidatedRequest, c: CallContext) => hang.fn(req, c), {
        atDeadline: (req: ValidatedRequest) => response(req, 'L2'),
      });
      s.use(fn);
      const out = await s.client.assemble(valid());
      expect(out.status.code, out.status.details).toBe(status.OK);
      expect(out.response?.degradation?.level).toBe('L2');
      expect(late).toEqual(['deadline_answer']);
      expect(((await hang.aborted) as DOMException).name).toBe('TimeoutError');
    } finally {
      await s.stop();
    }
  });

  it("turns the pipeline's own DEADLINE_EXCEEDED past D into the answer at D; before D it stays the error", async () => {
    const s = await startServer({ timeoutMs: 30 });
    try {
      const atD = Object.assign(
        async (_req: ValidatedRequest, c: CallContext): Promise<AssembleResult> => {
          // The clock passes D with the loop blocked, as throwIfAborted sees it before D's timer fires.
          while (monotonicNow() < c.deadline + 5) {}
          throw Errors.deadlineExceeded();
        },
        { atDeadline: (req: ValidatedRequest) => response(req, 'L2') },
      );
      s.use(atD);
      const past = await s.client.assemble(valid());
      expect(past.status.code, past.status.details).toBe(status.OK);
      expect(past.response?.degradation?.level).toBe('L2');

      // A refusal before D (a large history whose degraded answer cannot fit) is not turned into an answer.
      s.use(
        Object.assign(
          async (): Promise<AssembleResult> => {
            throw Errors.deadlineExceeded();
          },
          { atDeadline: (req: ValidatedRequest) => response(req, 'L2') },
        ),
      );
      const early = await s.client.assemble(valid());
      expect(early.status.code).toBe(status.DEADLINE_EXCEEDED);
    } finally {
      await s.stop();
    }
  });

  it('stays DEADLINE_EXCEEDED at D when no answer may be built there (atDeadline gives null)', async () => {
    const s = await startServer({ timeoutMs: 40 });
    try {
      const hang = hanging();
      s.use(
        Object.assign((req: ValidatedRequest, c: CallContext) => hang.fn(req, c), { atDeadline: () => null }),
      );
      const out = await s.client.assemble(valid());
      expect(out.status.code).toBe(status.DEADLINE_EXCEEDED);
    } finally {
      await s.stop();
    }
  });
});

describe('health and drain', () => {
  it('goes NOT_SERVING → SERVING → NOT_SERVING on drain', async () => {
    const s = await startServer();
    try {
      expect((await s.client.healthCheck('')).response?.status).toBe('NOT_SERVING');
      expect((await s.client.healthCheck('ibex.context.v1.ContextAssemblyService')).response?.status).toBe(
        'NOT_SERVING',
      );
      s.grpc.markServing();
      expect((await s.client.healthCheck('')).response?.status).toBe('SERVING');
      expect((await s.client.healthCheck('ibex.context.v1.ContextAssemblyService')).response?.status).toBe(
        'SERVING',
      );

      const seen: HealthStatus[] = [];
      const watch = s.client.healthWatch('ibex.context.v1.ContextAssemblyService', (st) => {
        seen.push(st);
        if (st === 'NOT_SERVING') watch.cancel();
      });
      await until(() => seen.length === 1);
      const drained = s.grpc.drain(5000);
      await until(() => seen.length === 2);
      expect(seen).toEqual(['SERVING', 'NOT_SERVING']);
      await drained;
      // markServing after drain must not flip a stopping server back.
      s.grpc.markServing();
    } finally {
      s.client.close();
      await s.grpc.drain(100);
    }
  });

  it('lets an in-flight call finish, then refuses new calls', async () => {
    const s = await startServer();
    try {
      let release!: () => void;
      const gate = new Promise<void>((r) => {
        release = r;
      });
      s.use(async (req) => {
        await gate;
        return response(req, 'L1');
      });
      const pending = s.client.assemble(valid());
      await until(() => s.grpc.inFlight() === 1);
      const started = Date.now();
      const drained = s.grpc.drain(10_000);
      setTimeout(release, 150);
      const out = await pending;
      expect(out.status.code).toBe(status.OK);
      expect(out.metadata.get(LEVEL_HEADER)).toEqual(['L1']);
      await drained;
      expect(Date.now() - started).toBeLessThan(5000);
      expect(s.grpc.inFlight()).toBe(0);

      const after = await s.client.assemble(valid(), { deadlineMs: 1000 });
      expect(after.status.code).not.toBe(status.OK);
    } finally {
      s.client.close();
    }
  });

  it('forces shutdown after the grace period', async () => {
    const s = await startServer();
    const hang = hanging();
    s.use(hang.fn);
    const pending = s.client.assemble(valid());
    await hang.ctx;
    const started = Date.now();
    await s.grpc.drain(100);
    expect(Date.now() - started).toBeLessThan(2000);
    const out = await pending;
    expect(out.status.code).not.toBe(status.OK);
    expect(((await hang.aborted) as DOMException).name).toBe('AbortError');
    s.client.close();
  });
});
