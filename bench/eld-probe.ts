/**
 * An empty Node process that only measures its own event-loop delay, the way the service measures its
 * main thread's (src/telemetry/loop-delay.ts). Started by bench/lib/eld-probe.ts beside the service with
 * the service's node flags: what it reads while the bench loads the machine is the floor, the delay of a
 * process running none of the service's code on the same cores (the event-loop delay target).
 *
 * Protocol: each line on stdin asks for the quantiles since the previous line; the answer is one JSON line
 * on stdout, `{"p50":…,"p99":…,"max":…}` in ms. It exits when stdin closes.
 */
import { createInterface } from 'node:readline';
import { startLoopDelayMonitor } from '../src/telemetry/loop-delay.js';
import { round } from '../src/tools/client/stats.js';

const monitor = startLoopDelayMonitor();
const lines = createInterface({ input: process.stdin });
lines.on('line', () => {
  const q = monitor.take();
  process.stdout.write(
    `${JSON.stringify({ p50: round(q.p50 * 1000), p99: round(q.p99 * 1000), max: round(q.max * 1000) })}\n`,
  );
});
lines.on('close', () => {
  monitor.stop();
});
