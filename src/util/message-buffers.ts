/**
 * Recycled buffers for large request messages (a heavy upload must not stall the event loop).
 *
 * grpc-js assembles every received message into a fresh buffer (`Buffer.concat` of its DATA chunks). V8
 * counts such buffers as external memory and, once it has grown by 64 MB since the last collection,
 * answers with a mark-compact on the main thread: under bench:isolation's heavy kinds (≈ 177 MB/s of
 * requests) that was 9.4 mark-compacts and 98 ms of GC per second on the event loop. A buffer that is
 * transferred (to a pool thread and back) and then reused is not new memory to V8, so it triggers
 * nothing. So a large request's buffer is handed back here once its call is done with it (the response
 * serializer has copied the history out of it, a gathered answer has been written from it, or the call
 * ended without an answer that needs it: {@link MessageBufferPool.release}), and the next large
 * message is assembled in it when it fits.
 * Memory-service bodies of 1 MiB or more use the same buffers (src/retrieval/http/memory-http.ts: read into
 * one, handed back by the body-decoder thread), so a tenant whose memory service answers in megabytes
 * does not feed V8 new external memory either.
 * The pool never allocates: a message that finds no free buffer takes grpc-js's own path, which
 * allocates only once the whole message is in (an upload abandoned half-way costs nothing), and that
 * buffer joins the pool when its call ends.
 *
 * Isolation: a buffer is handed out again only after {@link MessageBufferPool.release} has *detached* it
 * from every view (a transfer to ourselves), so a stale view can never read the next caller's bytes; and
 * whatever an earlier message left beyond the new one's end is zeroed before reuse.
 */

/** Messages of this many bytes or more (5-byte gRPC prefix included) are assembled in pooled buffers. */
export const POOLED_MESSAGE_FROM_BYTES = 1 << 20;
/** Bytes of free buffers kept at most; a release beyond it leaves the buffer to the GC. */
const DEFAULT_MAX_RETAINED_BYTES = 64 << 20;

/** A free buffer and how far its last message reached (bytes past that are zero). */
interface FreeBuffer {
  buffer: ArrayBuffer;
  dirty: number;
}

/** Counters of a {@link MessageBufferPool}. */
export interface MessageBufferStats {
  /** Large messages assembled in a reused buffer. */
  reused: number;
  /** Large messages that found no free buffer that fits (grpc-js allocated theirs). */
  missed: number;
  /** Buffers taken back for reuse. */
  released: number;
}

/** ArrayBuffers handed out by a pool: they hold one message from offset 0 and zeros after it. */
const HANDED_OUT = new WeakSet<ArrayBuffer>();

/** Free large-message buffers, reused smallest-fit. */
export class MessageBufferPool {
  readonly #free: FreeBuffer[] = [];
  readonly #maxRetainedBytes: number;
  #retainedBytes = 0;
  readonly stats: MessageBufferStats = { reused: 0, missed: 0, released: 0 };

  /** @param maxRetainedBytes free buffers kept at most, bytes (default 64 MiB). */
  constructor(maxRetainedBytes = DEFAULT_MAX_RETAINED_BYTES) {
    this.#maxRetainedBytes = maxRetainedBytes;
  }

  /** Bytes held in free buffers now. */
  get retainedBytes(): number {
    return this.#retainedBytes;
  }

  /**
   * A buffer for a message of `bytes` bytes: a Buffer of exactly that length at offset 0 of the smallest
   * free ArrayBuffer that fits, whose bytes past `bytes` are zero.
   * @returns null when `bytes` is under {@link POOLED_MESSAGE_FROM_BYTES} or no free buffer fits (the
   *   caller allocates as before).
   */
  acquire(bytes: number): Buffer | null {
    if (bytes < POOLED_MESSAGE_FROM_BYTES) return null;
    let best = -1;
    for (let i = 0; i < this.#free.length; i++) {
      const size = this.#free[i]!.buffer.byteLength;
      if (size >= bytes && (best < 0 || size < this.#free[best]!.buffer.byteLength)) best = i;
    }
    if (best < 0) {
      this.stats.missed++;
      return null;
    }
    const entry = this.#free[best]!;
    this.#free[best] = this.#free[this.#free.length - 1]!;
    this.#free.pop();
    this.#retainedBytes -= entry.buffer.byteLength;
    this.stats.reused++;
    // The new message overwrites [0, bytes); what an earlier, longer one left past that is cleared.
    if (entry.dirty > bytes) new Uint8Array(entry.buffer, bytes, entry.dirty - bytes).fill(0);
    HANDED_OUT.add(entry.buffer);
    return Buffer.from(entry.buffer, 0, bytes);
  }

  /**
   * Takes back the ArrayBuffer under `view` — a request message or its body (offset ≤ 16) of at least
   * {@link POOLED_MESSAGE_FROM_BYTES} — once nothing will read it again: it is detached (transferred to
   * the pool), so every view of it, `view` included, reads as empty from now on. Smaller or already
   * detached buffers, views deeper into a buffer and any beyond the retention limit are left alone.
   * @returns whether the buffer was taken.
   */
  release(view: Uint8Array): boolean {
    const buffer = view.buffer;
    if (!(buffer instanceof ArrayBuffer) || view.byteOffset > 16) return false;
    const size = buffer.byteLength;
    if (size < POOLED_MESSAGE_FROM_BYTES || this.#retainedBytes + size > this.#maxRetainedBytes) return false;
    // The view is the message (or its body): nothing past its end was written since the last zeroing.
    const dirty = Math.min(size, view.byteOffset + view.byteLength);
    const owned = structuredClone(buffer, { transfer: [buffer] });
    this.#free.push({ buffer: owned, dirty });
    this.#retainedBytes += size;
    this.stats.released++;
    return true;
  }
}

/**
 * The process's pool: grpc-js's decoder is patched process-wide (src/grpc/patches/pooled-message-decoder.ts), so every
 * server in a process assembles into it, and whoever ends a request's last use releases into it.
 */
export const MESSAGE_BUFFERS = new MessageBufferPool();

/** {@link MessageBufferPool.release} on {@link MESSAGE_BUFFERS}; `undefined` and `null` are ignored. */
export function releaseMessageBuffer(view: Uint8Array | null | undefined): void {
  if (view) MESSAGE_BUFFERS.release(view);
}

/**
 * Whether `view` lies in a buffer that a {@link MessageBufferPool} handed out for one message (offset ≤ 16:
 * the message or its body), which holds nothing else: such a buffer may be transferred as it is.
 */
export function isPooledMessageView(view: Uint8Array): boolean {
  return view.buffer instanceof ArrayBuffer && HANDED_OUT.has(view.buffer) && view.byteOffset <= 16;
}
