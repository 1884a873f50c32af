/**
 * `node dist/bench/frames.js [--iterations 200] [--mib 10] [--out <dir>]`: what one heavy AssembleContext
 * call costs the main thread in framing alone (isolation), per message of `--mib` MiB:
 *
 * - `response_grpc_js_frame`: a spliced answer framed by grpc-js 1.14 (`Buffer.allocUnsafe(n + 5)` and
 *   `SplicedMessage.copy`, the history as one source span), as `BaseServerInterceptingCall.serializeMessage`
 *   does it (today a small answer's way only);
 * - `response_gathered`: the service's way for a context of 64 KiB or more (src/server/grpc-internals.ts,
 *   `sendGatheredMessages`): the loader-encoded rest, the 5-byte prefix and one view per span, which the
 *   HTTP/2 stream then writes as they are (that write is the kernel's copy, the same for both ways);
 * - `request_stream_decoder`: grpc-js's own `StreamDecoder` reassembling one request message from 16 KiB
 *   HTTP/2 DATA chunks (a fresh n-byte `Buffer.concat` and copy), the request-side cost;
 * - `request_pooled_decoder`: the same with the service's decoder hook, each message assembled in the
 *   buffer the previous one released (src/util/message-buffers.ts).
 *
 * Each sample is one operation's wall time including the allocation's page faults; freed buffers go back
 * at V8's next GC, as in the service. Run it once plain and once with
 * `GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824` to see the
 * allocator's share (the figure records the variable). Figures, not gates; run under `flock /work/bench.lock`.
 */

import { mkdirSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { stringFlags } from '../src/cli/command-args.js';
import { SplicedBuilder } from '../src/format/spliced.js';
import { assembleLargeMessagesIn } from '../src/server/grpc-internals.js';
import {
  ASSEMBLED_UTF8,
  type AssembleContextResponse,
  gatheredAnswer,
  serializeAssembleResponse,
  serializeAssembleResponseBuffer,
} from '../src/server/proto.js';
import { MessageBufferPool } from '../src/util/message-buffers.js';
import {
  type BenchFlagValues,
  benchOptions,
  machineInfo,
  parseInteger,
  runBenchMain,
} from './lib/bench-run.js';
import { cannedRows } from './lib/canned-rows.js';
import { projectPath } from './lib/paths.js';

const USAGE = `usage: node dist/bench/frames.js [options]
  --iterations <n>        samples per operation (default 200)
  --mib <n>               message size, MiB (default 10: a 100 × 32,768 CJK history is ~9.4 MiB)
  --out <dir>             where frames.json goes (default bench/results)`;

const FLAGS = stringFlags('iterations', 'mib', 'out');

function parseOptions(values: BenchFlagValues<typeof FLAGS>) {
  return {
    iterations: parseInteger('--iterations', values.iterations ?? '200'),
    bytes: parseInteger('--mib', values.mib ?? '10') * 2 ** 20,
    out: path.resolve(values.out ?? projectPath('bench/results')),
  };
}

/** A response of 30 memory rows with `bytes` of context: spliced history plus a few bytes of our own. */
function response(bytes: number): { base: AssembleContextResponse; context: SplicedBuilder } {
  const rows = cannedRows({ category: 'episodic', included: 0, confidence: 0.5, tokens: 120 });
  const history = Buffer.alloc(bytes, 0x61);
  const context = new SplicedBuilder(history);
  context.text('<system-directive>be brief</system-directive>\nuser: ');
  context.bytes(0, bytes);
  const base: AssembleContextResponse = {
    assembled_context: '',
    tokens_used: 1,
    memories_included: 0,
    memories_used: rows,
    directive_tokens: 5,
    history_tokens: Math.ceil(bytes / 4),
    memory_tokens: 0,
    metrics: {
      budget_calculation_ms: 1,
      directive_load_ms: 0,
      hot_memory_retrieval_ms: 1,
      cold_memory_retrieval_ms: 1,
      ranking_ms: 0,
      packing_ms: 0,
      formatting_ms: 3,
      total_ms: 9,
      candidates_evaluated: 30,
      pool_wait_us: 10,
      pool_run_us: 9000,
    },
    request_id: 'bench',
    trace_id: '',
    span_id: '',
    score_schema: 'interim_v1',
    degradation: { level: 'L0', intentional: false, reasons: [], branches: [] },
  };
  return { base, context };
}

/** Wall-time percentiles (ms) of `n` runs of `op`, after 10 unrecorded ones. */
function sample(n: number, op: () => void) {
  for (let i = 0; i < 10; i++) op();
  const ms: number[] = [];
  for (let i = 0; i < n; i++) {
    const t = process.hrtime.bigint();
    op();
    ms.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  ms.sort((a, b) => a - b);
  const at = (q: number) => Math.round(ms[Math.min(ms.length - 1, Math.floor(q * ms.length))]! * 1000) / 1000;
  return { p50_ms: at(0.5), p90_ms: at(0.9), p99_ms: at(0.99), max_ms: at(1), samples: n };
}

async function main(): Promise<number> {
  const opts = benchOptions(process.argv.slice(2), USAGE, FLAGS, parseOptions);
  if (typeof opts === 'number') return opts;
  const { base, context } = response(opts.bytes);
  const text = context.finish();
  let sink = 0;

  // grpc-js 1.14 serializeMessage: allocUnsafe(n + 5), prefix, copy of the serialized message.
  const grpcJsFrame = () => {
    const m = serializeAssembleResponse({ ...base, [ASSEMBLED_UTF8]: text });
    const out = Buffer.allocUnsafe(m.byteLength + 5);
    out.writeUInt8(0, 0);
    out.writeUInt32BE(m.byteLength, 1);
    m.copy(out, 5);
    sink += out[out.length - 1]!;
  };
  // What sendGatheredMessages does before the stream's write: serialize the rest, the prefix, the views.
  const serialize = (v: unknown) => serializeAssembleResponse(v as AssembleContextResponse);
  const gather = () => {
    const m = gatheredAnswer({ ...base, [ASSEMBLED_UTF8]: text }, serialize);
    if (m === null) throw new Error('the bench response is not gathered');
    const prefix = Buffer.allocUnsafe(5);
    prefix.writeUInt8(0, 0);
    prefix.writeUInt32BE(m.byteLength, 1);
    sink += m.chunks().length + prefix[4]!;
  };
  // grpc-js's StreamDecoder over one framed request in 16 KiB DATA chunks (HTTP/2's default frame size).
  const require = createRequire(import.meta.url);
  const { StreamDecoder } = require('@grpc/grpc-js/build/src/stream-decoder.js') as {
    StreamDecoder: new (max: number) => { write(data: Buffer): Buffer[] };
  };
  const wire = Buffer.alloc(opts.bytes + 5, 0x62);
  wire.writeUInt8(0, 0);
  wire.writeUInt32BE(opts.bytes, 1);
  const chunks: Buffer[] = [];
  for (let at = 0; at < wire.length; at += 16_384) chunks.push(wire.subarray(at, at + 16_384));
  const decodeRequest = () => {
    const d = new StreamDecoder(-1);
    let got = 0;
    for (const c of chunks) got += d.write(c).length;
    sink += got;
  };

  // Both ways send the same bytes (a bench of two different messages would compare nothing).
  const a = serializeAssembleResponseBuffer({ ...base, [ASSEMBLED_UTF8]: text });
  const b = gatheredAnswer({ ...base, [ASSEMBLED_UTF8]: text }, serialize);
  if (b === null || !Buffer.concat(b.chunks()).equals(a))
    throw new Error('gathered chunks differ from the spliced message');
  const grpcJsFigures = {
    response_grpc_js_frame: sample(opts.iterations, grpcJsFrame),
    response_gathered: sample(opts.iterations, gather),
    request_stream_decoder: sample(opts.iterations, decodeRequest),
  };
  // The same reassembly with the service's decoder hook (src/server/grpc-internals.ts): each message lands
  // in the buffer the previous one released, as a request buffer returns to the pool after its answer.
  const pool = new MessageBufferPool();
  assembleLargeMessagesIn(pool);
  const decodePooled = () => {
    const d = new StreamDecoder(-1);
    for (const c of chunks) for (const message of d.write(c)) pool.release(message.subarray(5));
    sink += 1;
  };
  const figures = { ...grpcJsFigures, request_pooled_decoder: sample(opts.iterations, decodePooled) };
  if (sink === -1) console.log(sink);
  const out = {
    bench: 'frames',
    machine: machineInfo(),
    message_bytes: opts.bytes,
    glibc_tunables: process.env.GLIBC_TUNABLES ?? null,
    figures,
  };
  console.log(`message ${opts.bytes} bytes; GLIBC_TUNABLES=${out.glibc_tunables ?? '(unset)'}`);
  for (const [name, f] of Object.entries(figures))
    console.log(
      `  ${name.padEnd(24)} p50 ${f.p50_ms} ms  p90 ${f.p90_ms} ms  p99 ${f.p99_ms} ms  max ${f.max_ms} ms`,
    );
  mkdirSync(opts.out, { recursive: true });
  writeFileSync(path.join(opts.out, 'frames.json'), `${JSON.stringify(out, null, 2)}\n`);
  return 0;
}

runBenchMain(main);
