/**
 * Recycled buffers for large request messages (issue 9: a heavy upload must not stall the event loop).
 *
 * grpc-js assembles every received message into a fresh buffer (`Buffer.concat` of its DATA chunks). V8
 * counts such buffers as external memory and, once it has grown by 64 MB since the last collection,
 * answers with a mark-compact on the main thread: under bench:isolation's heavy kinds (≈ 177 MB/s of
 * requests) that was 9.4 mark-compacts and 98 ms of GC per second on the event loop. A buffer that is
 * transferred (to a pool thread and back) and then reused is not new memory to V8, so it triggers
 * nothing: large messages are assembled into buffers from this pool, which travel to the CPU stage
 * without a copy (cpu-batch.ts) and come back with its result, and the response serializer hands them
 * back here once it has copied the history out of them ({@link MessageBufferPool.release}).
 *
 * Isolation: a buffer is handed out again only after {@link MessageBufferPool.release} has *detached* it
 * from every view (a transfer to ourselves), so a stale view can never read the next caller's bytes; and
 * whatever an earlier message left beyond the new one's end is zeroed before reuse.
 */

/** Messages of this many bytes or more (5-byte gRPC prefix included) are assembled in pooled buffers. */
export const POOLED_MESSAGE_FROM_BYTES = 1 << 20;
/** Largest pooled buffer, bytes: above the largest request SPEC §11 allows (~13.2 MB). */
const LARGEST_CLASS = 1 << 24;
/** Bytes of free buffers kept at most; a release beyond it leaves the buffer to the GC. */
const DEFAULT_MAX_RETAINED_BYTES = 64 << 20;

/** A free buffer and how far its last message reached (bytes past that are still zero). */
interface FreeBuffer {
  buffer: ArrayBuffer;
  dirty: number;
}

/** Counters of a {@link MessageBufferPool}. */
export interface MessageBufferStats {
  /** Buffers handed out that were reused. */
  reused: number;
  /** Buffers handed out that had to be allocated. */
  allocated: number;
  /** Buffers taken back for reuse. */
  released: number;
}

/** Smallest power of two ≥ `bytes` (and ≥ {@link POOLED_MESSAGE_FROM_BYTES}). */
function classOf(bytes: number): number {
  let size = POOLED_MESSAGE_FROM_BYTES;
  while (size < bytes) size *= 2;
  return size;
}

const isClassSize = (n: number) =>
  n >= POOLED_MESSAGE_FROM_BYTES && n <= LARGEST_CLASS && (n & (n - 1)) === 0;

/** Free lists of message buffers by power-of-two size, 1 MiB to 16 MiB. */
export class MessageBufferPool {
  readonly #free = new Map<number, FreeBuffer[]>();
  readonly #maxRetainedBytes: number;
  #retainedBytes = 0;
  readonly stats: MessageBufferStats = { reused: 0, allocated: 0, released: 0 };

  /** @param maxRetainedBytes free buffers kept at most, bytes (default 64 MiB). */
  constructor(maxRetainedBytes = DEFAULT_MAX_RETAINED_BYTES) {
    this.#maxRetainedBytes = maxRetainedBytes;
  }

  /** Bytes held in free buffers now. */
  get retainedBytes(): number {
    return this.#retainedBytes;
  }

  /**
   * A buffer for a message of `bytes` bytes: a Buffer of exactly that length at offset 0 of a pooled
   * ArrayBuffer whose remaining bytes are zero.
   * @returns null when `bytes` is under {@link POOLED_MESSAGE_FROM_BYTES} or over 16 MiB (the caller
   *   allocates as before).
   */
  acquire(bytes: number): Buffer | null {
    if (bytes < POOLED_MESSAGE_FROM_BYTES || bytes > LARGEST_CLASS) return null;
    const size = classOf(bytes);
    const entry = this.#free.get(size)?.pop();
    if (!entry) {
      this.stats.allocated++;
      return Buffer.from(new ArrayBuffer(size), 0, bytes);
    }
    this.#retainedBytes -= size;
    this.stats.reused++;
    const out = Buffer.from(entry.buffer, 0, bytes);
    // The new message overwrites [0, bytes); what an earlier, longer one left past that is cleared.
    if (entry.dirty > bytes) new Uint8Array(entry.buffer, bytes, entry.dirty - bytes).fill(0);
    return out;
  }

  /**
   * Takes back the ArrayBuffer under `view` once nothing will read it again: it is detached (transferred
   * to the pool), so every view of it, `view` included, reads as empty from now on. Buffers of another
   * size, already detached ones and any beyond the retention limit are left alone.
   * @returns whether the buffer was taken.
   */
  release(view: Uint8Array): boolean {
    const buffer = view.buffer;
    if (!(buffer instanceof ArrayBuffer) || !isClassSize(buffer.byteLength)) return false;
    const size = buffer.byteLength;
    if (this.#retainedBytes + size > this.#maxRetainedBytes) return false;
    const dirty = Math.min(size, view.byteOffset + view.byteLength);
    const owned = structuredClone(buffer, { transfer: [buffer] });
    let list = this.#free.get(size);
    if (!list) {
      list = [];
      this.#free.set(size, list);
    }
    list.push({ buffer: owned, dirty });
    this.#retainedBytes += size;
    this.stats.released++;
    return true;
  }
}

/**
 * Whether `view` is a message (past its ≤ 16-byte prefix) in a buffer of {@link MessageBufferPool}'s
 * sizes, which holds nothing else (the rest is zero): such a buffer may be transferred as it is.
 */
export function isPooledMessageView(view: Uint8Array): boolean {
  return view.buffer instanceof ArrayBuffer && isClassSize(view.buffer.byteLength) && view.byteOffset <= 16;
}
