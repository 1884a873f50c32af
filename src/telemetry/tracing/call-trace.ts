// One call's trace (contract.md §12): a server span, and child spans built at its end from times the
// pipeline already records; nothing wraps an await. Attributes are closed (ids, counts, durations, outcome
// names): memory text, queries, history and credentials have no path into a span.
import type { Metadata } from '@grpc/grpc-js';
import { status } from '@grpc/grpc-js';
import {
  type Attributes,
  type Context,
  isValidSpanId,
  isValidTraceId,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  type TextMapGetter,
  TraceFlags,
  type Tracer,
  trace,
} from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import {
  ATTR_ERROR_TYPE,
  ATTR_RPC_METHOD,
  ATTR_RPC_SYSTEM_NAME,
  RPC_SYSTEM_NAME_VALUE_GRPC,
} from '@opentelemetry/semantic-conventions';
import type { Logger } from 'pino';
import type { CpuStageResult } from '../../pool/pool-client.js';
import { monotonicNow } from '../../util/clock.js';
import type { BranchOutcome } from '../../wire/types.js';

export const SERVER_SPAN_NAME = 'ibex.context.v1.ContextAssemblyService/AssembleContext';

/** gRPC codes that make a server span an error (OpenTelemetry): server faults, not caller's. */
const SERVER_FAULTS: ReadonlySet<number> = new Set([
  status.UNKNOWN,
  status.DEADLINE_EXCEEDED,
  status.UNIMPLEMENTED,
  status.INTERNAL,
  status.UNAVAILABLE,
  status.DATA_LOSS,
]);

/** Branch details are dependency messages; bounded so a long error body cannot bloat a span. */
const MAX_DETAIL_CHARS = 128;

const propagator = new W3CTraceContextPropagator();

const metadataGetter: TextMapGetter<Metadata> = {
  keys: (md) => Object.keys(md.getMap()),
  get: (md, key) => {
    const values = md.get(key);
    if (values.length === 0) return undefined;
    return values.length === 1 ? String(values[0]) : values.map(String);
  },
};

/** What every call's trace shares; built once by startTracing. */
export interface TraceCore {
  tracer: Tracer;
  /** Whether a call parented only by the request's id fields is sampled (they carry no sampled flag). */
  sampleFieldParent(traceId: string): boolean;
  /** Put org and agent ids on the server span. */
  tenantIds: boolean;
  /** Store kinds, e.g. `{ directive: 'redis', memory: 'postgres' }`. */
  stores: { directive: string; memory: string };
}

/** The part of the decoded request a trace reads: ids only. */
interface RequestIds {
  trace_id?: unknown;
  span_id?: unknown;
  org_id?: unknown;
  agent_id?: unknown;
}

/** The part of the answer a trace reads: its degradation record and counts, never its context. */
interface AnswerFacts {
  degradation?: { level: string; intentional: boolean; reasons: readonly string[] };
  memories_included?: number;
  tokens_used?: number;
}

function wireText(v: unknown): string {
  if (typeof v === 'string') return v;
  // WireString (src/request/wire-request.ts) decodes lazily; org/agent ids are short.
  return v != null && typeof (v as { toString(): string }).toString === 'function' ? String(v) : '';
}

/** Tracks one call from its metadata to its status. */
export class CallTrace {
  private span: Span | undefined;
  private metadata: Metadata | undefined;
  private request: RequestIds | undefined;
  private handledAt = 0;
  private retrievalStart = 0;
  private retrievalEnd = 0;
  private branches: readonly BranchOutcome[] | undefined;
  private assembledAt = 0;
  private rankingMs = 0;
  private stage: CpuStageResult | null = null;
  private poolReason: string | null = null;
  private candidates = { kept: 0, filtered: 0 };
  private writeStart = 0;
  private answer: AnswerFacts | undefined;
  private ended = false;
  private logParent: Logger | undefined;
  private logChild: Logger | undefined;

  /** @param arrival when the call reached the server, ms on the monotonicNow clock (epoch ms). */
  constructor(
    private readonly core: TraceCore,
    readonly arrival: number,
  ) {}

  /** The call's request metadata: its `traceparent` / `tracestate` are the parent. */
  received(metadata: Metadata): void {
    this.metadata = metadata;
  }

  /** The decoded request: its trace ids are the parent when the metadata carries none. */
  requested(request: unknown): void {
    if (request && typeof request === 'object') this.request = request as RequestIds;
  }

  /** The server span, started at the call's arrival once its parent is known (at the latest, at its end). */
  private serverSpan(): Span {
    if (this.span) return this.span;
    this.span = this.core.tracer.startSpan(
      SERVER_SPAN_NAME,
      {
        kind: SpanKind.SERVER,
        startTime: this.arrival,
        attributes: {
          'rpc.system': 'grpc',
          [ATTR_RPC_SYSTEM_NAME]: RPC_SYSTEM_NAME_VALUE_GRPC,
          'rpc.service': 'ibex.context.v1.ContextAssemblyService',
          [ATTR_RPC_METHOD]: 'AssembleContext',
        },
      },
      this.parentContext(),
    );
    return this.span;
  }

  private parentContext(): Context {
    if (this.metadata) {
      const extracted = propagator.extract(ROOT_CONTEXT, this.metadata, metadataGetter);
      if (trace.getSpanContext(extracted)) return extracted;
    }
    const traceId = this.request?.trace_id;
    const spanId = this.request?.span_id;
    if (typeof traceId === 'string' && typeof spanId === 'string') {
      const t = traceId.toLowerCase();
      const s = spanId.toLowerCase();
      if (/^[0-9a-f]{32}$/.test(t) && /^[0-9a-f]{16}$/.test(s) && isValidTraceId(t) && isValidSpanId(s)) {
        return trace.setSpanContext(ROOT_CONTEXT, {
          traceId: t,
          spanId: s,
          isRemote: true,
          traceFlags: this.core.sampleFieldParent(t) ? TraceFlags.SAMPLED : TraceFlags.NONE,
        });
      }
    }
    return ROOT_CONTEXT;
  }

  /** `trace_id` and `span_id` of the server span, for log lines. */
  logIds(): { trace_id: string; span_id: string } {
    const sc = this.serverSpan().spanContext();
    return { trace_id: sc.traceId, span_id: sc.spanId };
  }

  /** A child of `parent` carrying `trace_id` and `span_id`; made on first use and kept for the call. */
  log(parent: Logger): Logger {
    if (this.logParent !== parent || !this.logChild) {
      this.logParent = parent;
      this.logChild = parent.child(this.logIds());
    }
    return this.logChild;
  }

  /** The handler started (the request received and decoded), ms on the monotonicNow clock. */
  handled(at: number): void {
    this.handledAt = at;
  }

  /** Retrieval ran from `start` to `end` (ms, monotonicNow clock) with these branch outcomes. */
  retrieved(start: number, end: number, branches: readonly BranchOutcome[]): void {
    this.retrievalStart = start;
    this.retrievalEnd = end;
    this.branches = branches;
  }

  /** The answer is about to be built: ranking time, CPU-stage result (or why none), candidates kept/cut. */
  assembled(
    rankingMs: number,
    stage: CpuStageResult | null,
    poolReason: string | null,
    kept: number,
    filtered: number,
  ): void {
    this.assembledAt = monotonicNow();
    this.rankingMs = rankingMs;
    this.stage = stage;
    this.poolReason = poolReason;
    this.candidates = { kept, filtered };
  }

  /** The answer's first byte goes out (its metadata). */
  writing(): void {
    if (this.writeStart === 0) this.writeStart = monotonicNow();
  }

  /** The answer message (read for its degradation record and counts). */
  responded(answer: unknown): void {
    this.writing();
    if (answer && typeof answer === 'object') this.answer = answer as AnswerFacts;
  }

  /** The call ended with `code`: the server span and its children are finished and handed to export. */
  end(code: number): void {
    if (this.ended) return;
    this.ended = true;
    const span = this.serverSpan();
    if (!span.isRecording()) {
      span.end();
      return;
    }
    const end = monotonicNow();
    const attrs: Attributes = { 'rpc.grpc.status_code': code };
    if (code !== status.OK) attrs[ATTR_ERROR_TYPE] = status[code] ?? String(code);
    const d = this.answer?.degradation;
    if (d) {
      attrs['ibex.degradation.level'] = d.level;
      attrs['ibex.degradation.intentional'] = d.intentional;
      attrs['ibex.degradation.reasons'] = [...d.reasons];
      attrs['ibex.memories_included'] = this.answer?.memories_included ?? 0;
      attrs['ibex.tokens_used'] = this.answer?.tokens_used ?? 0;
    }
    if (this.core.tenantIds && this.request) {
      attrs['ibex.org_id'] = wireText(this.request.org_id);
      attrs['ibex.agent_id'] = wireText(this.request.agent_id);
    }
    span.setAttributes(attrs);
    if (SERVER_FAULTS.has(code)) span.setStatus({ code: SpanStatusCode.ERROR, message: status[code] });
    this.children(span, end);
    span.end(end);
  }

  private child(parent: Context, name: string, start: number, end: number, attributes: Attributes): Span {
    const s = this.core.tracer.startSpan(name, { startTime: start, attributes }, parent);
    s.end(Math.max(start, end));
    return s;
  }

  /** The stage spans, from the recorded times; a stage the call never reached has none. */
  private children(span: Span, end: number): void {
    const parent = trace.setSpan(ROOT_CONTEXT, span);
    if (this.handledAt > 0) this.child(parent, 'request.receive', this.arrival, this.handledAt, {});
    if (this.branches) {
      for (const b of this.branches) {
        const attrs: Attributes = {
          'ibex.branch': b.name,
          'ibex.branch.status': b.status,
          'ibex.branch.latency_ms': b.latency_ms,
          'ibex.store': b.name === 'directive' ? this.core.stores.directive : this.core.stores.memory,
        };
        if (b.detail) attrs['ibex.branch.detail'] = b.detail.slice(0, MAX_DETAIL_CHARS);
        const s = this.core.tracer.startSpan(
          `retrieval.${b.name}`,
          { startTime: this.retrievalStart, attributes: attrs },
          parent,
        );
        if (b.status === 'error' || b.status === 'timeout')
          s.setStatus({ code: SpanStatusCode.ERROR, message: b.status });
        s.end(this.retrievalStart + b.latency_ms);
      }
    }
    if (this.assembledAt === 0) {
      if (this.writeStart > 0) this.child(parent, 'answer.write', this.writeStart, end, {});
      return;
    }
    const stage = this.stage;
    // With a result, the task was sent its measured wait before the worker started it.
    const dispatched = stage
      ? stage.output.started_at - stage.wait_us / 1000
      : this.retrievalEnd + this.rankingMs;
    this.child(parent, 'ranking', dispatched - this.rankingMs, dispatched, {
      'ibex.candidates.kept': this.candidates.kept,
      'ibex.candidates.filtered': this.candidates.filtered,
    });
    if (stage) {
      const out = stage.output;
      const runStart = out.started_at;
      this.child(parent, 'pool.wait', dispatched, runStart, {
        'ibex.pool.wait_us': Math.round(stage.wait_us),
      });
      const cpu = this.core.tracer.startSpan(
        'cpu_stage',
        {
          startTime: runStart,
          attributes: {
            'ibex.pool.run_us': Math.round(stage.run_us),
            'ibex.budget.usable': out.budget?.usable_budget ?? 0,
            'ibex.pack.path': out.pack.path,
            'ibex.pack.greedy_reason': out.pack.greedy_reason ?? '',
            'ibex.pack.candidates': out.pack.candidates_evaluated,
            'ibex.pack.excluded': out.excluded.length,
            'ibex.format.memories_included': out.memories_included,
          },
        },
        parent,
      );
      // Budget, pack and format run in this order inside the task; placed back to back from its start.
      const inCpu = trace.setSpan(ROOT_CONTEXT, cpu);
      const budgetEnd = runStart + out.budget_us / 1000;
      const packEnd = budgetEnd + out.pack_us / 1000;
      this.child(inCpu, 'cpu_stage.budget', runStart, budgetEnd, {});
      this.child(inCpu, 'cpu_stage.pack', budgetEnd, packEnd, { 'ibex.pack.path': out.pack.path });
      this.child(inCpu, 'cpu_stage.format', packEnd, packEnd + out.format_us / 1000, {});
      cpu.end(runStart + stage.run_us / 1000);
    } else {
      const wait = this.core.tracer.startSpan(
        'pool.wait',
        { startTime: dispatched, attributes: { 'ibex.pool.outcome': this.poolReason ?? 'none' } },
        parent,
      );
      if (this.poolReason !== 'shed')
        wait.setStatus({ code: SpanStatusCode.ERROR, message: this.poolReason ?? 'no result' });
      wait.end(Math.max(dispatched, this.assembledAt));
      if (this.writeStart > 0) this.child(parent, 'answer.degraded', this.assembledAt, this.writeStart, {});
    }
    if (this.writeStart > 0) this.child(parent, 'answer.write', this.writeStart, end, {});
  }
}
