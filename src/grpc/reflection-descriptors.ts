// Reflection descriptors strict clients accept (Python upb, Go protodesc, @bufbuild/protobuf): proto-loader's
// names files after packages and writes `type_name: ""` on scalars (grpc-node#2958, grpcurl#519). Without
// protoc, they are built from protobufjs's parse of the real `.proto` files, the way protoc writes them.
import { createRequire } from 'node:module';
import path from 'node:path';
import type { PackageDefinition } from '@grpc/proto-loader';
import type * as Protobuf from 'protobufjs';

// The protobufjs that proto-loader itself loads, so the descriptor codec is the one @grpc/reflection uses.
const fromLoader = createRequire(createRequire(import.meta.url).resolve('@grpc/proto-loader'));
const protobuf = fromLoader('protobufjs') as typeof Protobuf;
const descriptor = fromLoader('protobufjs/ext/descriptor') as {
  FileDescriptorProto: {
    fromObject(o: object): unknown;
    encode(m: unknown): { finish(): Uint8Array };
  };
};

/** A set of `.proto` files: paths relative to `dir`, as they are imported. */
export interface ProtoSource {
  dir: string;
  files: readonly string[];
}

/** Field type numbers of descriptor.proto's `FieldDescriptorProto.Type`. */
const SCALAR_TYPES: Record<string, number> = {
  double: 1,
  float: 2,
  int64: 3,
  uint64: 4,
  int32: 5,
  fixed64: 6,
  fixed32: 7,
  bool: 8,
  string: 9,
  bytes: 12,
  uint32: 13,
  sfixed32: 15,
  sfixed64: 16,
  sint32: 17,
  sint64: 18,
};
const TYPE_MESSAGE = 11;
const TYPE_ENUM = 14;
const LABEL_OPTIONAL = 1;
const LABEL_REPEATED = 3;

/** Files of the well-known types protobufjs bundles without a file name. */
const WELL_KNOWN_FILES: Record<string, string> = {
  '.google.protobuf.Timestamp': 'google/protobuf/timestamp.proto',
  '.google.protobuf.Duration': 'google/protobuf/duration.proto',
  '.google.protobuf.Any': 'google/protobuf/any.proto',
  '.google.protobuf.Empty': 'google/protobuf/empty.proto',
  '.google.protobuf.FieldMask': 'google/protobuf/field_mask.proto',
  '.google.protobuf.Struct': 'google/protobuf/struct.proto',
  '.google.protobuf.Value': 'google/protobuf/struct.proto',
  '.google.protobuf.ListValue': 'google/protobuf/struct.proto',
  '.google.protobuf.NullValue': 'google/protobuf/struct.proto',
};

/** protoc's json_name: lowerCamelCase of the field name. */
export function jsonName(name: string): string {
  return name.replace(/_+([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

type Plain = Record<string, unknown>;

/**
 * One FileDescriptorProto (plain object, camelCase keys) per file declaring types, keyed by its import path.
 * @throws Error when a file cannot be parsed or a type reference does not resolve.
 */
export function buildFileDescriptors(sources: readonly ProtoSource[]): Map<string, Plain> {
  const root = new protobuf.Root();
  const byAbsolute = new Map<string, string>();
  const bundled = (target: string) => target.startsWith('google/protobuf/');
  root.resolvePath = (_origin, target) => {
    if (bundled(target)) return target;
    for (const s of sources) {
      const rel = path.isAbsolute(target) ? path.relative(s.dir, target) : target;
      if (!rel.startsWith('..') && s.files.includes(rel)) return path.join(s.dir, rel);
    }
    // Imports between files of one source resolve against its dir.
    return path.join(sources[0]!.dir, target);
  };
  for (const s of sources) for (const f of s.files) byAbsolute.set(path.join(s.dir, f), f);
  root.loadSync(
    sources.flatMap((s) => s.files.map((f) => path.join(s.dir, f))),
    { keepCase: true },
  );
  root.resolveAll();

  const fileOf = (obj: Protobuf.ReflectionObject): string => {
    if (obj.filename) return byAbsolute.get(obj.filename) ?? obj.filename;
    const wk = WELL_KNOWN_FILES[obj.fullName];
    if (wk) return wk;
    if (obj.parent && !(obj.parent instanceof protobuf.Root)) return fileOf(obj.parent);
    throw new Error(`no file known for ${obj.fullName}`);
  };

  const files = new Map<string, Plain & { dependency: string[] }>();
  const fileEntry = (name: string, pkg: string) => {
    let f = files.get(name);
    if (!f) {
      // Every file served here (ours, health, the well-known types) is proto3.
      f = {
        name,
        package: pkg,
        dependency: [],
        messageType: [],
        enumType: [],
        service: [],
        syntax: 'proto3',
      };
      files.set(name, f);
    }
    return f;
  };
  const use = (from: Plain & { dependency: string[] }, target: Protobuf.ReflectionObject) => {
    const name = fileOf(target);
    if (name !== from.name && !from.dependency.includes(name)) from.dependency.push(name);
  };

  const enumDesc = (e: Protobuf.Enum): Plain => ({
    name: e.name,
    value: Object.entries(e.values).map(([name, number]) => ({ name, number })),
  });

  const messageDesc = (t: Protobuf.Type, file: Plain & { dependency: string[] }): Plain => {
    const nestedType: Plain[] = [];
    const enumType: Plain[] = [];
    for (const n of t.nestedArray) {
      if (n instanceof protobuf.Type) nestedType.push(messageDesc(n, file));
      else if (n instanceof protobuf.Enum) enumType.push(enumDesc(n));
    }
    // Real oneofs only: a proto3 `optional` field's synthetic oneof comes after them (protoc's order).
    const oneofs = t.oneofsArray.filter((o) => !o.fieldsArray.every((f) => f.options?.proto3_optional));
    const synthetic = t.oneofsArray.filter((o) => !oneofs.includes(o));
    const oneofOrder = [...oneofs, ...synthetic];
    const field = t.fieldsArray.map((f): Plain => {
      const d: Plain = { name: f.name, number: f.id, jsonName: jsonName(f.name) };
      if (f instanceof protobuf.MapField) {
        const entryName = `${f.name.replace(/(?:^|_)([a-z])/g, (_, c: string) => c.toUpperCase())}Entry`;
        const kv = (name: string, number: number, type: string, resolved: Protobuf.ReflectionObject | null) =>
          scalarOrRef({ name, number, jsonName: name }, type, resolved, file, LABEL_OPTIONAL);
        nestedType.push({
          name: entryName,
          field: [kv('key', 1, f.keyType, null), kv('value', 2, f.type, f.resolvedType)],
          options: { mapEntry: true },
        });
        d.label = LABEL_REPEATED;
        d.type = TYPE_MESSAGE;
        d.typeName = `${t.fullName}.${entryName}`;
        return d;
      }
      const label = f.repeated ? LABEL_REPEATED : LABEL_OPTIONAL;
      const out = scalarOrRef(d, f.type, f.resolvedType, file, label);
      if (f.partOf) out.oneofIndex = oneofOrder.indexOf(f.partOf);
      if (f.options?.proto3_optional) out.proto3Optional = true;
      if (f.repeated && f.packed === false && SCALAR_TYPES[f.type] !== undefined)
        out.options = { packed: false };
      return out;
    });
    const desc: Plain = { name: t.name, field, nestedType, enumType };
    if (oneofOrder.length > 0) desc.oneofDecl = oneofOrder.map((o) => ({ name: o.name }));
    return desc;
  };

  const scalarOrRef = (
    d: Plain,
    type: string,
    resolved: Protobuf.ReflectionObject | null,
    file: Plain & { dependency: string[] },
    label: number,
  ): Plain => {
    d.label = label;
    const scalar = SCALAR_TYPES[type];
    if (scalar !== undefined) {
      d.type = scalar;
      return d; // no type_name on a scalar: strict runtimes reject an empty one
    }
    if (!resolved) throw new Error(`unresolved type ${type}`);
    d.type = resolved instanceof protobuf.Enum ? TYPE_ENUM : TYPE_MESSAGE;
    d.typeName = resolved.fullName;
    use(file, resolved);
    return d;
  };

  const visit = (ns: Protobuf.Namespace) => {
    for (const n of ns.nestedArray) {
      if (n instanceof protobuf.Type || n instanceof protobuf.Enum || n instanceof protobuf.Service) {
        const file = fileEntry(fileOf(n), ns.fullName.replace(/^\./, ''));
        if (n instanceof protobuf.Type) (file.messageType as Plain[]).push(messageDesc(n, file));
        else if (n instanceof protobuf.Enum) (file.enumType as Plain[]).push(enumDesc(n));
        else {
          const method = n.methodsArray.map((m) => {
            m.resolve();
            use(file, m.resolvedRequestType!);
            use(file, m.resolvedResponseType!);
            const md: Plain = {
              name: m.name,
              inputType: m.resolvedRequestType!.fullName,
              outputType: m.resolvedResponseType!.fullName,
            };
            if (m.requestStream) md.clientStreaming = true;
            if (m.responseStream) md.serverStreaming = true;
            return md;
          });
          (file.service as Plain[]).push({ name: n.name, method });
        }
      } else if (n instanceof protobuf.Namespace) {
        visit(n);
      }
    }
  };
  visit(root);
  return files;
}

/**
 * A package definition for `new ReflectionService(…)` holding only the file descriptors of `sources`.
 * @throws Error as {@link buildFileDescriptors}.
 */
export function reflectionPackageDefinition(sources: readonly ProtoSource[]): PackageDefinition {
  const out: PackageDefinition = {};
  for (const [name, file] of buildFileDescriptors(sources)) {
    const bytes = descriptor.FileDescriptorProto.encode(
      descriptor.FileDescriptorProto.fromObject(file),
    ).finish();
    out[name] = { fileDescriptorProtos: [Buffer.from(bytes)] } as unknown as PackageDefinition[string];
  }
  return out;
}
