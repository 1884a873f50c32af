/** Recycled large-message buffers: no new external memory for V8 (docs/design/main-thread.md). */

/** Messages of this many bytes or more (5-byte gRPC prefix included) are assembled in pooled buffers. */
export const POOLED_MESSAGE_FROM_BYTES = 1 << 20;
const DEFAULT_MAX_RETAINED_BYTES = 64 << 20;

interface FreeBuffer {
  buffer: ArrayBuffer;
  dirty: number;
}

export interface MessageBufferStats {
  reused: number;
  missed: number;
  released: number;
}

/** Buffers a pool handed out: one message from offset 0, zeros after it. */
const HANDED_OUT = new WeakSet<ArrayBuffer>();

/** Free large-message buffers, reused smallest-fit. */
export class MessageBufferPool {
  readonly #free: FreeBuffer[] = [];
  readonly #maxRetainedBytes: number;
  #retainedBytes = 0;
  readonly stats: MessageBufferStats = { reused: 0, missed: 0, released: 0 };

  constructor(maxRetainedBytes = DEFAULT_MAX_RETAINED_BYTES) {
    this.#maxRetainedBytes = maxRetainedBytes;
  }

  get retainedBytes(): number {
    return this.#retainedBytes;
  }

  /** A Buffer of exactly `bytes` in the smallest free buffer that fits (tail zeroed); null if none fits. */
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
    if (entry.dirty > bytes) new Uint8Array(entry.buffer, bytes, entry.dirty - bytes).fill(0);
    HANDED_OUT.add(entry.buffer);
    return Buffer.from(entry.buffer, 0, bytes);
  }

  /**
   * Takes back `view`'s buffer once nothing reads it. It is detached, so no stale view can read the next
   * caller's bytes. @returns whether the buffer was taken.
   */
  release(view: Uint8Array): boolean {
    const buffer = view.buffer;
    if (!(buffer instanceof ArrayBuffer) || view.byteOffset > 16) return false;
    const size = buffer.byteLength;
    if (size < POOLED_MESSAGE_FROM_BYTES || this.#retainedBytes + size > this.#maxRetainedBytes) return false;
    const dirty = Math.min(size, view.byteOffset + view.byteLength);
    const owned = structuredClone(buffer, { transfer: [buffer] });
    this.#free.push({ buffer: owned, dirty });
    this.#retainedBytes += size;
    this.stats.released++;
    return true;
  }
}

/** The process's pool: grpc-js's decoder is patched process-wide to assemble into it. */
export const MESSAGE_BUFFERS = new MessageBufferPool();

export function releaseMessageBuffer(view: Uint8Array | null | undefined): void {
  if (view) MESSAGE_BUFFERS.release(view);
}

/** Whether `view` lies in a pooled one-message buffer, which may then be transferred as it is. */
export function isPooledMessageView(view: Uint8Array): boolean {
  return view.buffer instanceof ArrayBuffer && HANDED_OUT.has(view.buffer) && view.byteOffset <= 16;
}
