/**
 * The service under test in a child process of its own (`node dist/src/tools/cli/main.js serve`), so that the
 * load driver and the server are separate processes, as they are in production, and the driver's CPU is
 * not mistaken for the server's. Loopback only: both ports are picked free on 127.0.0.1.
 *
 * Every child started here is killed when the bench process ends: normally (`stop()`), on an uncaught
 * error (the `exit` hook sends SIGKILL synchronously) and on SIGINT/SIGTERM (SIGTERM to the children, then
 * exit 130/143).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createWriteStream, openSync, readFileSync } from 'node:fs';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { SERVICE_NODE_FLAGS } from '../../src/config/node-flags.js';
import { projectPath } from './paths.js';

/** Options of {@link startServiceProcess}. */
export interface ServiceProcessOptions {
  /** Embedded store file (SQLite). */
  db: string;
  /** Extra `IBEX_CONTEXT_*` settings (pool sizes, timeouts…). */
  env?: Record<string, string>;
  /** How long to wait for `/readyz` (default 30 s). */
  readyTimeoutMs?: number;
  /** Log level of the child (default `warn`). */
  logLevel?: string;
  /** Extra `node` flags of the child, e.g. `--cpu-prof --cpu-prof-dir=<dir>`. */
  nodeArgs?: string[];
  /** Start node without the service's own flags (SERVICE_NODE_FLAGS, as `npm start` gives them): A/B runs. */
  plainNode?: boolean;
  /** A file that receives everything the child prints (stdout and stderr), truncated at start. */
  logFile?: string;
  /**
   * The service's `main.js` (default this checkout's `dist/src/tools/cli/main.js`): another checkout's build
   * for an A/B of two builds (bench:ab).
   */
  entry?: string;
  /** gRPC and admin ports to listen on (default: two free loopback ports). */
  ports?: readonly [number, number];
}

/** CPU time of the child, seconds: the whole process and its main thread alone. */
export interface ProcessCpu {
  total_s: number;
  main_thread_s: number;
  /** The main thread's scheduling so far ({@link readMainThreadSched}); null without schedstat. */
  main_thread_sched: MainThreadSched | null;
}

/**
 * How the kernel scheduled the main (event-loop) thread so far: seconds it spent runnable but waiting
 * for a CPU (`/proc/<pid>/task/<pid>/schedstat`, second field, ns), and how many times it was preempted
 * (`nonvoluntary_ctxt_switches` in `/proc/<pid>/task/<pid>/status`). The event-loop delay counts both
 * the loop's own work and this wait; only the wait comes from other threads and processes.
 */
export interface MainThreadSched {
  runqueue_wait_s: number;
  involuntary_switches: number;
}

/** A running service child. */
export interface ServiceProcess {
  pid: number;
  /** gRPC `127.0.0.1:<port>`. */
  grpcAddr: string;
  /** `http://127.0.0.1:<port>`. */
  adminUrl: string;
  /** GET `/metrics`, as text. */
  metricsText(): Promise<string>;
  /** CPU seconds so far from `/proc/<pid>/stat` (Linux); `null` where `/proc` is missing. */
  cpu(): ProcessCpu | null;
  /** The last lines the child wrote (stdout and stderr), for error messages. */
  logTail(): string;
  /** How the child ended (`exited with code 1`, `killed by SIGINT`), or `null` while it runs. */
  exitStatus(): string | null;
  /** SIGTERM (graceful drain), SIGKILL after `graceMs` (default 5000); idempotent. */
  stop(graceMs?: number): Promise<void>;
}

const LOG_TAIL_LINES = 40;
/** Clock ticks per second of `/proc/<pid>/stat` (USER_HZ); 100 on every Linux we run on. */
const CLK_TCK = 100;

const live = new Set<ChildProcess>();
let hooksInstalled = false;

function installExitHooks(): void {
  if (hooksInstalled) return;
  hooksInstalled = true;
  // 'exit' handlers must be synchronous: SIGKILL is the one thing that is certain to land.
  process.on('exit', () => {
    for (const child of live) child.kill('SIGKILL');
  });
  for (const [signal, code] of [
    ['SIGINT', 130],
    ['SIGTERM', 143],
  ] as const) {
    process.once(signal, () => {
      process.stderr.write(`\n${signal}: stopping the service child(ren) and exiting\n`);
      for (const child of live) child.kill('SIGTERM');
      // Give them a moment to drain; the 'exit' hook SIGKILLs whatever is left.
      setTimeout(() => process.exit(code), 1500).unref();
    });
  }
}

/**
 * `count` distinct free TCP ports on 127.0.0.1: all are held bound until every one is picked, then
 * released (a race with another process is possible but rare). Picked one at a time, bound and released,
 * the kernel can hand out the same port twice: the service's gRPC and admin ports once collided that way
 * (EADDRINUSE at start-up, test/retrieval/postgres-serve.test.ts under two busy loops).
 */
export async function freePorts(count: number): Promise<number[]> {
  const servers: net.Server[] = [];
  try {
    for (let i = 0; i < count; i++) {
      const server = net.createServer();
      server.unref();
      servers.push(server);
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(0, '127.0.0.1', resolve);
      });
    }
    return servers.map((server) => (server.address() as net.AddressInfo).port);
  } finally {
    await Promise.all(servers.map((server) => new Promise<void>((resolve) => server.close(() => resolve()))));
  }
}

/** One free TCP port on 127.0.0.1 ({@link freePorts}). */
export async function freePort(): Promise<number> {
  const [port] = await freePorts(1);
  return port!;
}

/**
 * The inherited environment without anything that would point the service elsewhere (memory service,
 * Redis, TLS, tokens): the bench always measures the embedded store on loopback.
 */
function cleanEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (k.startsWith('IBEX_CONTEXT_')) continue;
    if (k === 'REDIS_URL' || k === 'MEMORY_BASE_URL' || k === 'MEMORY_API_TOKEN') continue;
    env[k] = v;
  }
  return env;
}

function readStatTimes(file: string): number | null {
  try {
    const text = readFileSync(file, 'utf8');
    // Field 2 (comm) may hold spaces and parentheses: fields are counted after its closing ')'.
    const rest = text.slice(text.lastIndexOf(')') + 2).split(' ');
    // rest[0] is field 3 (state); utime and stime are fields 14 and 15.
    return (Number(rest[11]) + Number(rest[12])) / CLK_TCK;
  } catch {
    return null;
  }
}

/** {@link MainThreadSched} of process `pid`; null where schedstat is missing (not Linux, or disabled). */
export function readMainThreadSched(pid: number): MainThreadSched | null {
  try {
    const waitNs = Number(readFileSync(`/proc/${pid}/task/${pid}/schedstat`, 'utf8').split(' ')[1]);
    const status = readFileSync(`/proc/${pid}/task/${pid}/status`, 'utf8');
    const switches = Number(/^nonvoluntary_ctxt_switches:\s*(\d+)/m.exec(status)?.[1]);
    if (!Number.isFinite(waitNs) || !Number.isFinite(switches)) return null;
    return { runqueue_wait_s: waitNs / 1e9, involuntary_switches: switches };
  } catch {
    return null;
  }
}

/**
 * Rethrows `err` with the child's fate and log tail when the child is gone: a step that fails because
 * the service died (or was killed from outside) says so instead of reporting a connect timeout.
 */
export function explainFailure(service: ServiceProcess, err: unknown): Error {
  const status = service.exitStatus();
  if (status === null) return err instanceof Error ? err : new Error(String(err));
  return new Error(
    `the service process (pid ${service.pid}) ${status} during the run: ${(err as Error).message}\n` +
      `--- service log (tail) ---\n${service.logTail()}`,
  );
}

/**
 * Starts `ibex-context serve` from `dist/` on free loopback ports and resolves once `/readyz` answers 200
 * (pool warm, health SERVING).
 * @throws Error with the child's last log lines when it exits or is not ready in time.
 */
export async function startServiceProcess(opts: ServiceProcessOptions): Promise<ServiceProcess> {
  installExitHooks();
  const [grpcPort, adminPort] = opts.ports ?? ((await freePorts(2)) as [number, number]);
  const grpcAddr = `127.0.0.1:${grpcPort}`;
  const adminUrl = `http://127.0.0.1:${adminPort}`;
  const env = {
    ...cleanEnv(),
    IBEX_CONTEXT_GRPC_ADDR: grpcAddr,
    IBEX_CONTEXT_ADMIN_ADDR: `127.0.0.1:${adminPort}`,
    IBEX_CONTEXT_EMBEDDED_DB: opts.db,
    IBEX_CONTEXT_LOG_LEVEL: opts.logLevel ?? 'warn',
    ...opts.env,
  };
  // Opened before the child starts: a path that cannot be written fails here, with no child to clean up.
  const log = opts.logFile === undefined ? null : createWriteStream('', { fd: openSync(opts.logFile, 'w') });
  const child = spawn(
    process.execPath,
    [
      ...(opts.plainNode ? [] : SERVICE_NODE_FLAGS),
      ...(opts.nodeArgs ?? []),
      opts.entry ?? projectPath('dist/src/tools/cli/main.js'),
      'serve',
    ],
    {
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  live.add(child);
  const tail: string[] = [];
  const keep = (chunk: Buffer) => {
    log?.write(chunk);
    for (const line of chunk.toString('utf8').split('\n')) {
      if (line.trim() === '') continue;
      tail.push(line);
      if (tail.length > LOG_TAIL_LINES) tail.shift();
    }
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  // 'close' comes after both streams have ended: nothing is written after it. stop() waits for the file,
  // so a bench that exits right after it keeps the log's last lines.
  const logClosed = new Promise<void>((resolve) => {
    if (log === null) resolve();
    else child.once('close', () => log.end(resolve));
  });
  let exited: { code: number | null; signal: NodeJS.Signals | null } | null = null;
  const exitPromise = new Promise<void>((resolve) => {
    child.once('exit', (code, signal) => {
      exited = { code, signal };
      live.delete(child);
      resolve();
    });
  });
  const logTail = () => tail.join('\n');
  const pid = child.pid;

  let stopping: Promise<void> | undefined;
  const stop = (graceMs = 5000): Promise<void> => {
    stopping ??= (async () => {
      if (exited) return logClosed;
      child.kill('SIGTERM');
      const killed = await Promise.race([exitPromise.then(() => false), sleep(graceMs).then(() => true)]);
      if (killed) {
        child.kill('SIGKILL');
        await exitPromise;
      }
      await logClosed;
    })();
    return stopping;
  };

  try {
    if (pid === undefined) throw new Error('the service process did not start');
    const deadline = Date.now() + (opts.readyTimeoutMs ?? 30_000);
    for (;;) {
      if (exited) {
        const e = exited as { code: number | null; signal: NodeJS.Signals | null };
        throw new Error(`the service exited during start-up (code ${e.code}, signal ${e.signal})`);
      }
      try {
        const res = await fetch(`${adminUrl}/readyz`, { signal: AbortSignal.timeout(1000) });
        await res.arrayBuffer();
        if (res.status === 200) break;
      } catch {
        // Not listening yet.
      }
      if (Date.now() > deadline) throw new Error('the service was not ready in time');
      await sleep(100);
    }
  } catch (err) {
    await stop(1000);
    throw new Error(`${(err as Error).message}\n--- service log (tail) ---\n${logTail()}`);
  }

  return {
    pid,
    grpcAddr,
    adminUrl,
    async metricsText() {
      const res = await fetch(`${adminUrl}/metrics`, { signal: AbortSignal.timeout(5000) });
      if (res.status !== 200) throw new Error(`/metrics answered ${res.status}`);
      return res.text();
    },
    cpu() {
      const total = readStatTimes(`/proc/${pid}/stat`);
      // The main thread's task id is the process id.
      const main = readStatTimes(`/proc/${pid}/task/${pid}/stat`);
      if (total === null || main === null) return null;
      return { total_s: total, main_thread_s: main, main_thread_sched: readMainThreadSched(pid) };
    },
    logTail,
    exitStatus() {
      const e = exited as { code: number | null; signal: NodeJS.Signals | null } | null;
      if (e === null) return null;
      return e.signal ? `killed by ${e.signal}` : `exited with code ${e.code}`;
    },
    stop,
  };
}

/** Busy and total CPU time of the whole machine, seconds summed over all CPUs (`/proc/stat`). */
export function machineCpu(): { busy_s: number; total_s: number } | null {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!;
    const v = line.trim().split(/\s+/).slice(1).map(Number);
    // user nice system idle iowait irq softirq steal (guest time is already inside user).
    const total = v.slice(0, 8).reduce((a, b) => a + b, 0);
    const idle = (v[3] ?? 0) + (v[4] ?? 0);
    return { busy_s: (total - idle) / CLK_TCK, total_s: total / CLK_TCK };
  } catch {
    return null;
  }
}
