/**
 * The event-loop delay measure (src/telemetry/loop-delay.ts) that the service exports as
 * `ibex_context_event_loop_delay_seconds` and the benches' empty-process floor (bench/eld-probe.ts) reads
 * the same way: a stall of the loop shows as its length less the 10 ms sampling interval, and each read
 * starts a new interval.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it, onTestFinished } from 'vitest';
import { startEldProbe } from '../../bench/lib/eld-probe.js';
import { ELD_RESOLUTION_MS, startLoopDelayMonitor } from '../../src/telemetry/loop-delay.js';
import { createMetrics } from '../../src/telemetry/metrics.js';

const STALL_MS = 150;

function blockLoop(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // a stall of the event loop on purpose
  }
}

describe('event-loop delay', () => {
  it('reads a stall of the loop less the sampling interval, and forgets it at the next read', async () => {
    const monitor = startLoopDelayMonitor();
    onTestFinished(() => monitor.stop());
    await sleep(3 * ELD_RESOLUTION_MS);
    blockLoop(STALL_MS);
    await sleep(3 * ELD_RESOLUTION_MS); // the first sample after the stall records it
    const stalled = monitor.take();
    expect(stalled.max).toBeGreaterThanOrEqual((STALL_MS - ELD_RESOLUTION_MS) / 1000);
    expect(stalled.p50).toBeLessThanOrEqual(stalled.p99);
    expect(stalled.p99).toBeLessThanOrEqual(stalled.max);
    await sleep(10 * ELD_RESOLUTION_MS);
    const calm = monitor.take();
    expect(calm.max).toBeLessThan((STALL_MS - ELD_RESOLUTION_MS) / 1000);
    // A loop that sleeps between samples reads well under the interval: the 10 ms are not in the delay.
    expect(calm.p50).toBeLessThan(ELD_RESOLUTION_MS / 2 / 1000);
  });

  it('is what the service exports, per scrape', async () => {
    const metrics = createMetrics();
    onTestFinished(() => metrics.stop());
    const scrape = async () => {
      const gauge = await metrics.registry.getSingleMetric('ibex_context_event_loop_delay_seconds')!.get();
      const q = (label: string) => gauge.values.find((v) => v.labels.quantile === label)!.value;
      return { p50: q('0.5'), p99: q('0.99'), max: q('1') };
    };
    await scrape(); // starts the interval
    await sleep(3 * ELD_RESOLUTION_MS);
    blockLoop(STALL_MS);
    await sleep(3 * ELD_RESOLUTION_MS);
    const stalled = await scrape();
    expect(stalled.max).toBeGreaterThanOrEqual((STALL_MS - ELD_RESOLUTION_MS) / 1000);
    // One stalled sample among a few short ones: the p50 label must not carry it.
    expect(stalled.p50).toBeLessThan(ELD_RESOLUTION_MS / 2 / 1000);
    await sleep(10 * ELD_RESOLUTION_MS);
    const calm = await scrape();
    expect(calm.max).toBeLessThan((STALL_MS - ELD_RESOLUTION_MS) / 1000);
    expect(calm.p50).toBeLessThan(ELD_RESOLUTION_MS / 2 / 1000);
  });

  it('floor probe: an empty process stopped for a while reads the stop, then a fresh interval', async () => {
    const probe = await startEldProbe([]);
    onTestFinished(() => probe.stop());
    await probe.take(); // answers once it runs: the interval starts here
    // Node's histogram reset forgets the last sample's time, so the interval right after a take is not
    // recorded: stop the probe after that one.
    await sleep(3 * ELD_RESOLUTION_MS);
    process.kill(probe.pid, 'SIGSTOP');
    await sleep(STALL_MS);
    process.kill(probe.pid, 'SIGCONT');
    await sleep(3 * ELD_RESOLUTION_MS);
    const stalled = await probe.take();
    expect(stalled.max).toBeGreaterThanOrEqual(STALL_MS - ELD_RESOLUTION_MS);
    expect(stalled.p99).toBeLessThanOrEqual(stalled.max);
    await sleep(10 * ELD_RESOLUTION_MS);
    const calm = await probe.take();
    expect(calm.max).toBeLessThan(STALL_MS - ELD_RESOLUTION_MS);
    expect(calm.p50).toBeLessThan(ELD_RESOLUTION_MS / 2);
    await probe.stop();
    await expect(probe.take()).rejects.toThrow('event-loop probe exited');
  });
});
