/**
 * A real OTLP/HTTP trace receiver for tests: a node:http server on loopback port 0 that decodes each
 * `POST /v1/traces` body (protobuf `ExportTraceServiceRequest`) with the OpenTelemetry proto definitions
 * vendored in test/fixtures/third_party/opentelemetry-proto/, and keeps the spans. It can also answer
 * slowly or refuse, to play a collector in trouble.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';

const PROTO_ROOT = path.resolve(
  path.dirname(fileURLToPath(import.meta.url)),
  '../fixtures/third_party/opentelemetry-proto',
);

const root = new protobuf.Root();
root.resolvePath = (_origin, target) => path.join(PROTO_ROOT, target);
root.loadSync('opentelemetry/proto/collector/trace/v1/trace_service.proto', { keepCase: false });
const ExportRequest = root.lookupType('opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest');
const ExportResponse = root.lookupType('opentelemetry.proto.collector.trace.v1.ExportTraceServiceResponse');

/** An attribute value as decoded (AnyValue's one set field). */
export type AttributeValue = string | number | boolean | AttributeValue[] | null;

/** One received span, ids in lowercase hex, times in ns since the epoch. */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** '' for a root span. */
  parentSpanId: string;
  name: string;
  /** OTLP SpanKind: 1 internal, 2 server, … */
  kind: number;
  startNs: bigint;
  endNs: bigint;
  attributes: Record<string, AttributeValue>;
  /** OTLP status code: 0 unset, 1 ok, 2 error. */
  status: { code: number; message: string };
  resource: Record<string, AttributeValue>;
}

/** How the receiver answers. */
export type ReceiverMode = 'ok' | 'slow' | 'refuse';

export interface OtlpReceiver {
  /** Full traces URL (`http://127.0.0.1:<port>/v1/traces`). */
  url: string;
  spans: ReceivedSpan[];
  /** Export requests received (any mode). */
  requests: number;
  mode: ReceiverMode;
  /** Delay of a `slow` answer, ms. */
  slowMs: number;
  /** Resolves with the spans matching `pred` once there are at least `n` (rejects after `timeoutMs`). */
  waitFor(pred: (s: ReceivedSpan) => boolean, n?: number, timeoutMs?: number): Promise<ReceivedSpan[]>;
  close(): Promise<void>;
}

interface DecodedAnyValue {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: string;
  doubleValue?: number;
  arrayValue?: { values?: DecodedAnyValue[] };
}

function value(v: DecodedAnyValue | undefined): AttributeValue {
  if (!v) return null;
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.arrayValue) return (v.arrayValue.values ?? []).map(value);
  return null;
}

function attributes(
  kvs: { key: string; value?: DecodedAnyValue }[] | undefined,
): Record<string, AttributeValue> {
  const out: Record<string, AttributeValue> = {};
  for (const kv of kvs ?? []) out[kv.key] = value(kv.value);
  return out;
}

const hex = (b: Uint8Array | undefined) => (b ? Buffer.from(b).toString('hex') : '');

/** Decodes one export body into spans. */
export function decodeExport(body: Uint8Array): ReceivedSpan[] {
  // biome-ignore lint/suspicious/noExplicitAny: protobufjs toObject output, typed field by field below.
  const msg = ExportRequest.toObject(ExportRequest.decode(body), { longs: String, defaults: false }) as any;
  const spans: ReceivedSpan[] = [];
  for (const rs of msg.resourceSpans ?? []) {
    const resource = attributes(rs.resource?.attributes);
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        spans.push({
          traceId: hex(s.traceId),
          spanId: hex(s.spanId),
          parentSpanId: hex(s.parentSpanId),
          name: s.name,
          kind: s.kind ?? 0,
          startNs: BigInt(s.startTimeUnixNano ?? 0),
          endNs: BigInt(s.endTimeUnixNano ?? 0),
          attributes: attributes(s.attributes),
          status: { code: s.status?.code ?? 0, message: s.status?.message ?? '' },
          resource,
        });
      }
    }
  }
  return spans;
}

/** Starts the receiver on 127.0.0.1, port 0. */
export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const sockets = new Set<import('node:net').Socket>();
  const receiver: OtlpReceiver = {
    url: '',
    spans: [],
    requests: 0,
    mode: 'ok',
    slowMs: 2000,
    async waitFor(pred, n = 1, timeoutMs = 5000) {
      const until = Date.now() + timeoutMs;
      for (;;) {
        const found = receiver.spans.filter(pred);
        if (found.length >= n) return found;
        if (Date.now() > until)
          throw new Error(`waited ${timeoutMs} ms for ${n} span(s); have ${found.length}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      receiver.requests++;
      if (req.method !== 'POST' || req.url !== '/v1/traces') {
        res.writeHead(404).end();
        return;
      }
      if (receiver.mode === 'refuse') {
        // 400 is not retryable (OTLP/HTTP): the batch fails at once.
        res.writeHead(400).end();
        return;
      }
      const answer = () => {
        receiver.spans.push(...decodeExport(Buffer.concat(chunks)));
        const body = ExportResponse.encode(ExportResponse.create({})).finish();
        res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end(Buffer.from(body));
      };
      if (receiver.mode === 'slow') setTimeout(answer, receiver.slowMs);
      else answer();
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  receiver.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`;
  return receiver;
}

/** Stage order of the spans under a call's server span (call order; the branches run side by side). */
const STAGE_ORDER = [
  'request.receive',
  'retrieval.directive',
  'retrieval.hot',
  'retrieval.cold',
  'ranking',
  'pool.wait',
  'cpu_stage',
  'cpu_stage.budget',
  'cpu_stage.pack',
  'cpu_stage.format',
  'answer.degraded',
  'answer.write',
];

/**
 * The tree under `root` as text, one span per line, children in stage order; with `times`, each span's
 * start after the root's and its duration (ms), and its attributes.
 */
export function spanTree(
  spans: readonly ReceivedSpan[],
  root: ReceivedSpan,
  opts: { times?: boolean } = {},
): string {
  const lines: string[] = [];
  const ms = (ns: bigint) => (Number(ns) / 1e6).toFixed(3);
  const walk = (s: ReceivedSpan, depth: number) => {
    let line = `${'  '.repeat(depth)}${s.name}`;
    if (opts.times) {
      const attrs = Object.entries(s.attributes).map(([k, v]) => `${k}=${JSON.stringify(v)}`);
      line += `  +${ms(s.startNs - root.startNs)} ms, ${ms(s.endNs - s.startNs)} ms`;
      if (s.status.code === 2) line += `  status=ERROR(${s.status.message})`;
      if (attrs.length > 0) line += `  ${attrs.join(' ')}`;
    }
    lines.push(line);
    const kids = spans
      .filter((c) => c.traceId === s.traceId && c.parentSpanId === s.spanId)
      .sort((a, b) => STAGE_ORDER.indexOf(a.name) - STAGE_ORDER.indexOf(b.name));
    for (const k of kids) walk(k, depth + 1);
  };
  walk(root, 0);
  return lines.join('\n');
}
