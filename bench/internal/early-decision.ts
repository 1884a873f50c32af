/**
 * `npm run bench:internal -- early-decision [--rounds 6] [--seconds 5] [--bomb-rate 4] [--quiet-rate 100]`:
 * A/B of the early wire decision (src/grpc/patches/early-decision.ts). Two service processes (the gRPC server
 * with a stub pipeline that refuses every call INVALID_ARGUMENT), one with the decision on and one with its
 * scanner switched off (`decideRequestsOnTheWire(() => null)`: grpc-js reads the whole message, the wire
 * decoder still stops counting at the 101st message). Rounds alternate between them (order reversed every
 * other round). Per step: 4 MB decode bombs (2,000,000 empty history messages) at `--bomb-rate` on one
 * connection and small requests at `--quiet-rate` on another; both refused with the same status either
 * way. Recorded per step: the bombs' and the small calls' latency p50/p99, and the service process's CPU
 * ms per bomb (from /proc). Writes bench/results/early-decision.json. Figures, not gates.
 */
import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Client, credentials, status } from '@grpc/grpc-js';
import { createGrpcServer } from '../../src/grpc/grpc-server.js';
import { decideRequestsOnTheWire } from '../../src/grpc/patches/early-decision.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { stringFlags } from '../../src/tools/cli/command-args.js';
import { median, percentilesOf, round } from '../../src/tools/client/stats.js';
import { Errors } from '../../src/wire/errors.js';
import { MAX_ASSEMBLE_REQUEST_BYTES } from '../../src/wire/limits.js';
import { benchOptions, machineInfo, parseInteger, parseNumber, runBenchMain } from '../lib/bench-run.js';
import { writeResult } from '../lib/paths.js';
import { decodeBomb, sendRawAssemble } from '../lib/raw-assemble.js';
import { readThreads } from '../lib/thread-cpu.js';

const USAGE = `usage: npm run bench:internal -- early-decision [options]
  --rounds <n>        rounds; each build runs one step per round (default 6)
  --seconds <s>       measured seconds per step (default 5)
  --bomb-rate <r/s>   4 MB decode bombs per second (default 4)
  --quiet-rate <r/s>  small requests per second on another connection (default 100)`;

const FLAGS = stringFlags('rounds', 'seconds', 'bomb-rate', 'quiet-rate');
const ORG = '11111111-1111-4111-8111-111111111111';
const AGENT = '22222222-2222-4222-8222-222222222222';

/** Child: the gRPC server with the decision on or off; sends its port, exits with its parent. */
async function serve(on: boolean): Promise<void> {
  const grpc = createGrpcServer({
    assemble: async () => {
      throw Errors.invalidArgument('query', 'stub pipeline');
    },
    logger: createLogger({ logLevel: 'silent' }),
    settings: {
      timeoutMs: 30_000,
      maxReceiveMessageBytes: MAX_ASSEMBLE_REQUEST_BYTES,
      maxMetadataBytes: 16 * 1024,
    },
  });
  if (!on) decideRequestsOnTheWire(() => null);
  const port = await grpc.bind('127.0.0.1:0');
  grpc.markServing();
  process.send?.({ port });
  process.on('disconnect', () => process.exit(0));
}

interface Service {
  mode: 'on' | 'off';
  child: ChildProcess;
  bombs: Client;
  quiet: Client;
}

async function startService(mode: 'on' | 'off'): Promise<Service> {
  const child = fork(fileURLToPath(import.meta.url), ['--serve', mode], { stdio: 'inherit' });
  const port = await new Promise<number>((resolve, reject) => {
    child.once('message', (m: { port: number }) => resolve(m.port));
    child.once('exit', (code) => reject(new Error(`service (${mode}) exited with ${code}`)));
  });
  // Each client on its own connection.
  const client = () =>
    new Client(`127.0.0.1:${port}`, credentials.createInsecure(), {
      'grpc.max_send_message_length': -1,
      'grpc.use_local_subchannel_pool': 1,
    });
  return { mode, child, bombs: client(), quiet: client() };
}

/** One call of raw bytes: its latency, ms, and status details. */
async function call(client: Client, bytes: Buffer): Promise<{ ms: number; code: number; details: string }> {
  const start = performance.now();
  const { code, details, at } = await sendRawAssemble(client, bytes);
  return { ms: at - start, code, details };
}

/** Calls at `rate` per second for `seconds`, open loop; resolves when every call has ended. */
async function paced(rate: number, seconds: number, send: () => Promise<number>): Promise<number[]> {
  const calls: Promise<number>[] = [];
  const total = Math.round(rate * seconds);
  const start = performance.now();
  for (let i = 0; i < total; i++) {
    const due = start + (i * 1000) / rate;
    const wait = due - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    calls.push(send());
  }
  return Promise.all(calls);
}

const cpuMs = (pid: number) => {
  let s = 0;
  for (const t of readThreads(pid)?.values() ?? []) s += t.cpu_s;
  return s * 1000;
};

interface Step {
  round: number;
  mode: 'on' | 'off';
  bombs: number;
  bomb_p50_ms: number;
  bomb_p99_ms: number;
  quiet_p50_ms: number;
  quiet_p99_ms: number;
  server_cpu_ms_per_bomb: number;
  wrong_answers: number;
}

const BOMB_DETAILS = 'recent_messages exceeds 100 items';

async function step(
  s: Service,
  roundNo: number,
  o: { seconds: number; bombRate: number; quietRate: number },
) {
  const bomb = decodeBomb(ORG, AGENT, 2_000_000);
  const small = decodeBomb(ORG, AGENT, 10);
  let wrong = 0;
  const pid = s.child.pid!;
  const cpu0 = cpuMs(pid);
  const [bombs, quiet] = await Promise.all([
    paced(o.bombRate, o.seconds, async () => {
      const r = await call(s.bombs, bomb);
      if (r.code !== status.INVALID_ARGUMENT || r.details !== BOMB_DETAILS) wrong++;
      return r.ms;
    }),
    paced(o.quietRate, o.seconds, async () => {
      const r = await call(s.quiet, small);
      if (r.code !== status.INVALID_ARGUMENT) wrong++;
      return r.ms;
    }),
  ]);
  const cpu = cpuMs(pid) - cpu0;
  const b = percentilesOf(bombs);
  const q = percentilesOf(quiet);
  const row: Step = {
    round: roundNo,
    mode: s.mode,
    bombs: bombs.length,
    bomb_p50_ms: round(b(50), 2),
    bomb_p99_ms: round(b(99), 2),
    quiet_p50_ms: round(q(50), 2),
    quiet_p99_ms: round(q(99), 2),
    server_cpu_ms_per_bomb: round(cpu / bombs.length, 2),
    wrong_answers: wrong,
  };
  console.log(
    `round ${roundNo} ${s.mode}: bombs p50 ${row.bomb_p50_ms} p99 ${row.bomb_p99_ms} ms, quiet p50 ${row.quiet_p50_ms} ` +
      `p99 ${row.quiet_p99_ms} ms, server CPU ${row.server_cpu_ms_per_bomb} ms/bomb, wrong ${wrong}`,
  );
  return row;
}

async function main(argv: string[]): Promise<number> {
  const opts = benchOptions(argv, USAGE, FLAGS, (v) => ({
    rounds: parseInteger('--rounds', v.rounds ?? '6'),
    seconds: parseNumber('--seconds', v.seconds ?? '5'),
    bombRate: parseNumber('--bomb-rate', v['bomb-rate'] ?? '4'),
    quietRate: parseNumber('--quiet-rate', v['quiet-rate'] ?? '100'),
  }));
  if (typeof opts === 'number') return opts;
  const services = [await startService('on'), await startService('off')];
  const steps: Step[] = [];
  try {
    // Warm-up: one short step each, not recorded.
    for (const s of services) await step(s, 0, { ...opts, seconds: 1 });
    for (let r = 1; r <= opts.rounds; r++) {
      const order = r % 2 === 1 ? services : [...services].reverse();
      for (const s of order) steps.push(await step(s, r, opts));
    }
  } finally {
    for (const s of services) {
      s.bombs.close();
      s.quiet.close();
      s.child.disconnect();
    }
  }
  const keys = [
    'bomb_p50_ms',
    'bomb_p99_ms',
    'quiet_p50_ms',
    'quiet_p99_ms',
    'server_cpu_ms_per_bomb',
  ] as const;
  const summary = Object.fromEntries(
    (['on', 'off'] as const).map((mode) => [
      mode,
      Object.fromEntries(
        keys.map((k) => [k, round(median(steps.filter((x) => x.mode === mode).map((x) => x[k])), 2)]),
      ),
    ]),
  );
  // Per round, on − off: the drift of a shared machine reaches both steps of a round alike.
  const paired = Object.fromEntries(
    keys.map((k) => {
      const diffs: number[] = [];
      for (let r = 1; r <= opts.rounds; r++) {
        const on = steps.find((x) => x.round === r && x.mode === 'on');
        const off = steps.find((x) => x.round === r && x.mode === 'off');
        if (on && off) diffs.push(on[k] - off[k]);
      }
      return [
        k,
        { median_on_minus_off: round(median(diffs), 2), rounds_on_lower: diffs.filter((d) => d < 0).length },
      ];
    }),
  );
  console.log(JSON.stringify({ summary, paired }));
  const file = writeResult('early-decision', {
    machine: machineInfo(),
    options: opts,
    summary,
    paired,
    steps,
  });
  console.log(`wrote ${file}`);
  return steps.some((s) => s.wrong_answers > 0) ? 1 : 0;
}

if (process.argv[2] === '--serve') void serve(process.argv[3] === 'on');
else runBenchMain(() => main(process.argv.slice(2)));
