/** AssembleContext decoding on the wire (contract.md §11): routing fields decoded, history kept as bytes. */
import protobuf from 'protobufjs/minimal.js';
import { utf8CodePointCount, utf8Text } from '../text/utf8.js';
import { LIMITS, MAX_UTF8_BYTES_PER_CODE_POINT } from '../wire/limits.js';
import type { PrincipalContext, Timestamp } from '../wire/proto.js';
import type { HistoryBytes } from './history-bytes.js';

export {
  CONTENT_OVER,
  checkHistoryContents,
  decodeHistory,
  encodeHistory,
  type HistoryBytes,
} from './history-bytes.js';

const { Reader } = protobuf;
type ProtoReader = protobuf.Reader;

/** Top-level fields a request may carry: millions of repeated scalars are refused before they cost time. */
export const MAX_REQUEST_FIELDS = 1024;
export const MAX_MESSAGE_FIELDS = 16;
export const TOO_MANY_FIELDS = `request has more than ${MAX_REQUEST_FIELDS} fields`;
export const MESSAGE_TOO_MANY_FIELDS = `message has more than ${MAX_MESSAGE_FIELDS} fields`;

class FieldLimitError extends RangeError {}
export const MALFORMED_REQUEST = 'request is not a valid AssembleContextRequest';
/** Id-like strings (org_id, agent_id, model) longer than this are not decoded: none can be valid. */
export const MAX_DECODED_ID_BYTES = 64 * 1024;

export interface WireString {
  /** Null when longer than the field's decode cap. */
  text: string | null;
  /** UTF-8 length on the wire. */
  bytes: number;
}

/** What {@link decodeAssembleRequest} returns: routing fields decoded, history as bytes. */
export interface WireAssembleRequest {
  /** Set when the request is refused before validation (malformed bytes, too many fields). */
  refused: { field: string; message: string } | null;
  org_id: WireString;
  agent_id: WireString;
  model: WireString;
  query: WireString;
  session_id: string;
  directive_version_id: string;
  available_tokens: number;
  request_id: string;
  trace_id: string;
  span_id: string;
  skip_hot_memories: boolean;
  skip_cold_memories: boolean;
  max_memories: number;
  /** AssemblyOptions fields 3–6, float32 as sent; 0 when absent. */
  weights: [number, number, number, number];
  principal_context: PrincipalContext | null;
  /** Messages seen, counting stops at 101. */
  messageCount: number;
  history: HistoryBytes;
  /** Some role exceeds 64 code points. */
  roleOver: boolean;
  contentOver: boolean;
  /** The walk stopped at the 101st message before seeing the fields §11 checks first. */
  stoppedEarly: boolean;
}

const EMPTY_STRING: WireString = { text: '', bytes: 0 };

function emptyRequest(source: Uint8Array): WireAssembleRequest {
  return {
    refused: null,
    org_id: EMPTY_STRING,
    agent_id: EMPTY_STRING,
    model: EMPTY_STRING,
    query: EMPTY_STRING,
    session_id: '',
    directive_version_id: '',
    available_tokens: 0,
    request_id: '',
    trace_id: '',
    span_id: '',
    skip_hot_memories: false,
    skip_cold_memories: false,
    max_memories: 0,
    weights: [0, 0, 0, 0],
    principal_context: null,
    messageCount: 0,
    history: { source, spans: new Uint32Array(0), count: 0, contentPending: false },
    roleOver: false,
    contentOver: false,
    stoppedEarly: false,
  };
}

function span(r: ProtoReader): [number, number] {
  const length = r.uint32();
  const start = r.pos;
  r.skip(length);
  return [start, start + length];
}

function nested(buf: Uint8Array, [start, end]: [number, number]): ProtoReader {
  const sub = Reader.create(buf.subarray(0, end));
  sub.pos = start;
  return sub;
}

function stringField(r: ProtoReader, buf: Uint8Array, cap = Number.POSITIVE_INFINITY): WireString {
  const [start, end] = span(r);
  const bytes = end - start;
  return { text: bytes > cap ? null : utf8Text(buf, start, end), bytes };
}

function fullString(r: ProtoReader, buf: Uint8Array): string {
  const [start, end] = span(r);
  return utf8Text(buf, start, end);
}

function decodeTimestamp(r: ProtoReader, end: number): Timestamp {
  const ts: Timestamp = { seconds: '0', nanos: 0 };
  while (r.pos < end) {
    const tag = r.uint32();
    if (tag === 8) ts.seconds = r.int64().toString();
    else if (tag === 16) ts.nanos = r.int32();
    else r.skipType(tag & 7);
  }
  return ts;
}

const PRINCIPAL_STRINGS: Record<number, keyof PrincipalContext> = {
  1: 'org_id',
  2: 'principal_id',
  3: 'agent_id',
  4: 'principal_type',
  5: 'authz_snapshot_id',
  6: 'authz_snapshot_digest',
  7: 'authority',
  10: 'request_id',
  11: 'trace_id',
  12: 'source',
  14: 'token_id',
};

function decodePrincipal(r: ProtoReader, buf: Uint8Array, end: number): PrincipalContext {
  const p: PrincipalContext = {
    org_id: '',
    principal_id: '',
    agent_id: '',
    principal_type: '',
    authz_snapshot_id: '',
    authz_snapshot_digest: '',
    authority: '',
    issued_at: null,
    expires_at: null,
    request_id: '',
    trace_id: '',
    source: '',
    permissions: '0',
    token_id: '',
  };
  let fields = 0;
  while (r.pos < end) {
    if (++fields > MAX_REQUEST_FIELDS) throw new FieldLimitError(TOO_MANY_FIELDS);
    const tag = r.uint32();
    const field = tag >>> 3;
    const wireType = tag & 7;
    const name = PRINCIPAL_STRINGS[field];
    if (name && wireType === 2) (p as unknown as Record<string, string>)[name] = fullString(r, buf);
    else if ((field === 8 || field === 9) && wireType === 2) {
      const at = span(r);
      p[field === 8 ? 'issued_at' : 'expires_at'] = decodeTimestamp(nested(buf, at), at[1]);
    } else if (field === 13 && wireType === 0) p.permissions = r.int64().toString();
    else r.skipType(wireType);
  }
  return p;
}

function decodeOptions(r: ProtoReader, end: number, out: WireAssembleRequest): void {
  let fields = 0;
  while (r.pos < end) {
    if (++fields > MAX_REQUEST_FIELDS) throw new FieldLimitError(TOO_MANY_FIELDS);
    const tag = r.uint32();
    if (tag === 8) out.skip_cold_memories = r.bool();
    else if (tag === 29 || tag === 37 || tag === 45 || tag === 53) out.weights[(tag >>> 3) - 3] = r.float();
    else if (tag === 16) out.skip_hot_memories = r.bool();
    else if (tag === 56) out.max_memories = r.int32();
    else r.skipType(tag & 7);
  }
}

/** Records one message's spans and decides what its byte lengths can decide (else: pending). */
function readMessage(
  r: ProtoReader,
  buf: Uint8Array,
  end: number,
  i: number,
  out: WireAssembleRequest,
): void {
  const spans = out.history.spans;
  let role: [number, number] = [0, 0];
  let content: [number, number] = [0, 0];
  let fields = 0;
  while (r.pos < end) {
    if (++fields > MAX_MESSAGE_FIELDS) throw new FieldLimitError(MESSAGE_TOO_MANY_FIELDS);
    const tag = r.uint32();
    // proto3: the last occurrence of a scalar field wins.
    if (tag === 10) role = span(r);
    else if (tag === 18) content = span(r);
    else r.skipType(tag & 7);
  }
  spans[4 * i] = role[0];
  spans[4 * i + 1] = role[1];
  spans[4 * i + 2] = content[0];
  spans[4 * i + 3] = content[1];
  const roleBytes = role[1] - role[0];
  if (roleBytes > LIMITS.roleChars * MAX_UTF8_BYTES_PER_CODE_POINT) out.roleOver = true;
  else if (roleBytes > LIMITS.roleChars && utf8CodePointCount(buf, role[0], role[1]) > LIMITS.roleChars)
    out.roleOver = true;
  const contentBytes = content[1] - content[0];
  if (contentBytes > LIMITS.contentChars * MAX_UTF8_BYTES_PER_CODE_POINT) out.contentOver = true;
  else if (contentBytes > LIMITS.contentChars) out.history.contentPending = true;
}

/** Request string fields decoded only up to a byte cap, by field number (longer ones: `text: null`). */
const CAPPED_STRINGS: Record<number, readonly ['agent_id' | 'org_id' | 'query' | 'model', number]> = {
  1: ['agent_id', MAX_DECODED_ID_BYTES],
  2: ['org_id', MAX_DECODED_ID_BYTES],
  4: ['query', LIMITS.queryChars * MAX_UTF8_BYTES_PER_CODE_POINT],
  5: ['model', MAX_DECODED_ID_BYTES],
};

const REQUEST_STRINGS: Record<
  number,
  'session_id' | 'directive_version_id' | 'request_id' | 'trace_id' | 'span_id'
> = {
  3: 'session_id',
  6: 'directive_version_id',
  10: 'request_id',
  11: 'trace_id',
  12: 'span_id',
};

/**
 * The AssembleContext method's `requestDeserialize`. Never throws: bytes that are not a request, or with
 * more than {@link MAX_REQUEST_FIELDS} fields, come back with `refused` set (INVALID_ARGUMENT).
 * @param buf the request bytes as grpc-js received them (kept, not copied, by `history.source`).
 */
export function decodeAssembleRequest(buf: Buffer): WireAssembleRequest {
  const out = emptyRequest(buf);
  out.history.spans = new Uint32Array(4 * LIMITS.recentMessages);
  const r = Reader.create(buf);
  const seen = new Set<number>();
  let fields = 0;
  try {
    while (r.pos < r.len) {
      if (++fields > MAX_REQUEST_FIELDS) throw new FieldLimitError(TOO_MANY_FIELDS);
      const tag = r.uint32();
      const field = tag >>> 3;
      const wireType = tag & 7;
      if (field === 7 && wireType === 0) out.available_tokens = r.int32();
      else if (wireType !== 2 || field < 1 || field > 13) r.skipType(wireType);
      else {
        seen.add(field);
        const capped = CAPPED_STRINGS[field];
        const text = REQUEST_STRINGS[field];
        if (capped) out[capped[0]] = stringField(r, buf, capped[1]);
        else if (text) out[text] = fullString(r, buf);
        else
          switch (field) {
            case 8: {
              const at = span(r);
              if (out.messageCount === LIMITS.recentMessages) {
                // The 101st decides the count; walking on would cost in proportion to the rest.
                out.messageCount++;
                out.stoppedEarly = [1, 2, 4, 5].some((f) => !seen.has(f));
                return out;
              }
              readMessage(nested(buf, at), buf, at[1], out.messageCount, out);
              out.messageCount++;
              break;
            }
            case 9: {
              const at = span(r);
              decodeOptions(nested(buf, at), at[1], out);
              break;
            }
            case 13: {
              const at = span(r);
              out.principal_context = decodePrincipal(nested(buf, at), buf, at[1]);
              break;
            }
          }
      }
    }
  } catch (err) {
    const message = err instanceof FieldLimitError ? err.message : MALFORMED_REQUEST;
    out.refused = { field: 'request', message };
    return out;
  }
  out.history.count = Math.min(out.messageCount, LIMITS.recentMessages);
  return out;
}
