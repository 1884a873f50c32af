// How the load driver puts calls on the wire: `h2` (pre-encoded messages over node:http2, the default) or
// `grpc-js` (for its channel options or a real client's cost). See docs/design/load-driver.md.

import { performance } from 'node:perf_hooks';
import { type Client, type ClientUnaryCall, Metadata, type StatusObject, status } from '@grpc/grpc-js';
import type { AssembleContextRequestInput } from '../../wire/proto.js';
import { LEVEL_HEADER } from '../../wire/wire-headers.js';
import {
  ASSEMBLE_METHOD,
  type ConnectionOptions,
  connectionMetadata,
  createRawClient,
  type UnaryMethod,
  waitForReady,
} from './context-client.js';
import { frameCache, summarizeResponse } from './grpc-frames.js';
import { type CallEnd, type CallSink, type RawCall, RawChannel, type RawOutcome } from './raw-grpc.js';

/** Transport names accepted by `load --transport`. */
export type TransportName = 'h2' | 'grpc-js';

export const TRANSPORT_NAMES: readonly TransportName[] = ['h2', 'grpc-js'];

/** Checks a `--transport` value. @throws Error `--transport must be h2 or grpc-js, got '<v>'`. */
export function transportFlag(v: string): TransportName {
  if (!(TRANSPORT_NAMES as readonly string[]).includes(v))
    throw new Error(`--transport must be h2 or grpc-js, got '${v}'`);
  return v as TransportName;
}

/** `connections` independent connections to one service. */
export interface DriverTransport {
  readonly name: TransportName;
  /** Resolves when every connection is up. @throws Error `cannot connect to <addr> within <ms> ms`. */
  ready(timeoutMs: number): Promise<void>;
  /** Encodes `requests` ahead of the run, where the transport sends pre-encoded frames. */
  prepare(requests: readonly AssembleContextRequestInput[]): void;
  /** Starts one call on connection `conn` (0-based, deadline `timeoutMs`); `sink.done` runs once. */
  call(
    conn: number,
    req: AssembleContextRequestInput,
    timeoutMs: number,
    keepBody: boolean,
    sink: CallSink,
  ): RawCall;
  close(): void;
}

export function openTransport(
  name: TransportName,
  conn: ConnectionOptions,
  connections: number,
): DriverTransport {
  if (name === 'grpc-js') return grpcJsTransport(conn, connections);
  return rawTransport(conn, connections);
}

function rawTransport(conn: ConnectionOptions, connections: number): DriverTransport {
  const channels = Array.from({ length: connections }, () => new RawChannel(conn));
  const frameOf = frameCache();
  return {
    name: 'h2',
    ready: async (timeoutMs) => {
      await Promise.all(channels.map((c) => c.ready(conn.addr, timeoutMs)));
    },
    prepare: (requests) => frameOf.prepare(requests),
    call: (i, req, timeoutMs, keepBody, sink) =>
      channels[i]!.call(frameOf(req), { timeoutMs, keepBody }, sink),
    close: () => {
      for (const c of channels) c.close();
    },
  };
}

function grpcJsTransport(conn: ConnectionOptions, connections: number): DriverTransport {
  // A local subchannel pool gives each channel its own connection; otherwise `-c` would mean nothing.
  const clients: Client[] = Array.from({ length: connections }, () =>
    createRawClient(conn, { 'grpc.use_local_subchannel_pool': 1 }),
  );
  const base = connectionMetadata(conn);
  const hasBase = Boolean(conn.token);
  const method: UnaryMethod = { ...ASSEMBLE_METHOD, responseDeserialize: (buf: Buffer) => buf };
  return {
    name: 'grpc-js',
    ready: async (timeoutMs) => {
      await Promise.all(clients.map((c) => waitForReady(c, conn.addr, timeoutMs)));
    },
    prepare: () => {},
    call: (i, req, timeoutMs, keepBody, sink) => {
      let ended = false;
      let body: Buffer | null = null;
      let level = '';
      const sentAt = performance.now();
      const finish = (code: number, details: string, end: CallEnd) => {
        if (ended) return;
        ended = true;
        sink.done({ code, details, end, level, bytes: body?.length ?? 0, body: keepBody ? body : null });
      };
      const call: ClientUnaryCall = clients[i]!.makeUnaryRequest(
        method.path,
        method.requestSerialize,
        method.responseDeserialize,
        req,
        hasBase ? base.clone() : new Metadata(),
        { deadline: Date.now() + timeoutMs },
        (err, value) => {
          body = err ? null : ((value as Buffer | undefined) ?? null);
        },
      );
      call.on('metadata', (md: Metadata) => {
        const v = md.get(LEVEL_HEADER)[0];
        if (typeof v === 'string') level = v;
      });
      call.on('status', (st: StatusObject) =>
        finish(st.code, st.details, grpcJsEnd(st.code, performance.now() - sentAt, timeoutMs)),
      );
      const abandon = (code: number, details: string, end: CallEnd) => {
        finish(code, details, end);
        call.cancel();
      };
      return {
        expire: () =>
          abandon(status.DEADLINE_EXCEEDED, `Deadline exceeded after ${timeoutMs} ms (driver)`, 'timer'),
        cancel: () => abandon(status.CANCELLED, 'cancelled by the driver at the end of the run', 'cancel'),
      };
    },
    close: () => {
      for (const c of clients) c.close();
    },
  };
}

/**
 * What ended a grpc-js call (grpc-js does not say which side made a status): DEADLINE_EXCEEDED past the
 * timeout is the caller's; UNAVAILABLE is the connection (the service never sends it); unrequested
 * CANCELLED is a reset stream; anything else the server sent.
 */
function grpcJsEnd(code: number, elapsedMs: number, timeoutMs: number): CallEnd {
  if (code === status.DEADLINE_EXCEEDED && elapsedMs >= timeoutMs) return 'timer';
  if (code === status.UNAVAILABLE) return 'connection';
  if (code === status.CANCELLED) return 'stream';
  return 'server';
}

export interface AnswerReading {
  level: string;
  budgetChoice: boolean;
  /** Body missing or malformed, or (with `verify`) its full decode disagreed with the header. */
  unreadable: boolean;
  totalMs: number | null;
}

/** Reads an OK outcome's counters from its bytes; with `verify`, a full decode must match the level. */
export function readAnswer(o: RawOutcome, verify: boolean): AnswerReading {
  if (o.body === null) return { level: o.level, budgetChoice: false, unreadable: true, totalMs: null };
  try {
    const s = summarizeResponse(o.body);
    const level = o.level === '' ? s.level : o.level;
    let unreadable = false;
    if (verify) {
      const full = ASSEMBLE_METHOD.responseDeserialize(o.body) as { degradation?: { level?: string } | null };
      unreadable = (full.degradation?.level ?? '') !== level;
    }
    return { level, budgetChoice: s.budgetExcluded > 0, unreadable, totalMs: s.totalMs };
  } catch {
    return { level: o.level, budgetChoice: false, unreadable: true, totalMs: null };
  }
}
