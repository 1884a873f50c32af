/**
 * `bench:isolation`'s micro-benchmarks of the work that stays on the main thread when memory bodies and
 * store rows come from threads: decoding a body inline, and taking decoded hits off a port.
 */
import { MessageChannel, receiveMessageOnPort } from 'node:worker_threads';
import { Bench } from 'tinybench';
import { encodeCandidates } from '../../src/cpu-stage/cpu-batch-encode.js';
import { decodeMemoryBody, maxBodyBytes } from '../../src/retrieval/validate.js';
import { bytesInPlace, type MemoryContent } from '../../src/text/content-bytes.js';
import { taskScalars } from './synthetic.js';

/** A tinybench task's median, ms to the µs. */
function medianMs(task: { result?: unknown }): number {
  const r = task.result as { latency?: { p50?: number } } | undefined;
  return Math.round((r?.latency?.p50 ?? Number.NaN) * 1000) / 1000;
}

/**
 * Main-thread cost of `JSON.parse` + validation of memory bodies (the work a body-decoder thread takes
 * off the event loop) for hits of `org`/`agent`, median ms per body: at the inline threshold, 5,000 small hits, and the hot cap.
 */
export async function parseCosts(org: string, agent: string) {
  const item = (i: number, content: string) => ({
    memory: {
      id: `${agent.slice(0, 24)}${i.toString(16).padStart(12, '0')}`,
      org_id: org,
      agent_id: agent,
      content,
      category: 'factual',
      confidence: 0.5,
    },
    similarity: 0.5,
    rank: i + 1,
    source: 'bench',
  });
  const encode = (items: unknown[]) => new TextEncoder().encode(JSON.stringify({ data: { results: items } }));
  const bodies: Record<string, Uint8Array> = {
    inline_64kib: encode(Array.from({ length: 20 }, (_, i) => item(i, 'x'.repeat(3000)))),
    hits_5000: encode(Array.from({ length: 5000 }, (_, i) => item(i, `memory ${i} about the lake`))),
    // At the hot cap: 20 memories of 65,536 code points, non-ASCII (3 bytes each in UTF-8).
    hot_cap_20x65536_cjk: encode(Array.from({ length: 20 }, (_, i) => item(i, '漢'.repeat(65_536)))),
  };
  const bench = new Bench({ iterations: 10, warmupIterations: 2, time: 0 });
  for (const [name, body] of Object.entries(bodies))
    bench.add(name, () => {
      decodeMemoryBody(body, org, agent, { limit: 20, maxChars: 65_536 });
    });
  await bench.run();
  const out: Record<string, { bytes: number; median_ms: number }> = {};
  for (const task of bench.tasks) {
    out[task.name] = { bytes: bodies[task.name]!.length, median_ms: medianMs(task) };
  }
  return { hot_cap_bytes: maxBodyBytes(20, 65_536), bodies: out };
}

/**
 * Main-thread cost of taking decoded hits from a thread and writing them into the CPU task, median ms:
 * 20 hot memories at the cap (65,536 CJK code points each), their contents sent as strings (structured
 * clone) or as UTF-8 bytes on one transferred buffer (content-bytes.ts, what the body-decoder and
 * store-read threads send). Only the receive and `encodeCandidates` are timed: the sender is the thread.
 */
export async function crossingCosts() {
  const hits = () =>
    Array.from({ length: 20 }, (_, i) => ({
      memory_id: `00000000-0000-4000-8000-${i.toString(16).padStart(12, '0')}`,
      category: 'factual',
      content: '漢'.repeat(65_536) as MemoryContent,
      score: 0.5,
      similarity: 0.5,
      confidence: 0.5,
      rank: i + 1,
    }));
  const scalars = taskScalars({ budget: 1000, deadline: Number.POSITIVE_INFINITY });
  const { port1, port2 } = new MessageChannel();
  const bench = new Bench({ iterations: 40, warmupIterations: 4, time: 0 });
  for (const asBytes of [false, true]) {
    bench.add(
      asBytes ? 'bytes_transferred' : 'strings_cloned',
      () => {
        const got = receiveMessageOnPort(port2)!.message as ReturnType<typeof hits>;
        encodeCandidates(got, scalars);
      },
      {
        beforeEach: () => {
          const h = hits();
          const contents = asBytes ? bytesInPlace(h) : null;
          port1.postMessage(h, contents ? [contents] : []);
        },
      },
    );
  }
  await bench.run();
  port1.close();
  const out: Record<string, number> = {};
  for (const task of bench.tasks) {
    out[task.name] = medianMs(task);
  }
  return out;
}
