/**
 * Memory-service bodies: small ones decoded inline, large ones in one thread, fair across orgs, so the
 * event loop's work is bounded by the cap and the limit (contract.md §1; docs/design/retrieval.md).
 */
import path from 'node:path';
import { Piscina } from 'piscina';
import { type FairEntry, FairQueue, unqueued } from '../../pool/fair-queue.js';
import { projectRoot } from '../../pool/worker-file.js';
import { POOLED_MESSAGE_FROM_BYTES, releaseMessageBuffer } from '../../util/message-buffers.js';
import { BranchError, type BranchErrorCode, BranchErrors } from '../branch-error.js';
import { decodeMemoryBody, type HitLimits, type ValidatedHits } from '../validate.js';

/** Larger bodies go to the thread; a hop costs ~0.1 ms, a 64 KiB parse well under 0.5 ms. */
export const INLINE_BODY_BYTES = 64 * 1024;
/** Past this many waiting, a body fails at once (`body decoder busy`), or another org's newest does. */
const MAX_QUEUE = 32;

export interface BodyDecodeTask {
  body: Uint8Array;
  orgId: string;
  agentId: string;
  limits: HitLimits;
  /** Set to 1 when the branch gives up: a queued decode is skipped. */
  cancelled: Int32Array;
}

/** Errors cross as data; a body of {@link POOLED_MESSAGE_FROM_BYTES} or more comes back for reuse. */
export type BodyDecodeResult = (
  | { ok: true; value: ValidatedHits }
  | { ok: false; code: BranchErrorCode; detail: string }
  | { ok: false; code: 'cancelled'; detail: string }
) & { body?: Uint8Array };

export function resolveBodyWorkerFile(): string {
  return path.join(projectRoot(), 'dist', 'workers', 'memory-body-worker.js');
}

interface Pending extends FairEntry {
  task: BodyDecodeTask;
  signal: AbortSignal;
  onAbort: () => void;
  resolve: (v: ValidatedHits) => void;
  reject: (err: unknown) => void;
}

export class BodyDecoder {
  #pool: Piscina<BodyDecodeTask, BodyDecodeResult> | null = null;
  readonly #filename: string;
  readonly #inlineBytes: number;
  readonly #queue = new FairQueue<Pending>();
  #running = false;

  /** @param inlineBytes the memory-fetch thread passes Infinity: it is off the event loop already. */
  constructor(filename = resolveBodyWorkerFile(), inlineBytes = INLINE_BODY_BYTES) {
    this.#filename = filename;
    this.#inlineBytes = inlineBytes;
  }

  /** Starts the thread at start-up, so no branch pays for it. */
  warm(): void {
    this.#threads();
  }

  /**
   * A large `body` is transferred; once `signal` aborts the call rejects and a queued decode is withdrawn.
   * @throws BranchError `invalid JSON`, `bad shape: …`, `body decoder busy`; the signal's reason.
   */
  decode(
    body: Uint8Array,
    orgId: string,
    agentId: string,
    limits: HitLimits,
    signal: AbortSignal,
  ): Promise<ValidatedHits> {
    if (body.byteLength <= this.#inlineBytes) {
      try {
        return Promise.resolve(decodeMemoryBody(body, orgId, agentId, limits));
      } catch (err) {
        return Promise.reject(err);
      }
    }
    if (signal.aborted) {
      releaseMessageBuffer(body);
      return Promise.reject(signal.reason);
    }
    return new Promise<ValidatedHits>((resolve, reject) => {
      const cancelled = new Int32Array(new SharedArrayBuffer(4));
      const p: Pending = {
        ...unqueued(),
        task: { body, orgId, agentId, limits, cancelled },
        signal,
        resolve,
        reject,
        onAbort: () => {
          Atomics.store(cancelled, 0, 1);
          this.#queue.remove(p);
          // A queued body is nobody's now; one on the thread is detached (release skips it).
          releaseMessageBuffer(body);
          reject(signal.reason);
        },
      };
      if (this.#queue.size >= MAX_QUEUE && !this.#shedFor(orgId)) {
        releaseMessageBuffer(body);
        reject(BranchErrors.decoderBusy());
        return;
      }
      signal.addEventListener('abort', p.onAbort, { once: true });
      this.#queue.push(orgId, p);
      this.#pump();
    });
  }

  /** A running decode is abandoned. Idempotent. */
  async close(): Promise<void> {
    for (const p of this.#queue.drain()) {
      p.signal.removeEventListener('abort', p.onAbort);
      p.reject(BranchErrors.decoderBusy());
    }
    const pool = this.#pool;
    this.#pool = null;
    await pool?.destroy();
  }

  #shedFor(orgId: string): boolean {
    const victim = this.#queue.shedFor(orgId);
    if (victim === null) return false;
    victim.signal.removeEventListener('abort', victim.onAbort);
    releaseMessageBuffer(victim.task.body);
    victim.reject(BranchErrors.decoderBusy());
    return true;
  }

  #pump(): void {
    if (this.#running) return;
    const p = this.#queue.shift();
    if (p === null) return;
    this.#running = true;
    const { task, signal } = p;
    const settle = () => {
      signal.removeEventListener('abort', p.onAbort);
      this.#running = false;
      this.#pump();
    };
    // No signal to piscina: aborting a running task would terminate the thread.
    this.#threads()
      .run(task, { transferList: [task.body.buffer as ArrayBuffer] })
      .then(
        (result) => {
          settle();
          // The hits are strings of their own: the buffer can take the next large message.
          releaseMessageBuffer(result.body);
          if (result.ok) p.resolve(result.value);
          else if (result.code === 'cancelled') p.reject(signal.reason);
          else p.reject(new BranchError(result.code, 'error', result.detail));
        },
        (err: unknown) => {
          settle();
          p.reject(err);
        },
      );
  }

  #threads(): Piscina<BodyDecodeTask, BodyDecodeResult> {
    this.#pool ??= new Piscina<BodyDecodeTask, BodyDecodeResult>({
      filename: this.#filename,
      // One thread: large bodies are rare and short; the CPU pool needs the cores.
      minThreads: 1,
      maxThreads: 1,
      idleTimeout: Number.POSITIVE_INFINITY,
      concurrentTasksPerWorker: 1,
      recordTiming: false,
    });
    return this.#pool;
  }
}
