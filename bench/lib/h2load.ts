/**
 * The `h2load` cross-check of `bench:load`: the same server driven at the same rate by
 * nghttp2's C load generator (Debian `nghttp2-client`; bench only, never needed by tests or CI), to show
 * what the Node driver's figures are worth. h2load sends one pre-encoded AssembleContext frame again and
 * again and counts HTTP statuses (not gRPC ones: a gRPC error is still HTTP 200), so it reports transport
 * latency and its own CPU, not correctness.
 */
import { spawn, spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { ASSEMBLE_PATH, encodeRequestFrame } from '../../src/tools/client/grpc-frames.js';
import type { AssembleContextRequestInput } from '../../src/wire/proto.js';
import { readThreads } from './thread-cpu.js';

/** What one h2load run measured. */
export interface H2loadResult {
  command: string;
  rate: number;
  connections: number;
  duration_s: number;
  requests: { done: number; succeeded_2xx: number; failed: number };
  achieved_rps: number | null;
  /** h2load's "time for request" row, ms (its own mean/max; it prints no percentiles). */
  latency_ms: { min: number; max: number; mean: number; sd: number } | null;
  /** h2load's CPU seconds (from /proc, last reading before it exited) per request, ms. */
  cpu_ms_per_call: number | null;
  /** The server's CPU per call over the same run, ms (all its threads). */
  server_cpu_ms_per_call: number | null;
}

/** True when `h2load` is on the PATH. */
export function hasH2load(): boolean {
  return spawnSync('h2load', ['--version'], { stdio: 'ignore' }).status === 0;
}

function toMs(v: string, unit: string): number {
  const n = Number(v);
  return unit === 'us' ? n / 1000 : unit === 's' ? n * 1000 : n;
}

/**
 * Runs h2load at `rate` req/s over `connections` connections for `durationS` against `addr` with one
 * request `req`, measuring its CPU and the server's (pid `serverPid`) from /proc.
 * @throws Error when h2load exits non-zero.
 */
export async function runH2load(
  addr: string,
  req: AssembleContextRequestInput,
  opts: { rate: number; connections: number; durationS: number; dir: string; serverPid: number },
): Promise<H2loadResult> {
  const file = path.join(opts.dir, 'h2load-request.bin');
  writeFileSync(file, encodeRequestFrame(req));
  // --rps is per client (connection); -D is the measured duration.
  const perConn = Math.max(1, Math.round(opts.rate / opts.connections));
  const args = [
    '-c',
    String(opts.connections),
    '-m',
    '16',
    '--rps',
    String(perConn),
    '-D',
    String(opts.durationS),
    '-d',
    file,
    '-H',
    'content-type: application/grpc',
    '-H',
    'te: trailers',
    '-H',
    'grpc-timeout: 1000m',
    `http://${addr}${ASSEMBLE_PATH}`,
  ];
  const serverBefore = readThreads(opts.serverPid);
  const child = spawn('h2load', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (b: Buffer) => {
    out += b.toString();
  });
  child.stderr.on('data', (b: Buffer) => {
    out += b.toString();
  });
  let cpuS = 0;
  const poll = setInterval(() => {
    const t = child.pid === undefined ? null : readThreads(child.pid);
    if (t) cpuS = [...t.values()].reduce((s, x) => s + x.cpu_s, 0);
  }, 100);
  const code = await new Promise<number>((resolve) => child.on('exit', (c) => resolve(c ?? 1)));
  clearInterval(poll);
  const serverAfter = readThreads(opts.serverPid);
  if (code !== 0) throw new Error(`h2load exited ${code}: ${out.slice(-500)}`);
  const reqs = /requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed/.exec(out);
  const st = /status codes: (\d+) 2xx/.exec(out);
  const fin = /finished in [\d.]+\w+, ([\d.]+) req\/s/.exec(out);
  const lat =
    /time for request:\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)/.exec(
      out,
    );
  const done = reqs ? Number(reqs[2]) : 0;
  const serverCpu =
    serverBefore && serverAfter
      ? [...serverAfter].reduce(
          (s, [tid, t]) => s + Math.max(0, t.cpu_s - (serverBefore.get(tid)?.cpu_s ?? 0)),
          0,
        )
      : null;
  return {
    command: `h2load ${args.join(' ')}`,
    rate: perConn * opts.connections,
    connections: opts.connections,
    duration_s: opts.durationS,
    requests: { done, succeeded_2xx: st ? Number(st[1]) : 0, failed: reqs ? Number(reqs[4]) : 0 },
    achieved_rps: fin ? Number(fin[1]) : null,
    latency_ms: lat
      ? {
          min: toMs(lat[1]!, lat[2]!),
          max: toMs(lat[3]!, lat[4]!),
          mean: toMs(lat[5]!, lat[6]!),
          sd: toMs(lat[7]!, lat[8]!),
        }
      : null,
    cpu_ms_per_call: done > 0 ? Math.round((cpuS * 1e6) / done) / 1000 : null,
    server_cpu_ms_per_call:
      serverCpu !== null && done > 0 ? Math.round((serverCpu * 1e6) / done) / 1000 : null,
  };
}
