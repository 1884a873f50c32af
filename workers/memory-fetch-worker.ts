/**
 * Memory-fetch worker: runs the memory service client — HTTP request, body, cap, decode,
 * validation — off the gRPC event loop, many reads at once, and hands back validated hits with their
 * contents as UTF-8 bytes on one transferred buffer (content-bytes.ts). Imports only the retrieval client
 * and the result-transfer helper, never the server or the pool client.
 */
import { workerData } from 'piscina';
import { nameThisThread, THREAD_NAMES } from '../src/pool/thread-name.js';
import { transferred } from '../src/pool/transfer-result.js';
import { BranchError } from '../src/retrieval/branch-error.js';
import { BodyDecoder } from '../src/retrieval/http/body-decoder.js';
import { HttpMemorySource } from '../src/retrieval/http/memory-http.js';
import type {
  MemoryFetchConfig,
  MemoryFetchResult,
  MemoryFetchTask,
} from '../src/retrieval/http/memory-http-thread.js';
import type { ValidatedHits } from '../src/retrieval/validate.js';
import { bytesInPlace } from '../src/text/content-bytes.js';

nameThisThread(THREAD_NAMES.memory);

// Large bodies still go to the body-decoder thread, fair across orgs: parsed here, a 6 MB body would stop
// this thread's I/O for every org's reads for tens of ms (bench:isolation: the quiet org's L0 under the
// noisy memory kinds fell from 97 % to 61 % when every body was decoded in this thread).
const source = new HttpMemorySource({ ...(workerData as MemoryFetchConfig), decoder: new BodyDecoder() });

/** `Atomics.waitAsync` (ES2024, Node 20+), not in the ES2023 lib this project compiles with. */
interface AtomicsWaitAsync {
  waitAsync(
    array: Int32Array,
    index: number,
    value: number,
  ): { async: false; value: string } | { async: true; value: Promise<string> };
}

/**
 * Piscina task entry point: one branch read. The branch's flag aborts the request when it gives up (the
 * answer is then `cancelled`); errors come back as data, since classes do not survive the clone.
 */
export default async function memoryFetch(task: MemoryFetchTask): Promise<MemoryFetchResult> {
  const controller = new AbortController();
  let settled = false;
  const wait = (Atomics as unknown as AtomicsWaitAsync).waitAsync(task.cancelled, 0, 0);
  if (!wait.async) controller.abort();
  else
    void wait.value.then(() => {
      if (!settled) controller.abort();
    });
  try {
    const value: ValidatedHits =
      task.op === 'hot'
        ? await source.hot(task.orgId, task.agentId, controller.signal)
        : await source.search(task.orgId, task.agentId, task.query, controller.signal);
    // Contents cross as bytes, transferred: those decoded here are encoded now; those the body-decoder
    // thread sent are already views on a buffer of their own, which goes on as it came.
    const transfer = new Set<ArrayBuffer>();
    const encoded = bytesInPlace(value.hits);
    if (encoded !== null) transfer.add(encoded);
    for (const hit of value.hits)
      if (hit.content instanceof Uint8Array && hit.content.buffer instanceof ArrayBuffer)
        transfer.add(hit.content.buffer);
    const result: MemoryFetchResult = { ok: true, value };
    return transfer.size === 0 ? result : transferred(result, [...transfer]);
  } catch (err) {
    if (controller.signal.aborted) return { ok: false, code: 'cancelled' };
    if (err instanceof BranchError)
      return { ok: false, code: err.code, status: err.status, detail: err.detail };
    return {
      ok: false,
      code: 'IBEX_RETRIEVAL_HTTP_TRANSPORT',
      status: 'error',
      detail: 'memory service unreachable (unknown)',
    };
  } finally {
    // Wakes this read's waiter, so that no Atomics.waitAsync outlives it.
    settled = true;
    Atomics.notify(task.cancelled, 0);
  }
}
