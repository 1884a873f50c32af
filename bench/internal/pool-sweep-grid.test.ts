/**
 * bench:internal pool-sweep's folding of runs into the grid and its recommendation: medians per cell,
 * totals of errors/degraded, and the thread count with the highest clean rate (ties: fewer threads).
 */
import { describe, expect, it } from 'vitest';
import { type GridCell, gridOf, type Run, recommend } from './pool-sweep.js';

function run(threads: number, rate: number, p99: number, extra: Partial<Run> = {}): Run {
  return {
    threads,
    repeat: 1,
    rate,
    achieved_rps: rate,
    p50_ms: p99 / 4,
    p99_ms: p99,
    errors: 0,
    degraded: 0,
    cpu_ms_per_call: { server_main: 3, server_other: 1, driver: 2 },
    ...extra,
  } as Run;
}

const cell = (threads: number, rate: number, p99_ms: number, errors = 0): GridCell => ({
  threads,
  rate,
  achieved_rps: rate,
  p50_ms: 1,
  p99_ms,
  errors,
  degraded: 0,
  cpu_ms_per_call: 4,
});

describe('gridOf', () => {
  it('takes medians of achieved/p50/p99/cpu and totals of errors and degraded, sorted by threads then rate', () => {
    const grid = gridOf([
      run(2, 100, 30, { errors: 1, degraded: 2 }),
      run(1, 50, 10),
      run(2, 100, 10, { degraded: 1, cpu_ms_per_call: { server_main: 5, server_other: 1, driver: 0 } }),
      run(2, 100, 20, { errors: 3, achieved_rps: 99 }),
    ]);
    expect(grid).toEqual([
      {
        threads: 1,
        rate: 50,
        achieved_rps: 50,
        p50_ms: 2.5,
        p99_ms: 10,
        errors: 0,
        degraded: 0,
        cpu_ms_per_call: 4,
      },
      {
        threads: 2,
        rate: 100,
        achieved_rps: 100,
        p50_ms: 5,
        p99_ms: 20,
        errors: 4,
        degraded: 3,
        cpu_ms_per_call: 4,
      },
    ]);
    expect(Object.keys(grid[0]!)).toEqual([
      'threads',
      'rate',
      'achieved_rps',
      'p50_ms',
      'p99_ms',
      'errors',
      'degraded',
      'cpu_ms_per_call',
    ]);
  });
});

describe('recommend', () => {
  it('picks the thread count clean (p99 ≤ 20 ms, no error) up to the highest rate', () => {
    const grid = [
      cell(1, 50, 12),
      cell(1, 100, 25),
      cell(2, 50, 10),
      cell(2, 100, 18),
      cell(2, 200, 40),
      cell(3, 50, 9),
      cell(3, 100, 19, 1),
    ];
    expect(recommend(grid)).toEqual({ threads: 2, max_rate_p99_20ms: 100 });
  });

  it('stops at the first unclean rate and prefers fewer threads on a tie', () => {
    const grid = [cell(1, 50, 30), cell(1, 100, 15), cell(2, 50, 15), cell(2, 100, 25), cell(3, 50, 14)];
    expect(recommend(grid)).toEqual({ threads: 2, max_rate_p99_20ms: 50 });
  });

  it('says null when no cell is clean, naming the lowest p99 at the lowest rate', () => {
    expect(recommend([cell(1, 50, 40), cell(2, 50, 30), cell(2, 100, 90)])).toEqual({
      threads: 2,
      max_rate_p99_20ms: null,
    });
    expect(() => recommend([])).toThrow('empty grid');
  });
});
