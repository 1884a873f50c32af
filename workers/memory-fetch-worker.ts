/** Memory-fetch worker: the memory service client off the event loop (http/memory-http-thread.ts). */
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

// Large bodies still go to the body-decoder thread, so one org's parse does not stall every org's reads
// here (docs/design/retrieval.md).
const source = new HttpMemorySource({ ...(workerData as MemoryFetchConfig), decoder: new BodyDecoder() });

/** `Atomics.waitAsync` (Node 20+) is not in the ES2023 lib this project compiles with. */
interface AtomicsWaitAsync {
  waitAsync(
    array: Int32Array,
    index: number,
    value: number,
  ): { async: false; value: string } | { async: true; value: Promise<string> };
}

/** One branch read; the branch's flag aborts the request (`cancelled`); errors cross as data. */
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
    // Contents decoded here are encoded now; the body-decoder thread's are already on a buffer of their own.
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
