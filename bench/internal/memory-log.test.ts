/**
 * bench:internal memory-log (bench/internal/lib/memory-log.ts): the main thread's ArrayBuffer / external memory growth
 * between mark-compacts, from the preload's log. Exact figures on a hand-made log, and the CLI on a file.
 */
import { describe, expect, it } from 'vitest';
import { benchLogCli } from '../../test/helpers/bench-log-cli.js';
import { parseMemoryLine, summariseMemoryLog } from './lib/memory-log.js';

// Mark-compacts (kind 4) at 1,000, 2,000.5 and 3,500 ms. After the first, ArrayBuffers start high (not
// yet freed), fall to their low, then grow: 20 MB over 0.98 s, then 29.4 MB over 1.47 s. One scavenge
// (kind 1) at 1,500 ms gives back 1 MB. External memory grows 1.5× as fast.
const LOG = [
  'mem 900 40.00 60.00 70.0',
  'gc 1000.0 4 12.00',
  'mem 1005 40.00 60.00 30.0',
  'mem 1020 2.00 3.00 31.0',
  'mem 1490 12.00 18.00 40.0',
  'gc 1500.0 1 3.00',
  'mem 1510 11.00 16.50 35.0',
  'mem 2000 22.00 33.00 50.0',
  'gc 2000.5 4 10.00',
  'mem 2020 1.00 1.50 30.0',
  'mem 3490 30.40 45.60 60.0',
  'gc 3500.0 4 14.00',
  'not a line',
  'mem 3600 x 1 1',
].join('\n');

describe('summariseMemoryLog', () => {
  const events = LOG.split('\n')
    .map(parseMemoryLine)
    .filter((e) => e !== null);

  it('parses the preload lines and nothing else', () => {
    expect(events).toHaveLength(12);
    expect(events[1]).toEqual({ type: 'gc', at: 1000, kind: 4, ms: 12 });
    expect(events[0]).toEqual({ type: 'mem', at: 900, arrayBuffersMb: 40, externalMb: 60, heapUsedMb: 70 });
  });

  it('measures growth from each interval’s low point, and the most a scavenge gave back', () => {
    expect(summariseMemoryLog(events)).toEqual({
      mark_compacts: 3,
      // 1.0005 s and 1.4995 s apart.
      period_s: 1.25,
      pause_ms: 12,
      intervals: 2,
      // (22 − 2) / 0.98 = 20.408 and (30.4 − 1) / 1.47 = 20.0 MB/s, median 20.204; external
      // (33 − 3) / 0.98 = 30.612 and (45.6 − 1.5) / 1.47 = 30.0, median 30.306.
      array_buffers_mb_per_s: 20.2,
      external_mb_per_s: 30.31,
      array_buffers_freed_by_a_scavenge_mb: 1,
    });
  });

  it('leaves out what came before --after-ms', () => {
    const s = summariseMemoryLog(events, 1900);
    expect(s.mark_compacts).toBe(2);
    expect(s.intervals).toBe(1);
    expect(s.period_s).toBe(1.5);
    expect(s.array_buffers_freed_by_a_scavenge_mb).toBeNull();
  });
});

describe('npm run bench:internal -- memory-log', () => {
  it('prints the summary with KB per call for --rate, refuses a missing --log (2) and an empty log (1)', () => {
    const { log: file, run, expectRefusals } = benchLogCli('memory-log', LOG);
    const ok = run('--log', file, '--rate', '1000', '--json');
    expect(ok.status).toBe(0);
    const out = JSON.parse(ok.stdout);
    expect(out.array_buffers_kb_per_call).toBe(20.2);
    expect(out.external_kb_per_call).toBe(30.3);
    expectRefusals('no memory lines');
  });
});
