// What the patches share: the grpc-js version, its private modules, and the fields two patches both touch.
import { createRequire } from 'node:module';

/** The @grpc/grpc-js version every patch here was read against (a test checks package.json pins it). */
export const GRPC_JS_PATCHED_VERSION = '1.14.7';

/** Thrown at start-up when a private field or method a patch needs is gone (a grpc-js upgrade). */
export class GrpcJsInternalsChanged extends Error {
  constructor(what: string) {
    super(`grpc-js internals changed: ${what}`);
    this.name = 'GrpcJsInternalsChanged';
  }
}

const requireCjs = createRequire(import.meta.url);

/** A private grpc-js module by its path under `build/src/` (e.g. `stream-decoder.js`). */
export function grpcJsModule<M>(file: string): M {
  return requireCjs(`@grpc/grpc-js/build/src/${file}`) as M;
}

export interface ServerInterceptorsModule {
  BaseServerInterceptingCall?: { prototype: Record<string | symbol, unknown> };
}

/** `BaseServerInterceptingCall.prototype` with `methods`. @throws GrpcJsInternalsChanged when one is gone. */
export function serverCallPrototype<P>(
  methods: readonly string[],
  mod: ServerInterceptorsModule = grpcJsModule('server-interceptors.js'),
): P {
  const proto = mod.BaseServerInterceptingCall?.prototype;
  for (const method of methods)
    if (typeof proto?.[method] !== 'function')
      throw new GrpcJsInternalsChanged(`no BaseServerInterceptingCall.${method}`);
  return proto as P;
}

/** Stores a patch's state on `proto`: `state` the first time, else null after copying it in. */
export function firstPatchState<S extends object>(proto: object, key: symbol, state: S): S | null {
  const holder = proto as Record<symbol, S | undefined>;
  const installed = holder[key];
  if (installed) {
    Object.assign(installed, state);
    return null;
  }
  holder[key] = state;
  return state;
}

/** grpc-js's `StreamDecoder` fields (build/src/stream-decoder.js) the patches read, plus ours. */
export interface StreamDecoderFields {
  maxReadMessageLength: number;
  readState: number;
  readCompressFlag: Buffer;
  readPartialSize: Buffer;
  readSizeRemaining: number;
  readMessageSize: number;
  readPartialMessage: Buffer[];
  readMessageRemaining: number;
  /** Ours: the call's prefix-scanner factory (null: none; unset: not asked yet). */
  [SCAN_FOR]?: (() => PrefixScanner) | null;
}

/** Every field of {@link StreamDecoderFields} grpc-js owns: the decoder patch checks them on a probe. */
export const STREAM_DECODER_FIELDS = [
  'maxReadMessageLength',
  'readState',
  'readCompressFlag',
  'readPartialSize',
  'readSizeRemaining',
  'readMessageSize',
  'readPartialMessage',
  'readMessageRemaining',
] as const;

/** Follows a message's bytes; `feed` returns the length of the prefix that decides the request, or -1. */
export interface PrefixScanner {
  feed(data: Uint8Array, start: number, end: number): number;
}

export const SCAN_FOR = Symbol('ibex prefix scanner factory');

/** grpc-js's decoder states (a private enum), and ours: decided by a prefix, further bytes dropped unread. */
export const READ_STATE = { NO_DATA: 0, READING_SIZE: 1, READING_MESSAGE: 2, DECIDED_EARLY: 3 } as const;
