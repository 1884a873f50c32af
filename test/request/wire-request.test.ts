/**
 * The AssembleContext request decoded on the wire answers exactly what the decoded object
 * answers (contract.md §11 order and messages), without materialising what it need not.
 */
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import protobuf from 'protobufjs/minimal.js';
import { describe, expect, it } from 'vitest';
import { decodeBomb } from '../../bench/lib/raw-assemble.js';
import { RequestPrefixScanner } from '../../src/request/request-prefix-scanner.js';
import { validateAssembleRequest, validateWireRequest } from '../../src/request/validate.js';
import {
  checkHistoryContents,
  decodeAssembleRequest,
  decodeHistory,
  MALFORMED_REQUEST,
  TOO_MANY_FIELDS,
  type WireAssembleRequest,
} from '../../src/request/wire-request.js';
import { IbexError } from '../../src/wire/errors.js';
import { type AssembleContextRequestInput, contextServiceDefinition } from '../../src/wire/proto.js';

const encode = (req: AssembleContextRequestInput): Buffer =>
  contextServiceDefinition.AssembleContext!.requestSerialize(req) as Buffer;

function outcome(run: () => unknown): { ok: unknown } | { error: string } {
  try {
    return { ok: run() };
  } catch (err) {
    if (err instanceof IbexError) return { error: err.message };
    throw err;
  }
}

const ORG = randomUUID();
const AGENT = randomUUID();
const E = '😀';

const around = (n: number) => fc.constantFrom(n - 1, n, n + 1);
const textOf = (len: fc.Arbitrary<number>) =>
  fc.tuple(len, fc.constantFrom('a', E, '绿')).map(([n, ch]) => ch.repeat(Math.max(0, n)));

const request: fc.Arbitrary<AssembleContextRequestInput> = fc.record({
  org_id: fc.constantFrom(ORG, '', '  ', 'not-a-uuid', ` ${ORG.toUpperCase()} `),
  agent_id: fc.constantFrom(AGENT, '', 'x'),
  model: fc.oneof(fc.constantFrom('gpt-4o', '', '  ', ' claude-sonnet-4-5 '), textOf(around(256))),
  query: fc.oneof(fc.constantFrom('', 'sailing'), textOf(around(8192))),
  recent_messages: fc.oneof(
    fc.array(
      fc.record({
        role: fc.oneof(fc.constantFrom('user', ''), textOf(around(64))),
        content: fc.oneof(fc.constantFrom('hi', ''), textOf(around(32_768))),
      }),
      { maxLength: 3 },
    ),
    fc
      .integer({ min: 99, max: 102 })
      .map((n) => Array.from({ length: n }, () => ({ role: 'user', content: 'hi' }))),
  ),
  options: fc.record({
    max_memories: fc.integer({ min: -2, max: 102 }),
    skip_hot_memories: fc.boolean(),
    skip_cold_memories: fc.boolean(),
  }),
  available_tokens: fc.integer({ min: -5, max: 5000 }),
  request_id: fc.string(),
  session_id: fc.string(),
});

describe('AssembleContext decoded on the wire', () => {
  it('answers what the decoded object answers: same contract.md §11 message, same fields, same history', () => {
    fc.assert(
      fc.property(request, (req) => {
        const fromObject = outcome(() => validateAssembleRequest(req));
        const wire = decodeAssembleRequest(encode(req));
        const fromWire = outcome(() => validateWireRequest(wire));
        if ('error' in fromObject && 'ok' in fromWire && fromObject.error.startsWith('message.content')) {
          // A content of 32,769..131,072 bytes is the CPU stage's to decide.
          expect(wire.history.contentPending).toBe(true);
          expect(checkHistoryContents(wire.history)).toBe(true);
          return;
        }
        if ('error' in fromObject) {
          expect(fromWire).toEqual(fromObject);
          return;
        }
        expect('ok' in fromWire).toBe(true);
        const a = fromObject.ok as ReturnType<typeof validateAssembleRequest>;
        const b = (fromWire as { ok: ReturnType<typeof validateWireRequest> }).ok;
        const { history: _ha, ...restA } = a;
        const { history: _hb, ...restB } = b;
        expect(restB).toEqual(restA);
        expect(decodeHistory(b.history)).toEqual(a.recentMessages);
      }),
      { numRuns: 150 },
    );
  });

  it('decode bomb: stops counting at the 101st message, whatever follows', () => {
    const wire = decodeAssembleRequest(decodeBomb(ORG, AGENT, 2_000_000));
    expect(wire.messageCount).toBe(101);
    expect(wire.history.count).toBe(0);
    expect(() => validateWireRequest(wire)).toThrow('recent_messages exceeds 100 items');
  });

  it('a request whose messages come before org_id is refused for its count (non-canonical order)', () => {
    const w = protobuf.Writer.create();
    for (let i = 0; i < 101; i++) w.uint32(66).fork().uint32(10).string('user').ldelim();
    w.uint32(18).string('not a uuid');
    const wire = decodeAssembleRequest(Buffer.from(w.finish()));
    expect(wire.stoppedEarly).toBe(true);
    expect(() => validateWireRequest(wire)).toThrow('recent_messages exceeds 100 items');
  });

  it('refuses more than 1024 top-level fields and bytes that are not a request', () => {
    const w = protobuf.Writer.create();
    for (let i = 0; i < 2000; i++) w.uint32(26).string('');
    expect(decodeAssembleRequest(Buffer.from(w.finish())).refused?.message).toBe(TOO_MANY_FIELDS);
    expect(decodeAssembleRequest(Buffer.from([0x12, 0x50, 0x41])).refused?.message).toBe(MALFORMED_REQUEST);
  });

  it('decodes principal_context like the loader does, int64 permissions exactly', () => {
    const req: AssembleContextRequestInput = {
      org_id: ORG,
      agent_id: AGENT,
      model: 'gpt-4o',
      principal_context: {
        org_id: ORG,
        principal_id: 'p',
        issued_at: { seconds: '1700000000', nanos: 5_000_000 },
        permissions: '9223372036854775807',
        token_id: 't',
      },
    };
    const a = validateAssembleRequest(req).principal;
    const b = validateWireRequest(decodeAssembleRequest(encode(req))).principal;
    expect(b).toEqual(a);
    expect(b?.permissions).toBe('9223372036854775807');
    expect(b?.issuedAtMs).toBe(1_700_000_000_005);
  });
});

/** A request field as its writer call; a segment is a run of them. */
type Put = (w: protobuf.Writer) => void;

const scalarField: fc.Arbitrary<Put> = fc.oneof(
  fc.constantFrom(ORG, 'not-a-uuid', '').map(
    (v): Put =>
      (w) =>
        w.uint32(18).string(v),
  ),
  fc.constantFrom(AGENT, 'x').map(
    (v): Put =>
      (w) =>
        w.uint32(10).string(v),
  ),
  fc.constantFrom('gpt-4o', '').map(
    (v): Put =>
      (w) =>
        w.uint32(42).string(v),
  ),
  fc.constantFrom('sailing', 'q'.repeat(8193)).map(
    (v): Put =>
      (w) =>
        w.uint32(34).string(v),
  ),
  // A negative int32 is a ten-byte varint.
  fc.integer({ min: -5, max: 5000 }).map(
    (n): Put =>
      (w) =>
        w.uint32(56).int32(n),
  ),
  fc.string({ maxLength: 3 }).map(
    (v): Put =>
      (w) =>
        w.uint32(26).string(v),
  ),
  // Unknown fields of every wire type the decoder skips: fixed64, fixed32, varint, bytes.
  fc.constant<Put>((w) => w.uint32((20 << 3) | 1).fixed64(1)),
  fc.constant<Put>((w) => w.uint32((21 << 3) | 5).fixed32(7)),
  fc.constant<Put>((w) => w.uint32(200 << 3).uint32(300)),
  fc.constant<Put>((w) => w.uint32((22 << 3) | 2).bytes(Buffer.alloc(200))),
);

const wireRequest = fc
  .record({
    head: fc.array(scalarField, { maxLength: 8 }),
    messages: fc.constantFrom(0, 3, 100, 101, 102, 300),
    content: fc.constantFrom('', 'hi', 'x'.repeat(700)),
    filler: fc.constantFrom(0, 1000, 1023, 1024, 1030),
    tail: fc.array(scalarField, { maxLength: 4 }),
    order: fc.shuffledSubarray([0, 1, 2, 3], { minLength: 4 }),
    chunks: fc.array(fc.integer({ min: 1, max: 700 }), { minLength: 1, maxLength: 5 }),
  })
  .map(({ head, messages, content, filler, tail, order, chunks }) => {
    const w = protobuf.Writer.create();
    const segments: Put[] = [
      (x) => {
        for (const put of head) put(x);
      },
      (x) => {
        for (let i = 0; i < messages; i++)
          x.uint32(66).fork().uint32(10).string('user').uint32(18).string(content).ldelim();
      },
      (x) => {
        for (let i = 0; i < filler; i++) x.uint32(26).string('');
      },
      (x) => {
        for (const put of tail) put(x);
      },
    ];
    for (const i of order) segments[i]!(w);
    return { bytes: Buffer.from(w.finish()), chunks };
  });

/** The decoded request without the buffer it points into (a prefix and its whole differ only there). */
function comparable(wire: WireAssembleRequest) {
  const { history, ...rest } = wire;
  return { ...rest, spans: Array.from(history.spans), count: history.count, pending: history.contentPending };
}

/** Feeds `bytes` to a new scanner in chunks of the given sizes (cycled); the decided prefix length or -1. */
function scan(bytes: Buffer, chunks: number[]): number {
  const scanner = new RequestPrefixScanner();
  for (let at = 0, i = 0; at < bytes.length; i++) {
    const end = Math.min(bytes.length, at + chunks[i % chunks.length]!);
    const decided = scanner.feed(bytes, at, end);
    if (decided >= 0) return decided;
    at = end;
  }
  return -1;
}

describe('RequestPrefixScanner: deciding a request from its first bytes (contract.md §11)', () => {
  it('the prefix it stops at decodes to what the whole request decodes to, and it stops whenever the decoder would', () => {
    fc.assert(
      fc.property(wireRequest, ({ bytes, chunks }) => {
        const whole = decodeAssembleRequest(bytes);
        const decided = scan(bytes, chunks);
        // However the bytes are split, the decision is the same.
        expect(decided).toBe(scan(bytes, [bytes.length]));
        const stopsEarly = whole.messageCount > 100 || whole.refused?.message === TOO_MANY_FIELDS;
        expect(decided >= 0).toBe(stopsEarly);
        if (decided < 0) return;
        expect(decided).toBeLessThanOrEqual(bytes.length);
        const prefix = decodeAssembleRequest(bytes.subarray(0, decided));
        expect(comparable(prefix)).toEqual(comparable(whole));
        expect(outcome(() => validateWireRequest(prefix))).toEqual(outcome(() => validateWireRequest(whole)));
      }),
      { numRuns: 300 },
    );
  });

  it('decode bomb: decided within its first 300 bytes, whether it has 101 or 2,000,000 messages', () => {
    for (const n of [101, 2_000_000]) {
      const bytes = decodeBomb(ORG, AGENT, n);
      const decided = scan(bytes, [16_384]);
      expect(decided).toBe(bytes.length - 2 * (n - 101));
      expect(decided).toBeLessThan(300);
      expect(() => validateWireRequest(decodeAssembleRequest(bytes.subarray(0, decided)))).toThrow(
        'recent_messages exceeds 100 items',
      );
    }
  });

  it('gives up, undecided, on wire types the decoder does not skip field by field', () => {
    const group = Buffer.from(
      protobuf.Writer.create()
        .uint32((30 << 3) | 3)
        .finish(),
    );
    expect(scan(Buffer.concat([group, decodeBomb(ORG, AGENT, 200)]), [7])).toBe(-1);
  });
});
