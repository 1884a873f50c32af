/**
 * Where memory-service bodies are decoded (contract.md §1 isolation rule, §4.1). JSON.parse of a
 * body at the hot cap (~7.9 MB) costs tens of ms, and a body of 5,000 small hits costs as much in object
 * allocation: on the gRPC event loop that would stall every tenant's I/O. So a body larger than
 * {@link INLINE_BODY_BYTES} is transferred (not copied) to a body-decoder thread, which parses it, keeps
 * the first `limit` items, validates, scopes and checks their size, and sends back at most `limit` hits.
 * Small bodies — the common case, tens of KB — are decoded inline, where a thread hop would cost more
 * than the parse. Either way the main thread's work is bounded by the cap and the limit, not by what the
 * memory service chose to send. Large bodies wait for the thread in a {@link FairQueue} by org: an org
 * whose memory service answers heavily waits behind its own bodies, not in front of other orgs'.
 */
import path from 'node:path';
import { Piscina } from 'piscina';
import { type FairEntry, FairQueue, unqueued } from '../../pool/fair-queue.js';
import { projectRoot } from '../../pool/worker-file.js';
import { POOLED_MESSAGE_FROM_BYTES, releaseMessageBuffer } from '../../util/message-buffers.js';
import { BranchError, type BranchErrorCode, BranchErrors } from '../branch-error.js';
import { decodeMemoryBody, type HitLimits, type ValidatedHits } from '../validate.js';

/**
 * Bodies up to this many bytes are decoded on the calling thread: 64 KiB parses in well under 0.5 ms, far
 * inside the 2 ms event-loop target (bench:isolation measures both paths), and a thread hop costs ~0.1 ms.
 */
export const INLINE_BODY_BYTES = 64 * 1024;
/**
 * Decodes waiting for the thread past which a body fails its branch at once (`body decoder busy`), unless
 * another org has at least two more waiting: then that org's newest one fails instead.
 */
const MAX_QUEUE = 32;

/** One decode as it crosses to the thread. `body` owns its ArrayBuffer, which is transferred. */
export interface BodyDecodeTask {
  body: Uint8Array;
  orgId: string;
  agentId: string;
  limits: HitLimits;
  /** Set to 1 by the branch when it gives up: a decode still queued is skipped. */
  cancelled: Int32Array;
}

/**
 * What the thread answers: the hits, or the branch error's code and detail (classes do not clone); and a
 * body of {@link POOLED_MESSAGE_FROM_BYTES} or more handed back (transferred), for the process's message
 * buffers.
 */
export type BodyDecodeResult = (
  | { ok: true; value: ValidatedHits }
  | { ok: false; code: BranchErrorCode; detail: string }
  | { ok: false; code: 'cancelled'; detail: string }
) & { body?: Uint8Array };

/** Absolute path of the compiled body-decoder worker (`npm run build`). */
export function resolveBodyWorkerFile(): string {
  return path.join(projectRoot(), 'dist', 'workers', 'memory-body-worker.js');
}

/** A large body waiting for, or on, the decoder thread. */
interface Pending extends FairEntry {
  task: BodyDecodeTask;
  signal: AbortSignal;
  onAbort: () => void;
  resolve: (v: ValidatedHits) => void;
  reject: (err: unknown) => void;
}

/** Decodes memory-service bodies: inline when small, in one dedicated thread, fair across orgs, when large. */
export class BodyDecoder {
  #pool: Piscina<BodyDecodeTask, BodyDecodeResult> | null = null;
  readonly #filename: string;
  readonly #inlineBytes: number;
  readonly #queue = new FairQueue<Pending>();
  #running = false;

  /**
   * @param filename worker module; default {@link resolveBodyWorkerFile}. The thread starts on first use.
   * @param inlineBytes bodies up to this many bytes are decoded on the calling thread; default
   *   {@link INLINE_BODY_BYTES}. The memory-fetch thread passes Infinity: it is off the event loop already.
   */
  constructor(filename = resolveBodyWorkerFile(), inlineBytes = INLINE_BODY_BYTES) {
    this.#filename = filename;
    this.#inlineBytes = inlineBytes;
  }

  /**
   * Starts the thread now (start-up), so that the first large body does not pay for a thread start
   * inside its branch timeout.
   */
  warm(): void {
    this.#threads();
  }

  /**
   * @param body owns its whole ArrayBuffer when larger than {@link INLINE_BODY_BYTES}: it is transferred.
   * @param orgId the request's org: large bodies are served round-robin across orgs.
   * @param signal the branch's: once it aborts, the call rejects at once with its reason, and a decode
   *   still waiting is withdrawn (one already running finishes unread).
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
          // A queued body is nobody's now; one already on the thread is detached here (release skips it).
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

  /** Stops the thread (a decode in progress is abandoned: nobody waits for it at shutdown). Idempotent. */
  async close(): Promise<void> {
    for (const p of this.#queue.drain()) {
      p.signal.removeEventListener('abort', p.onAbort);
      p.reject(BranchErrors.decoderBusy());
    }
    const pool = this.#pool;
    this.#pool = null;
    await pool?.destroy();
  }

  /** Full queue: fails the newest waiting body of the org with the most, if it has ≥ 2 more than `orgId`. */
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
          // The hits are strings of their own: the body's buffer can take the next large message.
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
      // One thread: large bodies are rare and each decode is short; the CPU pool needs the cores.
      minThreads: 1,
      maxThreads: 1,
      idleTimeout: Number.POSITIVE_INFINITY,
      concurrentTasksPerWorker: 1,
      recordTiming: false,
    });
    return this.#pool;
  }
}
