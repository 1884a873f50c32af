/**
 * `bench:internal sched-trace` (bench/internal/lib/sched-trace.ts): from `perf script` lines of a scheduler trace, the
 * intervals in which one main thread was runnable without a CPU, who preempted it and what every CPU ran
 * meanwhile. The CLI runs compiled (`npm test` builds first).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import { projectPath } from '../lib/paths.js';
import { parseSchedLine, type SchedEvent, summariseMainThreadWaits } from './lib/sched-trace.js';

const sw = (
  cpu: number,
  at: string,
  curPid: number,
  curTid: number,
  prev: number,
  state: string,
  next: string,
  nextPid: number,
) =>
  `${' '.repeat(10)}x ${curPid}/${curTid} [00${cpu}]  ${at}: sched:sched_switch: prev_comm=x prev_pid=${prev} prev_prio=120 prev_state=${state} ==> next_comm=${next} next_pid=${nextPid} next_prio=120`;
const wake = (cpu: number, at: string, curPid: number, curTid: number, woken: number) =>
  `${' '.repeat(10)}x ${curPid}/${curTid} [00${cpu}]  ${at}: sched:sched_wakeup: comm=node pid=${woken} prio=120 target_cpu=00${cpu}`;

// Service 100 (main thread 100, store thread 101); a driver process 200 (thread 201).
const TRACE = [
  sw(0, '10.000000', 0, 0, 0, 'R', 'node', 100), // main runs on CPU 0
  sw(1, '10.000100', 0, 0, 0, 'R', 'ibex-store', 101), // store thread (first seen here) on CPU 1
  sw(1, '10.000200', 100, 101, 101, 'S', 'swapper/1', 0), // store sleeps: CPU 1 idle
  sw(0, '10.001000', 100, 100, 100, 'R', 'ibex-store', 101), // store preempts main on CPU 0: wait starts
  sw(0, '10.003000', 100, 101, 101, 'S', 'node', 100), // main back after 2 ms (CPU 1 idle all along)
  sw(0, '10.004000', 100, 100, 100, 'S', 'swapper/0', 0), // main sleeps
  sw(1, '10.004500', 0, 0, 0, 'R', 'node', 201), // the driver runs on CPU 1
  wake(1, '10.005000', 200, 201, 100), // the driver wakes main: wait starts
  sw(0, '10.005500', 0, 0, 0, 'R', 'node', 100), // main runs 0.5 ms later
  'not a sched line',
].join('\n');

function events(text: string): SchedEvent[] {
  return text
    .split('\n')
    .map(parseSchedLine)
    .filter((e): e is SchedEvent => e !== null);
}

describe('sched-trace summary', () => {
  it('parses switch and wakeup lines, nothing else', () => {
    expect(parseSchedLine(sw(0, '10.001000', 100, 100, 100, 'R', 'ibex-store', 101))).toEqual({
      at: 10.001,
      cpu: '000',
      pid: '100',
      tid: '100',
      kind: 'switch',
      prevTid: '100',
      prevState: 'R',
      nextComm: 'ibex-store',
      nextTid: '101',
    });
    expect(parseSchedLine(wake(1, '10.005000', 200, 201, 100))).toMatchObject({
      kind: 'wakeup',
      wokenTid: '100',
    });
    expect(parseSchedLine('not a sched line')).toBeNull();
  });

  it('measures the waits, the preemptions and what ran meanwhile', () => {
    const s = summariseMainThreadWaits(events(TRACE), '100');
    expect(s.window_s).toBe(5.5 / 1000);
    expect(s.waits).toBe(2);
    // Percentiles from the benches' HDR estimator (src/tools/client/stats.ts): of two waits, the median is the lower.
    expect(s.wait_ms).toEqual({ total: 2.5, p50: 0.5, p99: 2, max: 2 });
    expect(s.waits_over_1ms).toBe(1);
    expect(s.waits_over_2ms).toBe(0);
    expect(s.preempted_by).toEqual({ 'ibex-store (service)': 1 });
    // Preemption (2 ms): CPU 0 ran the store thread, CPU 1 was idle. Wake-up wait (0.5 ms): CPU 0 idle,
    // CPU 1 the driver.
    expect(s.cpu_ms_while_waiting).toEqual({ idle: 2.5, 'ibex-store (service)': 2, 'node (200)': 0.5 });
  });

  it('the CLI prints per-second figures and refuses a trace without the thread', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'ibex-sched-'));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    const file = path.join(dir, 'sched.txt');
    writeFileSync(file, TRACE);
    const cli = projectPath('dist/bench/internal/sched-trace.js');
    const ok = spawnSync(process.execPath, [cli, '--perf-script', file, '--pid', '100'], {
      encoding: 'utf8',
    });
    expect(ok.status).toBe(0);
    // 2.5 ms over 5.5 ms of trace = 455 ms/s; 2 waits = 364 waits/s.
    expect(ok.stdout).toContain(
      'runnable without a CPU 455 ms/s in 364 waits/s (p50 0.5 ms, p99 2 ms, max 2 ms;',
    );
    const json = spawnSync(process.execPath, [cli, '--perf-script', file, '--pid', '100', '--json'], {
      encoding: 'utf8',
    });
    expect(JSON.parse(json.stdout).preempted_by).toEqual({ 'ibex-store (service)': 1 });
    // From 3.5 ms on only the wake-up wait is left (the 2 ms preemption lies before).
    const late = spawnSync(
      process.execPath,
      [cli, '--perf-script', file, '--pid', '100', '--from-s', '0.0035', '--json'],
      { encoding: 'utf8' },
    );
    expect(JSON.parse(late.stdout)).toMatchObject({ waits: 1, wait_ms: { total: 0.5 }, preempted_by: {} });
    const other = spawnSync(process.execPath, [cli, '--perf-script', file, '--pid', '999'], {
      encoding: 'utf8',
    });
    expect(other.status).toBe(1);
    expect(other.stderr).toContain('no sched_switch of thread 999');
    const bad = spawnSync(process.execPath, [cli, '--perf-script', file, '--pid', 'x'], { encoding: 'utf8' });
    expect(bad.status).not.toBe(0);
    expect(bad.stderr).toContain("--pid must be a process id, got 'x'");
  });
});
