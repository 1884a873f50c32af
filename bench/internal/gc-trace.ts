/**
 * `npm run bench:internal -- gc-trace --log <file>`: per-isolate GC figures of a service log written with V8's
 * `--trace-gc-nvp` (bench/internal/lib/gc-trace.ts), e.g. from
 * `npm run bench:load -- --node-arg=--trace-gc-nvp --service-log /tmp/svc.log …`.
 */
import { booleanFlags, stringFlags } from '../../src/tools/cli/command-args.js';
import { benchOptions, logFlags, readParsedLines, runBenchMain } from '../lib/bench-run.js';
import { parseGcLine, summariseGc } from './lib/gc-trace.js';

const USAGE = `usage: npm run bench:internal -- gc-trace --log <file> [options]
  --log <file>            a service log written with --node-arg=--trace-gc-nvp (bench:load --service-log)
  --after-ms <ms>         skip each isolate's first <ms> of uptime (start-up, warm-up; default 0)
  --json                  print the summary as JSON`;

const FLAGS = { ...stringFlags('log', 'after-ms'), ...booleanFlags('json') } as const;

function main(argv: string[]): number {
  const opts = benchOptions(argv, USAGE, FLAGS, logFlags);
  if (typeof opts === 'number') return opts;
  const events = readParsedLines('--log', opts.log, parseGcLine);
  if (events === null) return 1;
  if (events.length === 0) {
    console.error(`${opts.log}: no --trace-gc-nvp lines (was the service started with that flag?)`);
    return 1;
  }
  const summary = summariseGc(events, opts.afterMs);
  if (opts.json) {
    console.log(JSON.stringify(summary, null, 2));
    return 0;
  }
  console.log('isolate order 0 is the main thread (it starts first); the others are worker threads');
  console.table(
    summary.map((s) => ({
      isolate: `${s.order} ${s.isolate}`,
      scavenges: s.scavenges,
      'pause p50/p90/max ms': `${s.scavenge_pause_ms.p50}/${s.scavenge_pause_ms.p90}/${s.scavenge_pause_ms.max}`,
      'promoted/scavenge p50 KB': Math.round(s.promoted_per_scavenge_p50 / 1024),
      'promoted % of allocated': Math.round(s.promoted_share * 1000) / 10,
      'mark-compacts': s.mark_compacts,
      'mc max ms': s.mark_compact_pause_ms.max,
    })),
  );
  return 0;
}

runBenchMain(async () => main(process.argv.slice(2)));
