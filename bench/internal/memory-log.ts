/**
 * `npm run bench:internal -- memory-log --log <file> [--after-ms <ms>] [--rate <req/s>] [--json]`: the main
 * thread's ArrayBuffer / external memory growth between mark-compacts, from the log that
 * bench/internal/external-memory-preload.ts writes (bench/internal/lib/memory-log.ts); with `--rate`, also KB per call.
 */
import { booleanFlags, stringFlags } from '../../src/tools/cli/command-args.js';
import { round } from '../../src/tools/client/stats.js';
import { benchOptions, logFlags, parseNumber, readParsedLines, runBenchMain } from '../lib/bench-run.js';
import { parseMemoryLine, summariseMemoryLog } from './lib/memory-log.js';

const USAGE = `usage: npm run bench:internal -- memory-log --log <file> [options]
  --log <file>            written by the service with --node-arg=--import=./dist/bench/internal/external-memory-preload.js
                          and --service-env IBEX_CONTEXT_BENCH_MEMORY_LOG=<file> (bench:load)
  --after-ms <ms>         leave out the first <ms> after start (start-up, warm-up; default 0)
  --rate <req/s>          the load's rate: growth also in KB per call
  --json                  print the summary as JSON`;

const FLAGS = { ...stringFlags('log', 'after-ms', 'rate'), ...booleanFlags('json') } as const;

function main(argv: string[]): number {
  const opts = benchOptions(argv, USAGE, FLAGS, (values) => ({
    ...logFlags(values),
    rate: values.rate === undefined ? null : parseNumber('--rate', values.rate, false),
  }));
  if (typeof opts === 'number') return opts;
  const events = readParsedLines('--log', opts.log, parseMemoryLine);
  if (events === null) return 1;
  if (events.length === 0) {
    console.error(`${opts.log}: no memory lines (was the service started with the preload?)`);
    return 1;
  }
  const s = summariseMemoryLog(events, opts.afterMs);
  const perCall = (mbPerS: number | null) =>
    opts.rate === null || mbPerS === null ? null : round((mbPerS * 1000) / opts.rate, 1);
  const out = {
    ...s,
    array_buffers_kb_per_call: perCall(s.array_buffers_mb_per_s),
    external_kb_per_call: perCall(s.external_mb_per_s),
  };
  if (opts.json) console.log(JSON.stringify(out, null, 2));
  else console.table(out);
  return 0;
}

runBenchMain(async () => main(process.argv.slice(2)));
