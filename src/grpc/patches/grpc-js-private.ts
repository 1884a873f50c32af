/**
 * What the patches in this folder share: the grpc-js version they were written against, the private modules
 * they load, and the fields and symbols two of them both touch. Nothing outside src/grpc/patches/ reaches into
 * grpc-js's private modules or fields; each patch checks that what it needs is there and throws
 * {@link GrpcJsInternalsChanged} at start-up when it is not, so an upgrade that moves them fails loudly.
 */
import { createRequire } from 'node:module';

/**
 * The @grpc/grpc-js version every patch here was read against (package.json pins it exactly; a test
 * fails when the installed one differs). Upgrading means re-reading each patch against the new sources.
 */
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

/** The private module holding `BaseServerInterceptingCall`, as the server-call patches read it. */
export interface ServerInterceptorsModule {
  BaseServerInterceptingCall?: { prototype: Record<string | symbol, unknown> };
}

/**
 * The prototype of grpc-js's `BaseServerInterceptingCall`, checked to have every method in `methods`.
 * @param mod the module to read (tests pass one without the class or method).
 * @throws GrpcJsInternalsChanged when the class or one of the methods is gone.
 */
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

/**
 * A patch's state, kept on the prototype it patches under `key`, so that patching twice never wraps a method
 * twice: the first call stores `state` and returns it, for the methods it is about to patch to read; a later
 * call moves `state`'s values into the stored state (the patched methods then use them) and returns null.
 */
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

/**
 * grpc-js's `StreamDecoder` fields (build/src/stream-decoder.js), read by the decoder, upload-turn and
 * early-decision patches, plus the symbols the decoder and the early decision share.
 */
export interface StreamDecoderFields {
  maxReadMessageLength: number;
  readState: number;
  readCompressFlag: Buffer;
  readPartialSize: Buffer;
  readSizeRemaining: number;
  readMessageSize: number;
  readPartialMessage: Buffer[];
  readMessageRemaining: number;
  /** Ours: makes the prefix scanner of the call's method (null: the method has none; unset: not asked yet). */
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

/**
 * Follows a request message's bytes as they arrive (see src/grpc/patches/early-decision.ts). `feed` gets the
 * message's next bytes and returns the length of the prefix that decides the request's outcome, or -1.
 */
export interface PrefixScanner {
  feed(data: Uint8Array, start: number, end: number): number;
}

/** Set by the early-decision patch on a call's decoder; read by the decoder patch. */
export const SCAN_FOR = Symbol('ibex prefix scanner factory');

/** grpc-js's decoder states (a private enum), and ours: decided by a prefix, further bytes dropped unread. */
export const READ_STATE = { NO_DATA: 0, READING_SIZE: 1, READING_MESSAGE: 2, DECIDED_EARLY: 3 } as const;
