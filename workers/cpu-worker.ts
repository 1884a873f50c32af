/**
 * Piscina worker for the CPU stage (contract.md §1, §10): one task = pack + format of one assembly.
 *
 * Imports only pure modules (the CPU task, and through it the packer and formatter), never the server.
 * The pool points at the compiled `dist/workers/cpu-worker.js`.
 */

import { exactTokensSetting } from '../src/config/settings.js';
import {
  type CpuTaskInput,
  type CpuTaskOutput,
  outputTransferList,
  runCpuTask,
  warmCpuTask,
} from '../src/cpu-stage/cpu-task.js';
import { nameThisThread, THREAD_NAMES } from '../src/pool/thread-name.js';
import { transferred } from '../src/pool/transfer-result.js';
import { warmBpe } from '../src/text/bpe.js';

// bench:load splits the server's CPU per thread by name.
nameThisThread(THREAD_NAMES.pool);

// Loading the module is the warm-up: piscina reports a thread ready (and the pool's start-up task runs)
// only after this, so no request pays for cold JIT tiers.
warmCpuTask();
// Exact counts (contract.md §5) run here; their encodings take ~0.5 s to load, so not inside a call's deadline.
if (exactTokensSetting()) warmBpe();

/**
 * Runs one task. The result's index arrays are transferred back, not cloned.
 * @throws whatever {@link runCpuTask} throws; piscina turns it into a rejection of that one call.
 */
export default function cpuTask(input: CpuTaskInput): CpuTaskOutput {
  const output = runCpuTask(input);
  return transferred(output, outputTransferList(output));
}
