/**
 * One call of the `frames` transport (issue 10): its stream's state on an {@link H2Connection} and the
 * {@link RawOutcome} handed to its sink, under the same contract as raw-grpc.ts's calls.
 */
import type { H2Connection } from './frames-connection.js';
import { ErrorCode } from './h2-codec.js';
import { type CallSink, RawCallState } from './raw-grpc.js';

export {
  CANCELLED,
  DEADLINE_EXCEEDED,
  grpcMessage,
  INTERNAL,
  UNAVAILABLE,
  UNKNOWN,
} from './raw-grpc.js';

/** One call: its stream's state on the connection and the outcome handed to its sink. */
export class FramesCall extends RawCallState {
  /** Stream id, 0 until the call gets a stream. */
  id = 0;
  /** Request bytes still to send from `outAt` (null once all went out). */
  out: Buffer | null;
  outAt = 0;
  /** The server's flow-control window for this stream, bytes. */
  sendWindow = 0;
  received = 0;
  gotHeaders = false;
  /** Index of the first chunk that is a view of the read being handled, -1 when none. */
  heldFrom = -1;
  /** Some chunks live in the connection's {@link BodyArena}. */
  inArena = false;
  blocked = false;
  conn: H2Connection | null = null;

  constructor(
    request: Buffer,
    readonly headerBlock: Buffer,
    timeoutMs: number,
    keepBody: boolean,
    sink: CallSink,
  ) {
    super(timeoutMs, keepBody, sink);
    this.out = request;
  }

  protected override afterDone(): void {
    // The body was valid until `done` returned (RawOutcome.body): its arena bytes may be reused now.
    if (this.inArena) {
      this.inArena = false;
      this.conn?.arena.leave();
    }
  }

  protected resetStream(): void {
    this.conn?.drop(this, ErrorCode.CANCEL);
  }
}

/** Arena size per connection, bytes: a few bodies in flight across reads at a time. */
const ARENA_BYTES = 1 << 20;

/**
 * Where response bytes that a call still needs after a read go (the read buffer is reused by the next
 * read): a bump allocator over one buffer, reset once no call uses it, so the usual call copies its body
 * once into memory that already exists instead of allocating. Allocating (or keeping) 13 KB per call
 * cost 0.18–0.19 vs 0.15–0.16 ms CPU per call at 1000 req/s in same-session A/Bs, mostly GC of external
 * memory (issue 10). What does not fit gets a buffer of its own.
 */
export class BodyArena {
  private readonly buf = Buffer.allocUnsafe(ARENA_BYTES);
  private at = 0;
  private users = 0;

  /** Moves `c`'s chunks taken from the current read into the arena, unless `c` already ended. */
  keep(c: FramesCall): void {
    const from = c.heldFrom;
    c.heldFrom = -1;
    const chunks = c.chunks;
    if (c.ended || chunks === null) return;
    for (let i = from; i < chunks.length; i++) {
      const view = chunks[i]!;
      const n = view.length;
      if (this.at + n > ARENA_BYTES) {
        chunks[i] = Buffer.copyBytesFrom(view);
        continue;
      }
      view.copy(this.buf, this.at);
      chunks[i] = this.buf.subarray(this.at, this.at + n);
      this.at += n;
      if (!c.inArena) {
        c.inArena = true;
        this.users++;
      }
    }
  }

  /** A call whose chunks were here ended. */
  leave(): void {
    if (--this.users === 0) this.at = 0;
  }
}
