/**
 * `npm run bench:internal -- sched-trace --perf-script <file> --pid <service pid>`: what the service's main thread
 * waited for while it was runnable without a CPU (bench/internal/lib/sched-trace.ts), from a kernel scheduler trace
 * taken during a bench, e.g.
 *
 *   perf record -e sched:sched_switch,sched:sched_wakeup -a -o /tmp/sched.data -- sleep 5
 *   perf script -i /tmp/sched.data -F comm,tid,pid,cpu,time,event,trace > /tmp/sched.txt
 */
import { booleanFlags, stringFlags } from '../../src/tools/cli/command-args.js';
import { benchOptions, parseNumber, readParsedLines, runBenchMain } from '../lib/bench-run.js';
import { parseSchedLine, summariseMainThreadWaits } from './lib/sched-trace.js';

const USAGE = `usage: npm run bench:internal -- sched-trace --perf-script <file> --pid <pid> [options]
  --perf-script <file>    output of: perf script -F comm,tid,pid,cpu,time,event,trace (of a trace recorded
                          with perf record -e sched:sched_switch,sched:sched_wakeup -a)
  --pid <pid>             the service's process id (its main thread's id): bench:load and bench:isolation
                          print it ("service pid …"), or pgrep -f 'main.js serve'
  --from-s <s>            skip the trace's first <s> seconds (default 0), e.g. to one bench phase
  --to-s <s>              stop <s> seconds after the trace's start (default: its end)
  --json                  print the summary as JSON`;

const FLAGS = { ...stringFlags('perf-script', 'pid', 'from-s', 'to-s'), ...booleanFlags('json') } as const;

function main(argv: string[]): number {
  const opts = benchOptions(argv, USAGE, FLAGS, (values) => {
    if (values['perf-script'] === undefined) throw new Error('--perf-script is required');
    if (values.pid === undefined || !/^[1-9]\d*$/.test(values.pid))
      throw new Error(`--pid must be a process id, got '${values.pid ?? ''}'`);
    return {
      file: values['perf-script'],
      pid: values.pid,
      fromS: parseNumber('--from-s', values['from-s'] ?? '0', true),
      toS: values['to-s'] === undefined ? Number.POSITIVE_INFINITY : parseNumber('--to-s', values['to-s']),
      json: values.json ?? false,
    };
  });
  if (typeof opts === 'number') return opts;
  const all = readParsedLines('--perf-script', opts.file, parseSchedLine);
  if (all === null) return 1;
  const start = all[0]?.at ?? 0;
  const events = all.filter((e) => e.at - start >= opts.fromS && e.at - start <= opts.toS);
  if (!events.some((e) => e.kind === 'switch' && (e.prevTid === opts.pid || e.nextTid === opts.pid))) {
    console.error(`${opts.file}: no sched_switch of thread ${opts.pid} (another pid, or not a sched trace?)`);
    return 1;
  }
  const s = summariseMainThreadWaits(events, opts.pid);
  if (opts.json) {
    console.log(JSON.stringify(s, null, 2));
    return 0;
  }
  const perS = (x: number) => Math.round(x / Math.max(1e-9, s.window_s));
  console.log(
    `main thread ${opts.pid} over ${s.window_s} s: runnable without a CPU ${perS(s.wait_ms.total)} ms/s in ` +
      `${perS(s.waits)} waits/s (p50 ${s.wait_ms.p50} ms, p99 ${s.wait_ms.p99} ms, max ${s.wait_ms.max} ms; ` +
      `${s.waits_over_1ms} over 1 ms, ${s.waits_over_2ms} over 2 ms)`,
  );
  console.log('preempted by (times):');
  console.table(
    Object.entries(s.preempted_by)
      .slice(0, 10)
      .map(([thread, times]) => ({ thread, times })),
  );
  console.log('what the CPUs ran while it waited (ms, summed over CPUs):');
  console.table(
    Object.entries(s.cpu_ms_while_waiting)
      .slice(0, 10)
      .map(([thread, ms]) => ({ thread, ms })),
  );
  return 0;
}

runBenchMain(async () => main(process.argv.slice(2)));
