/** Piscina worker for the CPU stage (contract.md §1, §10): pack + format of one assembly. */

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

// Loading the module is the warm-up: piscina reports the thread ready only after it.
warmCpuTask();
// Exact-count encodings take ~0.5 s to load: not inside a call's deadline.
if (exactTokensSetting()) warmBpe();

/** Runs one task; its index arrays are transferred back, not cloned. */
export default function cpuTask(input: CpuTaskInput): CpuTaskOutput {
  const output = runCpuTask(input);
  return transferred(output, outputTransferList(output));
}
