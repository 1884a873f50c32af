import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  ASSEMBLED_UTF8,
  type AssembleContextResponse,
  contextServiceDefinition,
  PROTO_DIR,
  packageDefinition,
  resolveProtoDir,
  SplicedMessage,
  serializeAssembleResponse,
  serializeAssembleResponseBuffer,
} from '../../src/wire/proto.js';
import { SplicedBuilder } from '../../src/wire/spliced.js';
import { stubResponse } from '../helpers/stub-response.js';

interface FieldDescriptor {
  name: string;
  number: number;
  type: string;
  label: string;
  typeName: string;
}

function fields(message: string): Map<string, FieldDescriptor> {
  const def = packageDefinition[message] as unknown as { type: { field: FieldDescriptor[] } };
  return new Map(def.type.field.map((f) => [f.name, f]));
}

describe('resolveProtoDir', () => {
  it('finds proto/ from both src/server and dist/src/server layouts', () => {
    const root = mkdtempSync(path.join(os.tmpdir(), 'ibex-proto-'));
    try {
      mkdirSync(path.join(root, 'proto', 'ibex'), { recursive: true });
      mkdirSync(path.join(root, 'dist', 'src', 'server'), { recursive: true });
      mkdirSync(path.join(root, 'src', 'server'), { recursive: true });
      expect(resolveProtoDir(path.join(root, 'src', 'server'))).toBe(path.join(root, 'proto'));
      expect(resolveProtoDir(path.join(root, 'dist', 'src', 'server'))).toBe(path.join(root, 'proto'));
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  it('throws when there is no proto/ibex above', () => {
    expect(() => resolveProtoDir(os.tmpdir())).toThrow(/cannot find proto\/ibex/);
  });

  it('resolved the project proto directory', () => {
    expect(PROTO_DIR.endsWith(`${path.sep}proto`)).toBe(true);
  });
});

describe('wire contract (contract.md §2)', () => {
  it('serves the three unary methods under ibex.context.v1', () => {
    expect(Object.keys(contextServiceDefinition).sort()).toEqual([
      'AssembleContext',
      'RecordMemoryFeedback',
      'SearchMemories',
    ]);
    for (const m of Object.values(contextServiceDefinition)) {
      expect(m.requestStream || m.responseStream).toBe(false);
      expect(m.path.startsWith('/ibex.context.v1.ContextAssemblyService/')).toBe(true);
    }
  });

  it('keeps upstream field numbers and puts our additions at ≥ 100', () => {
    const req = fields('ibex.context.v1.AssembleContextRequest');
    expect([...req].map(([n, f]) => [n, f.number])).toEqual([
      ['agent_id', 1],
      ['org_id', 2],
      ['session_id', 3],
      ['query', 4],
      ['model', 5],
      ['directive_version_id', 6],
      ['available_tokens', 7],
      ['recent_messages', 8],
      ['options', 9],
      ['request_id', 10],
      ['trace_id', 11],
      ['span_id', 12],
      ['principal_context', 13],
    ]);
    // protobufjs keeps package-relative names here; reflection gets linked ones (grpc-server.test.ts).
    expect(req.get('principal_context')?.typeName).toMatch(/^(\.?ibex\.)?auth\.v1\.PrincipalContext$/);

    const res = fields('ibex.context.v1.AssembleContextResponse');
    expect(res.get('score_schema')?.number).toBe(12);
    expect(res.get('degradation')).toMatchObject({ number: 100, type: 'TYPE_MESSAGE' });
    expect(res.get('degradation')?.typeName).toMatch(/Degradation$/);

    const metrics = fields('ibex.context.v1.AssemblyMetrics');
    expect(metrics.get('candidates_evaluated')?.number).toBe(9);
    expect(metrics.get('pool_wait_us')).toMatchObject({ number: 100, type: 'TYPE_INT32' });
    expect(metrics.get('pool_run_us')).toMatchObject({ number: 101, type: 'TYPE_INT32' });

    const used = fields('ibex.context.v1.MemoryUsed');
    expect(used.get('token_estimate')).toMatchObject({ number: 11, type: 'TYPE_INT32' });
    expect(used.get('composite_score')?.type).toBe('TYPE_FLOAT');

    const branch = fields('ibex.context.v1.BranchOutcome');
    expect(branch.get('latency_ms')).toMatchObject({ number: 3, type: 'TYPE_FLOAT' });

    const principal = fields('ibex.auth.v1.PrincipalContext');
    expect(principal.get('permissions')).toMatchObject({ number: 13, type: 'TYPE_INT64' });
    expect(principal.get('issued_at')?.typeName).toMatch(/google\.protobuf\.Timestamp$/);
    expect(principal.get('token_id')?.number).toBe(14);
  });
});

describe('AssembleContext answer serializer', () => {
  it("writes the CPU stage's UTF-8 context bytes as assembled_context (string field left empty), any length", () => {
    const decode = (b: Buffer) =>
      contextServiceDefinition.AssembleContext!.responseDeserialize(b) as AssembleContextResponse;
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme', maxLength: 300 }), fc.nat(20_000), (text, pad) => {
        const context = text + 'x'.repeat(pad);
        const base = stubResponse({ requestId: 'r', traceId: 't', spanId: 's' } as never);
        // The text as the producer wrote it, then the padding as a span of the source bytes.
        const source = Buffer.from(`head${'x'.repeat(pad)}`, 'utf8');
        const own = new SplicedBuilder(source);
        own.text(text);
        own.bytes(4, source.length);
        const withBytes = { ...base, assembled_context: '', [ASSEMBLED_UTF8]: own.finish() };
        const serialized = serializeAssembleResponse(withBytes) as unknown;
        if (context.length > 0) expect(serialized).toBeInstanceOf(SplicedMessage);
        const out = decode(serializeAssembleResponseBuffer(withBytes));
        expect(out.assembled_context).toBe(context);
        expect(out.request_id).toBe('r');
        expect(
          decode(serializeAssembleResponse({ ...base, assembled_context: context })).assembled_context,
        ).toBe(context);
      }),
      { numRuns: 50 },
    );
  });
});
