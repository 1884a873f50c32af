/**
 * The event-loop delay floor of a machine under a bench's load: an empty Node process
 * (bench/eld-probe.ts, compiled) that measures its event loop exactly as the service measures its main
 * thread's (src/telemetry/loop-delay.ts), started with the service's node flags. Its delays are waits
 * for a CPU and timer granularity only, since it runs no code between samples.
 */
import { type ChildProcessByStdio, spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { Readable, Writable } from 'node:stream';
import type { LoopDelayQuantiles } from '../../src/telemetry/loop-delay.js';
import { projectPath } from './paths.js';

/** A running probe process. */
export interface EldProbe {
  pid: number;
  /**
   * The probe's delay quantiles since the previous `take` (or its start), ms to the µs; starts a new
   * interval.
   */
  take(): Promise<LoopDelayQuantiles>;
  /** Ends the probe (closes its stdin) and waits for it to exit. */
  stop(): Promise<void>;
}

/** The compiled probe (`npm run build` first). */
export const ELD_PROBE_SCRIPT = projectPath('dist/bench/eld-probe.js');

/**
 * Starts the probe with `nodeFlags` (the service's, for a like-for-like floor).
 * @throws Error if the process cannot be started; `take` rejects if it exits meanwhile.
 */
export async function startEldProbe(nodeFlags: readonly string[]): Promise<EldProbe> {
  const child: ChildProcessByStdio<Writable, Readable, null> = spawn(
    process.execPath,
    [...nodeFlags, ELD_PROBE_SCRIPT],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  await new Promise<void>((resolve, reject) => {
    child.once('spawn', resolve);
    child.once('error', reject);
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const waiting: Array<{ resolve: (q: LoopDelayQuantiles) => void; reject: (e: Error) => void }> = [];
  createInterface({ input: child.stdout }).on('line', (line) => {
    waiting.shift()?.resolve(JSON.parse(line) as LoopDelayQuantiles);
  });
  void exited.then(() => {
    for (const w of waiting.splice(0)) w.reject(new Error('event-loop probe exited'));
  });
  return {
    pid: child.pid!,
    take() {
      if (child.exitCode !== null || child.signalCode !== null)
        return Promise.reject(new Error('event-loop probe exited'));
      return new Promise((resolve, reject) => {
        waiting.push({ resolve, reject });
        child.stdin.write('\n');
      });
    },
    async stop() {
      child.stdin.end();
      await exited;
    },
  };
}
