/**
 * The benches' main-thread scheduling figures (bench/lib/service-process.ts `readMainThreadSched`,
 * bench/lib/server-metrics.ts `stepStats`): run-queue wait and preemptions of a process's main thread from
 * `/proc`, per wall second over a step. Linux only; elsewhere the reader answers null and the step null.
 */
import { spawn } from 'node:child_process';
import os from 'node:os';
import { describe, expect, it, onTestFinished } from 'vitest';
import { parsePrometheus, type ServerSnapshot, stepStats } from '../../../bench/lib/server-metrics.js';
import { readMainThreadSched } from '../../../bench/lib/service-process.js';

const onLinux = process.platform === 'linux';

describe('main-thread scheduling figures', () => {
  it.runIf(onLinux)(
    'reads a live process, grows while it competes for a CPU, null once it is gone',
    async () => {
      // Twice as many spinning processes as cores (at least 3): each gets at most half a core, so the first
      // one's main thread spends time runnable without a CPU and is preempted, whatever else the machine runs.
      const n = Math.max(3, 2 * os.availableParallelism());
      const children = Array.from({ length: n }, () => spawn(process.execPath, ['-e', 'for (;;) {}']));
      onTestFinished(() => {
        for (const c of children) c.kill('SIGKILL');
      });
      const child = children[0]!;
      await new Promise((resolve) => child.once('spawn', resolve));
      const before = readMainThreadSched(child.pid!);
      expect(before).not.toBeNull();
      await new Promise((resolve) => setTimeout(resolve, 600));
      const after = readMainThreadSched(child.pid!)!;
      expect(after.runqueue_wait_s).toBeGreaterThan(before!.runqueue_wait_s);
      expect(after.involuntary_switches).toBeGreaterThan(before!.involuntary_switches);
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGKILL');
      await exited;
      expect(readMainThreadSched(child.pid!)).toBeNull();
    },
  );

  it('reports wait ms and preemptions per wall second between two snapshots, null without schedstat', () => {
    const snap = (at: number, waitS: number, switches: number | null): ServerSnapshot => ({
      at,
      samples: new Map(),
      machine: null,
      cpu: {
        total_s: 0,
        main_thread_s: 0,
        main_thread_sched:
          switches === null ? null : { runqueue_wait_s: waitS, involuntary_switches: switches },
      },
    });
    // 2 s apart: 0.05 s more waiting and 600 more preemptions → 25 ms/s and 300 per second.
    expect(stepStats(snap(1000, 1.25, 100), snap(3000, 1.3, 700)).main_thread_sched).toEqual({
      runqueue_wait_ms_per_s: 25,
      preemptions_per_s: 300,
    });
    expect(stepStats(snap(1000, 1.25, null), snap(3000, 1.3, 700)).main_thread_sched).toBeNull();
  });

  it('counts the large histories refused at once between two snapshots', () => {
    const snap = (at: number, refused: number): ServerSnapshot => ({
      at,
      samples: parsePrometheus(`ibex_context_refused_too_late_total ${refused}\n`),
      machine: null,
      cpu: null,
    });
    expect(stepStats(snap(1000, 4), snap(3000, 11)).refused_too_late).toBe(7);
  });
});
