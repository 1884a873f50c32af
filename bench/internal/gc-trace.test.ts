/**
 * `bench:internal gc-trace` (bench/internal/lib/gc-trace.ts) parses V8's `--trace-gc-nvp` lines among the service's own log
 * lines and summarises them per isolate, in order of first appearance, after a per-isolate uptime cut;
 * `--service-log` (bench/lib/bench-run.ts) is checked before a bench generates data. The CLIs run compiled
 * (`npm test` builds first).
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { benchLogCli } from '../../test/helpers/bench-log-cli.js';
import { projectPath } from '../lib/paths.js';
import { parseGcLine, summariseGc } from './lib/gc-trace.js';

const line = (
  isolate: string,
  atMs: number,
  kind: string,
  pause: number,
  allocated: number,
  promoted: number,
) =>
  `[4242:${isolate}]    ${atMs} ms: pause=${pause} mutator=12.5 gc=${kind} reduce_memory=0 ` +
  `scavenge=0.25 allocated=${allocated} promoted=${promoted} promotion_rate=87.3% unmapper_chunks=0`;

const LOG = [
  '{"level":40,"msg":"a service log line"}',
  line('0xaaa', 100, 's', 9, 1_000_000, 500_000), // before the cut
  line('0xaaa', 2000, 's', 2.5, 12_000_000, 1_500_000),
  line('0xbbb', 2100, 's', 0.4, 8_000_000, 40_000),
  line('0xaaa', 2200, 's', 3.5, 12_000_000, 1_600_000),
  line('0xaaa', 2300, 'mc', 7.25, 0, 0),
  line('0xaaa', 2400, 's', 1.5, 12_000_000, 1_400_000),
  'not a trace line',
].join('\n');

describe('gc-trace summary', () => {
  it('reads isolate, uptime, kind, pause, allocated and promoted from a trace line; other lines are null', () => {
    expect(parseGcLine(line('0x5f3e0c0', 51799, 's', 0.3, 7529048, 42744))).toEqual({
      isolate: '0x5f3e0c0',
      atMs: 51799,
      kind: 's',
      pauseMs: 0.3,
      allocated: 7529048,
      promoted: 42744,
    });
    // Two isolates writing at once: the fields after the last prefix belong to that prefix's isolate.
    expect(parseGcLine(`[4242:0xaaa]    18 ms: ${line('0xbbb', 14, 's', 0.8, 100, 7).trim()}`)).toMatchObject(
      {
        isolate: '0xbbb',
        atMs: 14,
        pauseMs: 0.8,
        promoted: 7,
      },
    );
    expect(parseGcLine('pause=0.9 mutator=1.0 gc=s allocated=100 promoted=0')).toBeNull();
    expect(parseGcLine('{"level":30,"msg":"listening"}')).toBeNull();
    expect(parseGcLine('[1:0x1]    5 ms: scavenge 1.2 (2.0) -> 1.0 (3.0) MB')).toBeNull();
  });

  it('summarises each isolate after the cut, main thread first', () => {
    const events = LOG.split('\n')
      .map(parseGcLine)
      .filter((e) => e !== null);
    const [main, worker] = summariseGc(events, 1000);
    expect(main).toEqual({
      isolate: '0xaaa',
      order: 0,
      scavenges: 3,
      // Quantiles read back from the benches' HDR estimator (3 significant digits): 2.5 ms is in the 2.500–2.501 bucket.
      scavenge_pause_ms: { p50: 2.501, p90: 3.5, max: 3.5, total: 7.5 },
      promoted_per_scavenge_p50: 1_500_000,
      promoted_share: 0.125,
      mark_compacts: 1,
      mark_compact_pause_ms: { max: 7.25, total: 7.25 },
    });
    expect(worker).toMatchObject({ isolate: '0xbbb', order: 1, scavenges: 1, promoted_share: 0.005 });
    // Without the cut the start-up scavenge counts.
    expect(summariseGc(events)[0]!.scavenges).toBe(4);
  });

  it('the CLI prints the summary, refuses a missing --log (exit 2), an unreadable file and a log without trace lines (exit 1)', () => {
    const { log: withTrace, run, expectRefusals } = benchLogCli('gc-trace', LOG);
    const ok = run('--log', withTrace, '--after-ms', '1000', '--json');
    expect(ok.status).toBe(0);
    expect(JSON.parse(ok.stdout).map((s: { scavenges: number }) => s.scavenges)).toEqual([3, 1]);
    expectRefusals('no --trace-gc-nvp lines');
    const absent = run('--log', path.join(path.dirname(withTrace), 'absent.log'));
    expect(absent.status).toBe(1);
    expect(absent.stderr).toMatch(/^cannot read --log .*absent\.log: ENOENT/);
    expect(absent.stderr).not.toMatch(/\n\s+at /);
  });

  it('bench:load refuses a --service-log in a directory that is not there, before any data or service', () => {
    const r = spawnSync(
      process.execPath,
      [projectPath('dist/bench/load.js'), '--service-log', '/nonexistent-ibex-dir/svc.log'],
      { encoding: 'utf8', timeout: 20_000 },
    );
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('--service-log: no directory /nonexistent-ibex-dir');
    expect(r.stderr).toContain('usage: npm run bench:load');
    expect(r.stderr).not.toMatch(/\n\s+at /);
    expect(r.stdout).not.toContain('data:');
  });
});
