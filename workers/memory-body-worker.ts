/** Body-decoder worker: large memory-service bodies off the event loop (retrieval/http/body-decoder.ts). */

import { nameThisThread, THREAD_NAMES } from '../src/pool/thread-name.js';
import { transferred } from '../src/pool/transfer-result.js';
import { BranchError } from '../src/retrieval/branch-error.js';
import type { BodyDecodeResult, BodyDecodeTask } from '../src/retrieval/http/body-decoder.js';
import { decodeMemoryBody } from '../src/retrieval/validate.js';
import { bytesInPlace } from '../src/text/content-bytes.js';
import { POOLED_MESSAGE_FROM_BYTES } from '../src/util/message-buffers.js';

nameThisThread(THREAD_NAMES.decoder);

/** Errors cross as data; a large body's buffer goes back for reuse, hit contents as bytes on one buffer. */
export default function memoryBodyWorker(task: BodyDecodeTask): BodyDecodeResult {
  const result = decode(task);
  const transfer: ArrayBuffer[] = [];
  const contents = result.ok ? bytesInPlace(result.value.hits) : null;
  if (contents !== null) transfer.push(contents);
  const body = task.body;
  if (body.buffer instanceof ArrayBuffer && body.buffer.byteLength >= POOLED_MESSAGE_FROM_BYTES) {
    transfer.push(body.buffer);
    return transferred({ ...result, body }, transfer);
  }
  return transfer.length === 0 ? result : transferred(result, transfer);
}

function decode(task: BodyDecodeTask): BodyDecodeResult {
  if (Atomics.load(task.cancelled, 0) === 1) return { ok: false, code: 'cancelled', detail: 'cancelled' };
  try {
    return { ok: true, value: decodeMemoryBody(task.body, task.orgId, task.agentId, task.limits) };
  } catch (err) {
    if (err instanceof BranchError) return { ok: false, code: err.code, detail: err.detail };
    return { ok: false, code: 'IBEX_RETRIEVAL_BAD_SHAPE', detail: 'bad shape: undecodable body' };
  }
}
