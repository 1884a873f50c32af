/**
 * Body-decoder worker: parses, bounds and validates large memory-service bodies off the
 * gRPC event loop, and hands the hits back with their contents as UTF-8 bytes (content-bytes.ts). Imports
 * only the retrieval validation code, the message-buffer size, the thread namer and the result-transfer
 * helper (types aside), never the server or the pool client.
 */

import { nameThisThread, THREAD_NAMES } from '../src/pool/thread-name.js';
import { transferred } from '../src/pool/transfer-result.js';
import { BranchError } from '../src/retrieval/branch-error.js';
import type { BodyDecodeResult, BodyDecodeTask } from '../src/retrieval/http/body-decoder.js';
import { decodeMemoryBody } from '../src/retrieval/validate.js';
import { bytesInPlace } from '../src/text/content-bytes.js';
import { POOLED_MESSAGE_FROM_BYTES } from '../src/util/message-buffers.js';

nameThisThread(THREAD_NAMES.decoder);

/**
 * Piscina task entry point: the hits, or the branch error as data (classes do not survive the clone),
 * with a large body handed back by transfer so the main thread can reuse its buffer, and the contents'
 * buffer transferred with the hits.
 */
export default function memoryBodyWorker(task: BodyDecodeTask): BodyDecodeResult {
  const result = decode(task);
  const transfer: ArrayBuffer[] = [];
  // The hits' contents cross as bytes on one transferred buffer: the main thread never decodes them.
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
  // The branch gave up while this decode was queued: nobody will read the answer.
  if (Atomics.load(task.cancelled, 0) === 1) return { ok: false, code: 'cancelled', detail: 'cancelled' };
  try {
    return { ok: true, value: decodeMemoryBody(task.body, task.orgId, task.agentId, task.limits) };
  } catch (err) {
    if (err instanceof BranchError) return { ok: false, code: err.code, detail: err.detail };
    return { ok: false, code: 'IBEX_RETRIEVAL_BAD_SHAPE', detail: 'bad shape: undecodable body' };
  }
}
