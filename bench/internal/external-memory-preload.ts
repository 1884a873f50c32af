/**
 * A preload for the service process of a bench ("Where the p99 comes from"): every 20 ms the
 * main thread's ArrayBuffer and external memory (MB) and used heap, and each of its GCs with its kind
 * (perf_hooks: 1 scavenge, 2 minor mark-compact, 4 mark-compact, 8 incremental marking, 16 weak
 * callbacks), written as lines of text to the file named by `IBEX_CONTEXT_BENCH_MEMORY_LOG` every 2 s and at exit.
 * Off the hot path: two unref'd timers and a GC observer, no hooks into the service. Times are ms since the preload ran.
 *
 *   npm run bench:load -- … --node-arg=--import=./dist/bench/internal/external-memory-preload.js \
 *     --service-env IBEX_CONTEXT_BENCH_MEMORY_LOG=/tmp/mem.log
 *
 * `npm run bench:internal -- memory-log --log /tmp/mem.log` then summarises it (bench/internal/memory-log.ts).
 */
import { writeFileSync } from 'node:fs';
import { type PerformanceEntry, PerformanceObserver } from 'node:perf_hooks';
import v8 from 'node:v8';
import { isMainThread } from 'node:worker_threads';

const file = process.env.IBEX_CONTEXT_BENCH_MEMORY_LOG;
if (isMainThread && file) {
  const lines: string[] = [];
  const t0 = performance.now();
  const mb = (bytes: number) => (bytes / 1e6).toFixed(2);
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      const kind = (e as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind ?? 0;
      lines.push(`gc ${(e.startTime - t0).toFixed(1)} ${kind} ${e.duration.toFixed(2)}`);
    }
  }).observe({ entryTypes: ['gc'] });
  setInterval(() => {
    const m = process.memoryUsage();
    const used = v8.getHeapStatistics().used_heap_size;
    lines.push(
      `mem ${(performance.now() - t0).toFixed(0)} ${mb(m.arrayBuffers)} ${mb(m.external)} ${mb(used)}`,
    );
  }, 20).unref();
  const flush = () => writeFileSync(file, `${lines.join('\n')}\n`);
  setInterval(flush, 2000).unref();
  process.on('exit', flush);
}
