/**
 * Threads follow the CPUs the process may run on (its affinity mask), not the machine's: a service
 * pinned to one core (`taskset -c N`) starts one CPU-stage thread, so no task waits for another thread's
 * time slice on that core. Node 20's `os.availableParallelism()` reads the mask (libuv's
 * `sched_getaffinity`); this pins that against a real pinned process.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { defaultThreadCounts } from '../../src/config/thread-sizing.js';

const SETTINGS = path.resolve('dist/src/config/settings.js');
const hasTaskset = existsSync('/usr/bin/taskset') && existsSync('/proc/self/status');

/** The first CPU of this process's affinity mask (`Cpus_allowed_list`, e.g. `0-1` or `2,5`). */
function firstAllowedCpu(): number {
  const line = readFileSync('/proc/self/status', 'utf8').match(/^Cpus_allowed_list:\s*(\d+)/m);
  return Number(line?.[1] ?? 0);
}

describe.skipIf(!hasTaskset || !existsSync(SETTINGS))('pool sizing under an affinity mask', () => {
  it('defaults the pool to one thread when the process is pinned to one CPU', () => {
    const script = `import(${JSON.stringify(SETTINGS)}).then((m) => { const s = m.loadSettings({}); console.log(JSON.stringify([s.pool.minThreads, s.pool.maxThreads])); })`;
    const pinned = execFileSync(
      'taskset',
      ['-c', String(firstAllowedCpu()), process.execPath, '-e', script],
      {
        encoding: 'utf8',
      },
    );
    expect(JSON.parse(pinned)).toEqual([1, 1]);
  });

  it('defaults the store-read threads from the mask too: one on a pinned process', () => {
    const script = `import(${JSON.stringify(SETTINGS)}).then((m) => console.log(m.loadSettings({}).embeddedReadThreads))`;
    const pinned = execFileSync(
      'taskset',
      ['-c', String(firstAllowedCpu()), process.execPath, '-e', script],
      {
        encoding: 'utf8',
      },
    );
    expect(Number(pinned)).toBe(1);
  });
});

describe('defaultThreadCounts', () => {
  it('gives one pool thread per usable CPU and one store-read thread per four, within 1..16', () => {
    expect(defaultThreadCounts(1)).toEqual({ poolThreads: 1, storeReadThreads: 1 });
    expect(defaultThreadCounts(2)).toEqual({ poolThreads: 2, storeReadThreads: 1 });
    expect(defaultThreadCounts(4)).toEqual({ poolThreads: 4, storeReadThreads: 1 });
    expect(defaultThreadCounts(5)).toEqual({ poolThreads: 5, storeReadThreads: 2 });
    expect(defaultThreadCounts(16)).toEqual({ poolThreads: 16, storeReadThreads: 4 });
    expect(defaultThreadCounts(256).storeReadThreads).toBe(16);
    expect(defaultThreadCounts(0)).toEqual({ poolThreads: 1, storeReadThreads: 1 });
  });

  it('reads the affinity mask, not the machine: os.availableParallelism, never os.cpus().length', () => {
    expect(defaultThreadCounts().poolThreads).toBe(os.availableParallelism());
  });
});
