/**
 * The descriptor builder behind server reflection on proto shapes our own protos do not use
 * yet — maps, oneofs, proto3 `optional`, nested enums and messages, streaming methods, a well-known type —
 * checked the way a strict runtime reads them: @bufbuild/protobuf's `createFileRegistry` must accept the
 * files, and the fields must come out as protoc writes them.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createFileRegistry, fromBinary } from '@bufbuild/protobuf';
import { type FileDescriptorProto, FileDescriptorProtoSchema } from '@bufbuild/protobuf/wkt';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jsonName, reflectionPackageDefinition } from '../../src/grpc/reflection-descriptors.js';

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'ibex-reflect-'));
  mkdirSync(path.join(dir, 'shape/v1'), { recursive: true });
  writeFileSync(
    path.join(dir, 'shape/v1/common.proto'),
    'syntax = "proto3";\npackage shape.v1;\nenum Color { COLOR_UNSPECIFIED = 0; RED = 1; }\n',
  );
  writeFileSync(
    path.join(dir, 'shape/v1/shape.proto'),
    `syntax = "proto3";
package shape.v1;
import "google/protobuf/duration.proto";
import "shape/v1/common.proto";
message Shape {
  enum Kind { KIND_UNSPECIFIED = 0; SQUARE = 1; }
  message Corner { int32 x_pos = 1; }
  map<string, Corner> corners_by_name = 1;
  oneof size { int32 side = 2; double radius = 3; }
  optional string label = 4;
  Kind kind = 5;
  Color color = 6;
  repeated Corner corners = 7;
  google.protobuf.Duration ttl = 8;
}
service Shapes {
  rpc Get(Shape) returns (Shape);
  rpc Watch(Shape) returns (stream Shape);
}
`,
  );
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function files(): Map<string, FileDescriptorProto> {
  const def = reflectionPackageDefinition([
    { dir, files: ['shape/v1/shape.proto', 'shape/v1/common.proto'] },
  ]);
  const out = new Map<string, FileDescriptorProto>();
  for (const entry of Object.values(def)) {
    for (const bytes of (entry as unknown as { fileDescriptorProtos: Buffer[] }).fileDescriptorProtos) {
      const f = fromBinary(FileDescriptorProtoSchema, bytes);
      out.set(f.name, f);
    }
  }
  return out;
}

describe('reflection descriptors on richer protos', () => {
  it('names files by import path and lists their imports', () => {
    const fs = files();
    expect([...fs.keys()].sort()).toEqual([
      'google/protobuf/duration.proto',
      'shape/v1/common.proto',
      'shape/v1/shape.proto',
    ]);
    expect([...fs.get('shape/v1/shape.proto')!.dependency].sort()).toEqual([
      'google/protobuf/duration.proto',
      'shape/v1/common.proto',
    ]);
  });

  it('writes maps, oneofs, proto3 optional and references as protoc does', () => {
    const shape = files().get('shape/v1/shape.proto')!.messageType[0]!;
    const field = (name: string) => shape.field.find((f) => f.name === name)!;
    expect(field('corners_by_name')).toMatchObject({
      label: 3,
      type: 11,
      typeName: '.shape.v1.Shape.CornersByNameEntry',
    });
    const entry = shape.nestedType.find((n) => n.name === 'CornersByNameEntry')!;
    expect(entry.options?.mapEntry).toBe(true);
    expect(entry.field.map((f) => [f.name, f.number, f.type, f.typeName])).toEqual([
      ['key', 1, 9, ''],
      ['value', 2, 11, '.shape.v1.Shape.Corner'],
    ]);
    expect(shape.oneofDecl.map((o) => o.name)).toEqual(['size', '_label']);
    expect(field('side').oneofIndex).toBe(0);
    expect(field('radius').oneofIndex).toBe(0);
    expect(field('label')).toMatchObject({ oneofIndex: 1, proto3Optional: true, type: 9, typeName: '' });
    expect(field('kind')).toMatchObject({ type: 14, typeName: '.shape.v1.Shape.Kind' });
    expect(field('color')).toMatchObject({ type: 14, typeName: '.shape.v1.Color' });
    expect(field('corners')).toMatchObject({ label: 3, type: 11, typeName: '.shape.v1.Shape.Corner' });
    expect(field('ttl')).toMatchObject({ type: 11, typeName: '.google.protobuf.Duration' });
    expect(shape.nestedType.find((n) => n.name === 'Corner')!.field[0]).toMatchObject({
      jsonName: 'xPos',
      type: 5,
    });
  });

  it('is accepted by a strict registry, methods and streaming included', () => {
    const fs = files();
    const registry = createFileRegistry(fs.get('shape/v1/shape.proto')!, (n) => fs.get(n));
    const svc = registry.getService('shape.v1.Shapes')!;
    expect(svc.methods.map((m) => [m.name, m.methodKind])).toEqual([
      ['Get', 'unary'],
      ['Watch', 'server_streaming'],
    ]);
    const msg = registry.getMessage('shape.v1.Shape')!;
    expect(msg.oneofs.map((o) => o.name)).toEqual(['size']);
    expect(msg.fields.find((f) => f.name === 'corners_by_name')!.fieldKind).toBe('map');
  });

  it('jsonName is lowerCamelCase as protoc computes it', () => {
    expect(jsonName('memories_used')).toBe('memoriesUsed');
    expect(jsonName('x')).toBe('x');
    expect(jsonName('pool_wait_us')).toBe('poolWaitUs');
  });
});
