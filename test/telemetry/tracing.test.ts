/**
 * Tracing end to end: the real service (pool, embedded store, gRPC on loopback, bearer authentication)
 * exporting over OTLP HTTP/protobuf to a real receiver that decodes the export with the OpenTelemetry
 * protos. What a proxy's trace gets from one call: the server span under the proxy's span, the stage
 * children, the degradation record, log lines carrying the same ids; and what it never gets: memory
 * text, queries, history, tokens.
 */
import { randomBytes } from 'node:crypto';
import { status } from '@grpc/grpc-js';
import type { Counter } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bearerAuthInterceptor } from '../../src/auth/bearer-interceptor.js';
import { parseTokenFile } from '../../src/auth/token-file.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { tracingConfigFromEnv } from '../../src/telemetry/tracing/config.js';
import { memories, request, startTestService, type TestService, tenant } from '../e2e/harness.js';
import { logSink } from '../helpers/log-sink.js';
import {
  type OtlpReceiver,
  type ReceivedSpan,
  spanTree,
  startOtlpReceiver,
} from '../helpers/otlp-receiver.js';

const TOKEN = 'proxyOps-5e1d2c3b4a596877';
const TOKENS_JSON = JSON.stringify({ tokens: [{ name: 'proxy', token: TOKEN, orgs: ['*'] }] });
const auth = { authorization: `Bearer ${TOKEN}` };
/** Words that must never reach a span: the query, memory text, history and the directive. */
const QUERY = 'sailing qzxquerymarker';
const HISTORY = 'Do you remember the lake? qzxhistorymarker';
const DIRECTIVE = 'You are the lake assistant. qzxdirectivemarker';

const hexId = (bytes: number) => randomBytes(bytes).toString('hex');

interface Traced {
  svc: TestService;
  receiver: OtlpReceiver;
  lines: Record<string, unknown>[];
}

async function startTraced(
  otelEnv: Record<string, string>,
  env: Record<string, string> = {},
): Promise<Traced> {
  const receiver = await startOtlpReceiver();
  const sink = logSink();
  const logger = createLogger({ logLevel: 'debug' }, sink.stream);
  const tracing = tracingConfigFromEnv({
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: receiver.url,
    OTEL_BSP_SCHEDULE_DELAY: '20',
    ...otelEnv,
  });
  const svc = await startTestService(env, {
    logger,
    tracing,
    interceptors: [bearerAuthInterceptor(parseTokenFile(TOKENS_JSON), logger)],
  });
  return { svc, receiver, lines: sink.lines };
}

const childrenOf = (spans: ReceivedSpan[], parent: ReceivedSpan) =>
  spans.filter((s) => s.traceId === parent.traceId && s.parentSpanId === parent.spanId);

describe('tracing to an OTLP/HTTP collector', () => {
  const t = tenant();
  let tr: Traced;

  beforeAll(async () => {
    tr = await startTraced({});
    const rows = memories(t.org, t.agent, 8).map((m, i) => ({
      ...m,
      content: `${m.content} qzxmemorymarker${i}`,
    }));
    tr.svc.store.upsertMemories(rows);
    tr.svc.store.setDirective({
      org_id: t.org,
      agent_id: t.agent,
      content: DIRECTIVE,
      injection_mode: 'system_first',
      version_id: '11111111-1111-4111-8111-111111111111',
    });
  });

  afterAll(async () => {
    await tr?.svc.stop();
    await tr?.receiver.close();
  });

  const call = (extra: Parameters<typeof request>[1], metadata: Record<string, string> = auth) =>
    tr.svc.client.assemble(
      request(t, {
        query: QUERY,
        recent_messages: [
          { role: 'user', content: HISTORY },
          { role: 'assistant', content: 'Yes.' },
        ],
        trace_id: '',
        span_id: '',
        ...extra,
      }),
      { metadata },
    );

  const serverSpan = async (traceId: string) =>
    (await tr.receiver.waitFor((s) => s.traceId === traceId && s.kind === 2))[0]!;

  it('puts the server span under the traceparent of the call, with a child per stage', async () => {
    const traceId = hexId(16);
    const parent = hexId(8);
    // The request fields name another trace: the metadata's traceparent wins.
    const r = await call(
      { trace_id: hexId(16), span_id: hexId(8) },
      { ...auth, traceparent: `00-${traceId}-${parent}-01`, tracestate: 'proxy=1' },
    );
    expect(r.status.code).toBe(status.OK);
    const server = await serverSpan(traceId);
    expect(server.parentSpanId).toBe(parent);
    expect(server.name).toBe('ibex.context.v1.ContextAssemblyService/AssembleContext');
    expect(server.attributes).toMatchObject({
      'rpc.system': 'grpc',
      'rpc.service': 'ibex.context.v1.ContextAssemblyService',
      'rpc.method': 'AssembleContext',
      'rpc.grpc.status_code': 0,
      'ibex.degradation.level': 'L0',
      'ibex.degradation.reasons': [],
      'ibex.memories_included': r.response!.memories_included,
    });
    expect(server.attributes['ibex.org_id']).toBeUndefined();
    expect(server.resource['service.name']).toBe('ibex-context');
    // Children arrive in the same batch as their parent or before it.
    const spans = await tr.receiver.waitFor((s) => s.traceId === traceId, 12);
    const children = childrenOf(spans, server);
    expect(spanTree(spans, server)).toBe(
      [
        'ibex.context.v1.ContextAssemblyService/AssembleContext',
        '  request.receive',
        '  retrieval.directive',
        '  retrieval.hot',
        '  retrieval.cold',
        '  ranking',
        '  pool.wait',
        '  cpu_stage',
        '    cpu_stage.budget',
        '    cpu_stage.pack',
        '    cpu_stage.format',
        '  answer.write',
      ].join('\n'),
    );
    if (process.env.IBEX_PRINT_SPAN_TREE) console.log(spanTree(spans, server, { times: true }));
    const byName = new Map(children.map((s) => [s.name, s]));
    for (const b of r.response!.degradation!.branches) {
      const s = byName.get(`retrieval.${b.name}`)!;
      expect(s.attributes).toMatchObject({ 'ibex.branch.status': b.status, 'ibex.store': 'embedded' });
      expect(s.attributes['ibex.branch.latency_ms']).toBeCloseTo(b.latency_ms, 6);
    }
    const cpu = byName.get('cpu_stage')!;
    expect(cpu.attributes).toMatchObject({
      'ibex.pack.path': 'dp',
      'ibex.pack.candidates': r.response!.metrics!.candidates_evaluated,
      'ibex.format.memories_included': r.response!.memories_included,
    });
    expect(cpu.attributes['ibex.pool.run_us']).toBe(r.response!.metrics!.pool_run_us);
    expect(
      childrenOf(spans, cpu)
        .map((s) => s.name)
        .sort(),
    ).toEqual(['cpu_stage.budget', 'cpu_stage.format', 'cpu_stage.pack']);
    // Stages in call order, inside the server span (1 ms of slack: worker and main thread clocks).
    const ms = (ns: bigint) => Number(ns) / 1e6;
    const slack = 1;
    for (const s of children) {
      expect(ms(s.startNs)).toBeGreaterThanOrEqual(ms(server.startNs) - slack);
      expect(ms(s.endNs)).toBeLessThanOrEqual(ms(server.endNs) + slack);
    }
    expect(ms(byName.get('ranking')!.startNs)).toBeGreaterThanOrEqual(
      ms(byName.get('retrieval.hot')!.endNs) - slack,
    );
    expect(ms(cpu.startNs)).toBeGreaterThanOrEqual(ms(byName.get('ranking')!.endNs) - slack);
    const [budget, pack, format] = ['budget', 'pack', 'format'].map(
      (n) => spans.find((s) => s.parentSpanId === cpu.spanId && s.name === `cpu_stage.${n}`)!,
    );
    expect(pack!.startNs).toBeGreaterThanOrEqual(budget!.endNs);
    expect(format!.startNs).toBeGreaterThanOrEqual(pack!.endNs);
    expect(ms(format!.endNs)).toBeLessThanOrEqual(ms(cpu.endNs) + slack);
    expect(ms(byName.get('answer.write')!.startNs)).toBeGreaterThanOrEqual(ms(cpu.endNs) - slack);
    // The answer's ids are the request's fields, as before tracing.
    expect(r.response!.trace_id).not.toBe(traceId);
  });

  it('takes the request trace_id/span_id as the parent when the metadata has no traceparent', async () => {
    const traceId = hexId(16);
    const parent = hexId(8);
    // A malformed traceparent is no parent: the fields are.
    const r = await call(
      { trace_id: traceId.toUpperCase(), span_id: parent },
      { ...auth, traceparent: '00-zz-1' },
    );
    expect(r.status.code).toBe(status.OK);
    expect(r.response!.trace_id).toBe(traceId.toUpperCase());
    const server = await serverSpan(traceId);
    expect(server.parentSpanId).toBe(parent);
  });

  it('starts a new trace when neither carries valid W3C ids', async () => {
    const before = new Set(tr.receiver.spans.map((s) => s.traceId));
    const r = await call({ trace_id: 'trace-1', span_id: 'span-1' });
    expect(r.status.code).toBe(status.OK);
    const [server] = await tr.receiver.waitFor(
      (s) => s.kind === 2 && !before.has(s.traceId) && s.parentSpanId === '',
    );
    expect(server!.traceId).toMatch(/^[0-9a-f]{32}$/);
  });

  it('gives a degraded call its span with level and reasons, and its log line the same ids', async () => {
    const traceId = hexId(16);
    const r = await call(
      { options: { skip_hot_memories: true, skip_cold_memories: true } },
      { ...auth, traceparent: `00-${traceId}-${hexId(8)}-01` },
    );
    expect(r.status.code).toBe(status.OK);
    const server = await serverSpan(traceId);
    expect(server.attributes).toMatchObject({
      'ibex.degradation.level': 'L2',
      'ibex.degradation.intentional': true,
      'ibex.degradation.reasons': ['hot_skipped', 'cold_skipped'],
    });
    const line = tr.lines.find((l) => l.msg === 'degraded assembly' && l.trace_id === traceId);
    expect(line).toBeDefined();
    expect(line!.span_id).toBe(server.spanId);
  });

  it('gives refused calls their span: INVALID_ARGUMENT (with its log line) and UNAUTHENTICATED', async () => {
    const badTrace = hexId(16);
    const bad = await call(
      { org_id: 'not-a-uuid' },
      { ...auth, traceparent: `00-${badTrace}-${hexId(8)}-01` },
    );
    expect(bad.status.code).toBe(status.INVALID_ARGUMENT);
    const refused = await serverSpan(badTrace);
    expect(refused.attributes).toMatchObject({ 'rpc.grpc.status_code': 3, 'error.type': 'INVALID_ARGUMENT' });
    expect(refused.status.code).toBe(0);
    const refusedChildren = (await tr.receiver.waitFor((s) => s.parentSpanId === refused.spanId)).map(
      (s) => s.name,
    );
    expect(refusedChildren).toEqual(['request.receive']);
    const line = tr.lines.find((l) => l.msg === 'AssembleContext rejected' && l.trace_id === badTrace);
    expect(line?.span_id).toBe(refused.spanId);

    const anonTrace = hexId(16);
    const anon = await call({}, { traceparent: `00-${anonTrace}-${hexId(8)}-01` });
    expect(anon.status.code).toBe(status.UNAUTHENTICATED);
    const unauth = await serverSpan(anonTrace);
    expect(unauth.attributes).toMatchObject({ 'rpc.grpc.status_code': 16, 'error.type': 'UNAUTHENTICATED' });
    expect(childrenOf(tr.receiver.spans, unauth)).toEqual([]);
  });

  it('puts no query, memory text, history, directive or token in any span', async () => {
    const traceId = hexId(16);
    await call({}, { ...auth, traceparent: `00-${traceId}-${hexId(8)}-01` });
    await tr.receiver.waitFor((s) => s.traceId === traceId, 12);
    const exported = JSON.stringify(
      tr.receiver.spans.map((s) => [s.name, s.attributes, s.status, s.resource]),
    );
    expect(tr.receiver.spans.length).toBeGreaterThan(30);
    for (const secret of [
      'qzxquerymarker',
      'qzxmemorymarker',
      'qzxhistorymarker',
      'qzxdirectivemarker',
      TOKEN,
    ])
      expect(exported).not.toContain(secret);
  });
});

describe('tracing with a collector in trouble', () => {
  const t = tenant();

  async function dropsWhile(mode: 'slow' | 'refuse' | 'down') {
    const tr = await startTraced({
      OTEL_BSP_MAX_QUEUE_SIZE: '8',
      OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '8',
      OTEL_EXPORTER_OTLP_TIMEOUT: '3000',
    });
    try {
      if (mode === 'down') await tr.receiver.close();
      else {
        tr.receiver.mode = mode;
        tr.receiver.slowMs = 5000;
      }
      const outcomes = [];
      for (let i = 0; i < 20; i++)
        outcomes.push(await tr.svc.client.assemble(request(t), { metadata: auth }));
      expect(outcomes.map((o) => o.status.code)).toEqual(outcomes.map(() => status.OK));
      const dropped = tr.svc.service.metrics.registry.getSingleMetric(
        'ibex_context_trace_spans_dropped_total',
      ) as Counter<'reason'>;
      const values = (await dropped.get()).values;
      const total = (reason: string) => values.find((v) => v.labels.reason === reason)?.value ?? 0;
      return { queueFull: total('queue_full'), exportFailed: total('export_failed') };
    } finally {
      await tr.svc.stop();
      if (mode !== 'down') await tr.receiver.close();
    }
  }

  it('answers every call while a slow collector holds the export, and counts the spans it drops', async () => {
    const { queueFull } = await dropsWhile('slow');
    // 20 calls × 12 spans against a queue of 8 while one export hangs.
    expect(queueFull).toBeGreaterThan(100);
  });

  it('answers every call while the collector is down or refuses, and counts the failed exports', async () => {
    const refused = await dropsWhile('refuse');
    expect(refused.exportFailed + refused.queueFull).toBeGreaterThan(100);
    expect(refused.exportFailed).toBeGreaterThan(0);
    const down = await dropsWhile('down');
    expect(down.exportFailed + down.queueFull).toBeGreaterThan(100);
  });
});

describe('tracing a shed call', () => {
  const t = tenant();

  it('gives a call shed at arrival its span: L2 with reason shed, a pool.wait marked shed (not an error), the degraded answer', async () => {
    // A concurrency limit of one: calls that arrive while another is in flight are shed.
    const tr = await startTraced({}, { IBEX_CONTEXT_MAX_IN_FLIGHT: '1' });
    try {
      tr.svc.store.upsertMemories(memories(t.org, t.agent, 8));
      const traces = Array.from({ length: 20 }, () => hexId(16));
      const answers = await Promise.all(
        traces.map((id) =>
          tr.svc.client.assemble(request(t), {
            metadata: { ...auth, traceparent: `00-${id}-${hexId(8)}-01` },
          }),
        ),
      );
      expect(answers.map((a) => a.status.code)).toEqual(answers.map(() => status.OK));
      const shedAt = answers.findIndex((a) => a.response?.degradation?.reasons.includes('shed'));
      expect(shedAt).toBeGreaterThanOrEqual(0);
      const server = (await tr.receiver.waitFor((s) => s.traceId === traces[shedAt] && s.kind === 2))[0]!;
      expect(server.attributes).toMatchObject({ 'ibex.degradation.level': 'L2', 'rpc.grpc.status_code': 0 });
      expect(server.attributes['ibex.degradation.reasons']).toContain('shed');
      const children = await tr.receiver.waitFor((s) => s.parentSpanId === server.spanId, 3);
      const wait = children.find((s) => s.name === 'pool.wait');
      expect(wait?.attributes['ibex.pool.outcome']).toBe('shed');
      // Shedding is the service protecting its deadline, not a fault: the span's status stays unset.
      expect(wait?.status.code).toBe(0);
      expect(children.map((s) => s.name)).toContain('answer.degraded');
    } finally {
      await tr.svc.stop();
      await tr.receiver.close();
    }
  });
});
