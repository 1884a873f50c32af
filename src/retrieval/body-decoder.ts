/**
 * Where memory-service bodies are decoded (SPEC §1 isolation rule, §4.1; issue 9 item 2). JSON.parse of a
 * body at the hot cap (~7.9 MB) costs tens of ms, and a body of 5,000 small hits costs as much in object
 * allocation: on the gRPC event loop that would stall every tenant's I/O. So a body larger than
 * {@link INLINE_BODY_BYTES} is transferred (not copied) to a body-decoder thread, which parses it, keeps
 * the first `limit` items, validates, scopes and checks their size, and sends back at most `limit` hits.
 * Small bodies — the common case, tens of KB — are decoded inline, where a thread hop would cost more
 * than the parse. Either way the main thread's work is bounded by the cap and the limit, not by what the
 * memory service chose to send.
 */
import path from 'node:path';
import { Piscina } from 'piscina';
import { projectRoot } from '../pool/worker-file.js';
import { BranchError, type BranchErrorCode, BranchErrors } from './branch-error.js';
import { decodeMemoryBody, type HitLimits, type ValidatedHits } from './validate.js';

/**
 * Bodies up to this many bytes are decoded on the calling thread: 64 KiB parses in well under 0.5 ms, far
 * inside the 2 ms event-loop target (bench:isolation measures both paths), and a thread hop costs ~0.1 ms.
 */
export const INLINE_BODY_BYTES = 64 * 1024;
/** Decodes waiting for the thread past which a body fails its branch at once (`body decoder busy`). */
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

/** What the thread answers: the hits, or the branch error's code and detail (classes do not clone). */
export type BodyDecodeResult =
  | { ok: true; value: ValidatedHits }
  | { ok: false; code: BranchErrorCode; detail: string }
  | { ok: false; code: 'cancelled'; detail: string };

/** Absolute path of the compiled body-decoder worker (`npm run build`). */
export function resolveBodyWorkerFile(): string {
  return path.join(projectRoot(), 'dist', 'workers', 'memory-body-worker.js');
}

/** Decodes memory-service bodies: inline when small, in one dedicated thread when large. */
export class BodyDecoder {
  #pool: Piscina<BodyDecodeTask, BodyDecodeResult> | null = null;
  readonly #filename: string;

  /** @param filename worker module; default {@link resolveBodyWorkerFile}. The thread starts on first use. */
  constructor(filename = resolveBodyWorkerFile()) {
    this.#filename = filename;
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
   * @param signal the branch's: once it aborts, the call rejects at once with its reason, and a decode
   *   still queued is skipped.
   * @throws BranchError `invalid JSON`, `bad shape: …`, `body decoder busy`; the signal's reason.
   */
  async decode(
    body: Uint8Array,
    orgId: string,
    agentId: string,
    limits: HitLimits,
    signal: AbortSignal,
  ): Promise<ValidatedHits> {
    if (body.byteLength <= INLINE_BODY_BYTES) return decodeMemoryBody(body, orgId, agentId, limits);
    if (signal.aborted) throw signal.reason;
    const pool = this.#threads();
    if (pool.queueSize >= MAX_QUEUE) throw BranchErrors.decoderBusy();
    const cancelled = new Int32Array(new SharedArrayBuffer(4));
    const task: BodyDecodeTask = { body, orgId, agentId, limits, cancelled };
    // No signal to piscina: aborting a running task would terminate the thread. An abort instead flags
    // the task (skipped if still queued) and answers the caller at once; a running decode finishes unread.
    const result = await new Promise<BodyDecodeResult>((resolve, reject) => {
      const onAbort = () => {
        Atomics.store(cancelled, 0, 1);
        reject(signal.reason);
      };
      signal.addEventListener('abort', onAbort, { once: true });
      pool.run(task, { transferList: [body.buffer as ArrayBuffer] }).then(
        (r) => {
          signal.removeEventListener('abort', onAbort);
          resolve(r);
        },
        (err: unknown) => {
          signal.removeEventListener('abort', onAbort);
          reject(err);
        },
      );
    });
    if (result.ok) return result.value;
    if (result.code === 'cancelled') throw signal.reason;
    throw new BranchError(result.code, 'error', result.detail);
  }

  /** Stops the thread (a decode in progress is abandoned: nobody waits for it at shutdown). Idempotent. */
  async close(): Promise<void> {
    const pool = this.#pool;
    this.#pool = null;
    await pool?.destroy();
  }

  #threads(): Piscina<BodyDecodeTask, BodyDecodeResult> {
    this.#pool ??= new Piscina<BodyDecodeTask, BodyDecodeResult>({
      filename: this.#filename,
      // One thread: large bodies are rare and each decode is short; the CPU pool needs the cores.
      minThreads: 1,
      maxThreads: 1,
      idleTimeout: Number.POSITIVE_INFINITY,
      concurrentTasksPerWorker: 1,
    });
    return this.#pool;
  }
}
