/**
 * Upload turns (src/grpc/upload-turns.ts, applied by src/grpc/patches/upload-turns.ts): one connection's request
 * messages of 1 MiB or more are read one call at a time; a stalled sender does not hold the turn.
 */
import http2 from 'node:http2';
import { Client, credentials } from '@grpc/grpc-js';
import fc from 'fast-check';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { sendRawAssemble } from '../../bench/lib/raw-assemble.js';
import { createGrpcServer, type GrpcServer } from '../../src/grpc/grpc-server.js';
import { uploadTurnWaits } from '../../src/grpc/patches/upload-turns.js';
import { type UploadCall, UploadTurns } from '../../src/grpc/upload-turns.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { Errors } from '../../src/wire/errors.js';
import { encodeRequest, openUpload, uploadOutcome } from '../helpers/raw-grpc.js';

/** A call for UploadTurns: its remaining bytes, and a log of what the turns did to it. */
class FakeUpload implements UploadCall {
  gone = false;
  paused = false;
  constructor(
    readonly name: string,
    public remaining: number,
    readonly log: string[],
  ) {}
  pause() {
    this.paused = true;
    this.log.push(`pause ${this.name}`);
  }
  resume() {
    this.paused = false;
    this.log.push(`resume ${this.name}`);
  }
}

describe('UploadTurns', () => {
  it('one large upload at a time per connection; the next is the waiting one with the fewest bytes left', () => {
    const log: string[] = [];
    const turns = new UploadTurns<FakeUpload>(250, () => 0);
    const conn = {};
    const [a, b, c] = [
      new FakeUpload('a', 9e6, log),
      new FakeUpload('b', 3e6, log),
      new FakeUpload('c', 1e6, log),
    ];
    expect(turns.arrived(conn, a)).toBe(true);
    expect(turns.arrived(conn, b)).toBe(false);
    expect(turns.arrived(conn, c)).toBe(false);
    // Another connection has turns of its own.
    expect(turns.arrived({}, new FakeUpload('x', 5e6, log))).toBe(true);
    expect(turns.arrived(conn, a)).toBe(true);
    expect(turns.waiting(conn)).toBe(2);
    turns.done(conn, a);
    expect(turns.arrived(conn, c)).toBe(true);
    // A waiting call whose stream closed leaves the queue; done() of a non-active call changes no turn.
    b.gone = true;
    turns.done(conn, c);
    expect(turns.waiting(conn)).toBe(0);
    expect(log).toEqual(['pause b', 'pause c', 'resume c']);
    // Nobody holds the turn now: the next arrival takes it.
    expect(turns.arrived(conn, new FakeUpload('d', 1, log))).toBe(true);
  });

  it('a stalled active upload goes to the back after stallMs', () => {
    vi.useFakeTimers();
    try {
      let now = 0;
      const log: string[] = [];
      const turns = new UploadTurns<FakeUpload>(250, () => now);
      const conn = {};
      const [a, b] = [new FakeUpload('a', 1e6, log), new FakeUpload('b', 2e6, log)];
      turns.arrived(conn, a);
      expect(turns.arrived(conn, b)).toBe(false);
      // a's bytes are late 250 ms after its last ones.
      now = 200;
      vi.advanceTimersByTime(200);
      expect(log).toEqual(['pause b']);
      now = 260;
      vi.advanceTimersByTime(60);
      expect(log).toEqual(['pause b', 'pause a', 'resume b']);
      expect(turns.waiting(conn)).toBe(1);
      // b keeps sending: a waits; b done: a's turn again.
      now = 1400;
      expect(turns.arrived(conn, b)).toBe(true);
      turns.done(conn, b);
      expect(log.at(-1)).toBe('resume a');
      expect(turns.waiting(conn)).toBe(0);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('UploadTurns invariants (fast-check)', () => {
  const op = fc.oneof(
    fc.record({ kind: fc.constant('data' as const), i: fc.nat(4), bytes: fc.integer({ min: 1, max: 4 }) }),
    fc.record({ kind: fc.constant('close' as const), i: fc.nat(4) }),
    fc.record({ kind: fc.constant('tick' as const), ms: fc.integer({ min: 1, max: 400 }) }),
  );

  it('at most one upload of a connection reads at a time, and whenever some are unfinished one reads within the stall time', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 1, max: 6 }), { minLength: 5, maxLength: 5 }),
        fc.array(op, { maxLength: 60 }),
        (sizes, ops) => {
          vi.useFakeTimers();
          try {
            let now = 0;
            const turns = new UploadTurns<FakeUpload>(250, () => now);
            const conn = {};
            const calls = sizes.map((n, i) => new FakeUpload(`c${i}`, n, []));
            const seen = new Set<FakeUpload>();
            const finished = new Set<FakeUpload>();
            const live = () => calls.filter((c) => seen.has(c) && !c.gone && !finished.has(c));
            const tick = (ms: number) => {
              now += ms;
              vi.advanceTimersByTime(ms);
            };
            for (const o of ops) {
              if (o.kind === 'tick') tick(o.ms);
              else {
                const c = calls[o.i]!;
                if (c.gone || finished.has(c)) continue;
                if (o.kind === 'close') {
                  // What the stream's 'close' listener does.
                  c.gone = true;
                  turns.done(conn, c);
                } else if (!(seen.has(c) && c.paused)) {
                  // A paused stream delivers no data: only a new or reading call can send.
                  seen.add(c);
                  if (turns.arrived(conn, c)) {
                    c.remaining = Math.max(0, c.remaining - o.bytes);
                    if (c.remaining === 0) {
                      finished.add(c);
                      turns.done(conn, c);
                    }
                  }
                }
              }
              expect(live().filter((c) => !c.paused).length).toBeLessThanOrEqual(1);
            }
            // Nobody sends any more: within the stall time one unfinished upload has the turn and reads, and
            // a reader that stalled has handed it to one that waited.
            const stalled = live().filter((c) => !c.paused);
            const waited = live().filter((c) => c.paused);
            tick(251);
            if (live().length > 0) expect(live().filter((c) => !c.paused)).toHaveLength(1);
            if (stalled.length === 1 && waited.length > 0) expect(stalled[0]!.paused).toBe(true);
          } finally {
            vi.useRealTimers();
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});

const MAX_MESSAGE = 8 * 1024 * 1024;

let server: GrpcServer | null = null;
afterEach(async () => {
  await server?.drain(500);
  server = null;
});

/** Answers every call INVALID_ARGUMENT `received <n> messages`: proof the whole request was read. */
async function startServer(): Promise<string> {
  server = createGrpcServer({
    assemble: async (req) => {
      throw Errors.invalidArgument('query', `received ${req.history.count} messages`);
    },
    logger: createLogger({ logLevel: 'silent' }),
    settings: {
      timeoutMs: 30_000,
      maxReceiveMessageBytes: MAX_MESSAGE,
      maxMetadataBytes: 16 * 1024,
    },
  });
  const port = await server.bind('127.0.0.1:0');
  server.markServing();
  return `127.0.0.1:${port}`;
}

/** A valid request of `messages` history messages of 32,768 ASCII characters (≈ 32 KiB each). */
function bigRequest(messages: number): Buffer {
  return encodeRequest({
    org_id: '11111111-1111-4111-8111-111111111111',
    agent_id: '22222222-2222-4222-8222-222222222222',
    model: 'gpt-4o',
    query: 'q',
    recent_messages: Array.from({ length: messages }, () => ({ role: 'user', content: 'a'.repeat(32_768) })),
  });
}

/** A client on a connection of its own (no subchannel shared with other clients of this process). */
function ownConnection(addr: string): Client {
  return new Client(addr, credentials.createInsecure(), {
    'grpc.max_send_message_length': -1,
    'grpc.use_local_subchannel_pool': 1,
  });
}

describe('large messages over gRPC take turns per connection', () => {
  it('in turns: of four 3 MB requests on one connection, the three that arrived while one was read waited their turn', async () => {
    const addr = await startServer();
    const big = bigRequest(96);
    const heavy = ownConnection(addr);
    try {
      await sendRawAssemble(heavy, bigRequest(1));
      const waitsBefore = uploadTurnWaits();
      const done = await Promise.all([1, 2, 3, 4].map(() => sendRawAssemble(heavy, big)));
      // What /metrics reports as ibex_context_upload_turn_waits_total: at least the three that queued.
      expect(uploadTurnWaits() - waitsBefore).toBeGreaterThanOrEqual(3);
      for (const r of done) expect(r.details).toContain('received 96 messages');
    } finally {
      heavy.close();
    }
  });

  it('a stalled upload does not hold the turn: a complete request on the same connection is answered', async () => {
    const addr = await startServer();
    const session = http2.connect(`http://${addr}`);
    const big = bigRequest(96);
    try {
      // 1.5 MB of a 3 MB request, then nothing: the sender stalls with the turn.
      const stalled = openUpload(session, big, 1_500_000);
      await new Promise((r) => setTimeout(r, 300));
      const complete = await uploadOutcome(openUpload(session, big, big.length), 10_000);
      expect(complete.grpcMessage).toContain('received 96 messages');
      stalled.close(http2.constants.NGHTTP2_CANCEL);
    } finally {
      session.destroy();
    }
  });
});
