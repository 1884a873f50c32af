import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { SERVICE_NODE_FLAGS } from '../src/config/node-flags.js';
import type { LoopDelayQuantiles } from '../src/telemetry/loop-delay.js';
import { stringFlags } from '../src/tools/cli/command-args.js';
import { type LoadReport, runLoad } from '../src/tools/client/load-driver.js';
import { cyclingSource } from '../src/tools/client/request-source.js';
import type { AssembleContextRequestInput } from '../src/wire/proto.js';
import type { AttackerData, NoisyResult } from './isolation-attacker.js';
import { bareServerRatio } from './lib/bare-grpc-ratio.js';
import {
  type BenchFlagValues,
  benchOptions,
  machineInfo,
  nodeArgsOf,
  parseEnvPairs,
  parseNumber,
  runBenchMain,
  tempDir,
} from './lib/bench-run.js';
import { type EldProbe, startEldProbe } from './lib/eld-probe.js';
import { crossingCosts, parseCosts } from './lib/main-thread-costs.js';
import { projectPath, writeResultFile } from './lib/paths.js';
import { type ServerStepStats, snapshot, stepStats } from './lib/server-metrics.js';
import { BENCH_DEADLINE_MS, printTable, startBenchService } from './lib/service-child.js';
import type { ServiceProcess } from './lib/service-process.js';

const TARGETS = {
  quiet_ok_rate: 0.99,
  quiet_l0_rate: 0.95,
  quiet_p99_ratio_max: 2,
  event_loop_delay_p99_ms: 2,
  noisy_answered_rate: 0.95,
  decode_bomb_code: 'INVALID_ARGUMENT',
};

/** Default deadline of the noisy callers, ms (`--noisy-timeout-ms`; long enough for a 10 MB upload and download). */
const NOISY_TIMEOUT_MS = 2000;

const QUIET = { org: 'a1a1a1a1-0000-4000-8000-000000000001', agent: 'a1a1a1a1-0000-4000-8000-0000000000a1' };
const NOISY_ORG = 'b2b2b2b2-0000-4000-8000-000000000002';
const AGENTS = {
  hits5000: 'b2b2b2b2-0000-4000-8000-0000000005a0',
  html: 'b2b2b2b2-0000-4000-8000-000000000a7e',
};

function quietRequests(): AssembleContextRequestInput[] {
  return Array.from({ length: 16 }, (_, i) => ({
    org_id: QUIET.org,
    agent_id: QUIET.agent,
    model: 'gpt-4o',
    query: `what happened on the lake, take ${i}?`,
    recent_messages: [
      { role: 'user', content: `Do you remember the boat trip (${i})?` },
      { role: 'assistant', content: 'Yes, on tuesday.' },
    ],
  }));
}

function quietFigures(r: LoadReport, server: ServerStepStats, floor: LoopDelayQuantiles) {
  const sent = Math.max(1, r.requests.sent);
  return {
    sent: r.requests.sent,
    ok_rate: r.requests.ok / sent,
    l0_rate: r.requests.levels.L0 / sent,
    levels: r.requests.levels,
    errors: r.requests.errors,
    p50_ms: r.latency_ms.p50,
    p99_ms: r.latency_ms.p99,
    max_ms: r.latency_ms.max,
    // Where the quiet latency goes: the service's own total_ms and the rest (transport, receive, driver).
    split_ms: r.split_ms,
    event_loop_delay_ms: server.event_loop_delay_ms,
    // The same measure in an empty Node process over the same seconds (a process with none of our code).
    floor_event_loop_delay_ms: floor,
    gc: server.gc,
    server: {
      degraded_reasons: server.degraded_reasons,
      refused_too_late: server.refused_too_late,
      pool_tasks: server.pool_tasks,
      cpu_cores: server.cpu_cores,
      machine_busy_cores: server.machine_busy_cores,
      main_thread_sched: server.main_thread_sched,
    },
    driver: r.driver,
    warnings: r.warnings,
  };
}

async function quietPhase(service: ServiceProcess, probe: EldProbe, seconds: number, rate: number) {
  const before = await snapshot(service);
  await probe.take();
  const report = await runLoad({
    addr: service.grpcAddr,
    rate,
    durationS: seconds,
    connections: 2,
    timeoutMs: BENCH_DEADLINE_MS,
    source: cyclingSource('quiet org', quietRequests()),
  });
  const after = await snapshot(service);
  const floor = await probe.take();
  return quietFigures(report, stepStats(before, after), floor);
}

function startAttacker(data: AttackerData): Promise<{ worker: Worker; memoryUrl: string }> {
  const here = path.dirname(fileURLToPath(import.meta.url));
  const worker = new Worker(path.join(here, 'isolation-attacker.js'), { workerData: data });
  return new Promise((resolve, reject) => {
    worker.once('error', reject);
    worker.once('message', (m: { memoryUrl: string }) => resolve({ worker, memoryUrl: m.memoryUrl }));
  });
}

function attack(
  worker: Worker,
  grpcAddr: string,
  ms: number,
  kinds?: string[],
): Promise<Record<string, NoisyResult>> {
  return new Promise((resolve, reject) => {
    worker.once('error', reject);
    worker.once('message', (m: { result: Record<string, NoisyResult> }) => resolve(m.result));
    worker.postMessage({ attack: ms, grpcAddr, kinds });
  });
}

/** The memory-service kinds of the attack (the dependency half of the attack). */
const MEMORY_KINDS = ['memory_5000_hits', 'memory_html_300kb'];
/** Every heavy kind the sender knows (bench/isolation-attacker.ts `heavyRequests`), the last phase's default. */
const HEAVY_KINDS = ['decode_bomb', 'emoji_history', ...MEMORY_KINDS, 'cjk_history'];

const USAGE = `usage: npm run bench:isolation -- [options]
  --seconds <s>           measured seconds per phase: an empty Node process on the idle machine, a bare
                          gRPC server alone and beside a busy loop per core (the floors), then the quiet
                          org alone, under memory kinds, under all kinds (default 10)
  --quiet-rate <r>        the quiet org's calls per second (default 25)
  --noisy-rate <r>        the noisy org's calls per second, per heavy kind (default 10)
  --noisy-timeout-ms <ms> the noisy caller's own deadline (default ${NOISY_TIMEOUT_MS})
  --kinds <k,k,…>         heavy kinds of the last phase, comma-separated (default all of
                          ${HEAVY_KINDS.join(',')});
                          e.g. --kinds cjk_history for what one kind costs alone
  --service-env <K=V>     extra IBEX_CONTEXT_* setting of the service (repeatable), e.g. an A/B of one
  --plain-node            start the service without its node flags (SERVICE_NODE_FLAGS, as npm start gives
                          them): the A side of an A/B of those flags
  --node-arg <flag>       extra node/V8 flag of the service process (repeatable), e.g.
                          --node-arg=--max-semi-space-size=8
  --out <dir>             where isolation.json goes (default bench/results)`;

const FLAGS = {
  ...stringFlags('seconds', 'quiet-rate', 'noisy-rate', 'noisy-timeout-ms', 'kinds', 'out'),
  'plain-node': { type: 'boolean' },
  'service-env': { type: 'string', multiple: true },
  'node-arg': { type: 'string', multiple: true },
} as const;

/** `--kinds`: a comma-separated subset of {@link HEAVY_KINDS}. @throws Error naming an unknown kind. */
function kindsOf(value: string | undefined): string[] {
  if (value === undefined) return HEAVY_KINDS;
  const kinds = value.split(',').filter((k) => k !== '');
  const unknown = kinds.find((k) => !HEAVY_KINDS.includes(k));
  if (unknown !== undefined || kinds.length === 0)
    throw new Error(`--kinds takes some of ${HEAVY_KINDS.join(',')}, got '${value}'`);
  return kinds;
}

/** The bench's options, resolved. @throws Error naming a bad flag. */
function parseOptions(values: BenchFlagValues<typeof FLAGS>) {
  return {
    seconds: parseNumber('--seconds', values.seconds ?? '10'),
    quietRate: parseNumber('--quiet-rate', values['quiet-rate'] ?? '25'),
    noisyRate: parseNumber('--noisy-rate', values['noisy-rate'] ?? '10'),
    // The noisy caller's own deadline covers its 10 MB upload and download; the server keeps D = arrival +
    // BENCH_DEADLINE_MS for every call, and the quiet org keeps BENCH_DEADLINE_MS as its deadline.
    noisyTimeoutMs: parseNumber('--noisy-timeout-ms', values['noisy-timeout-ms'] ?? String(NOISY_TIMEOUT_MS)),
    kinds: kindsOf(values.kinds),
    out: path.resolve(values.out ?? projectPath('bench/results')),
    plainNode: values['plain-node'] === true,
    serviceEnv: parseEnvPairs(values['service-env'] ?? []),
    nodeArgs: nodeArgsOf(values['node-arg'] ?? []),
  };
}

async function main(): Promise<number> {
  const opts = benchOptions(process.argv.slice(2), USAGE, FLAGS, parseOptions);
  if (typeof opts === 'number') return opts;
  const { seconds, quietRate, noisyRate, noisyTimeoutMs } = opts;
  const machine = machineInfo();
  console.log(`bench:isolation — ${machine.cpus} CPUs, load average ${machine.loadavg_1m_at_start}`);

  const parse = await parseCosts(QUIET.org, QUIET.agent);
  console.log('main-thread JSON.parse + validation of one memory body (median):');
  printTable(Object.entries(parse.bodies).map(([k, v]) => [k, `${v.median_ms} ms (${v.bytes} bytes)`]));
  const crossing = await crossingCosts();
  console.log(
    'main-thread receive + CPU-task encoding of 20 hot memories of 65,536 CJK code points (median):',
  );
  printTable(Object.entries(crossing).map(([k, v]) => [k, `${v} ms`]));

  // The host's own floor first: the empty process before any of the bench's servers or load. On a shared
  // host the vCPUs' wake-ups alone can pass 2 ms at the p99.
  const nodeFlags = opts.plainNode ? opts.nodeArgs : [...SERVICE_NODE_FLAGS, ...opts.nodeArgs];
  // Exits by itself once the bench is gone (its stdin closes).
  const probe = await startEldProbe(nodeFlags);
  await probe.take();
  await sleep(seconds * 1000);
  const idleFloor = await probe.take();
  console.log(
    `event-loop delay of an empty Node process before any load, ${seconds} s: p99 ${idleFloor.p99} ms`,
  );
  const bare = await bareServerRatio(seconds, quietRate, nodeFlags, quietRequests());
  console.log(
    `quiet requests to a bare gRPC server (no work), p99 alone ${bare.alone_p99_ms} ms, beside ` +
      `${bare.busy_loops} busy loops ${bare.beside_busy_loops_p99_ms} ms (×${bare.p99_ratio})`,
  );

  const attackerData: Omit<AttackerData, 'role'> = {
    quiet: QUIET,
    noisyOrg: NOISY_ORG,
    agents: AGENTS,
    ratePerKind: noisyRate,
    timeoutMs: noisyTimeoutMs,
  };
  const { worker: memoryWorker, memoryUrl } = await startAttacker({ ...attackerData, role: 'memory' });
  const { worker } = await startAttacker({ ...attackerData, role: 'sender' });
  const dir = tempDir('ibex-isolation-');
  const { service } = await startBenchService(
    dir,
    {
      IBEX_CONTEXT_TIMEOUT: String(BENCH_DEADLINE_MS),
      IBEX_CONTEXT_MEMORY_BASE_URL: memoryUrl,
      IBEX_CONTEXT_MEMORY_API_TOKEN: 'bench-isolation-token',
      ...opts.serviceEnv,
    },
    {},
    { plainNode: opts.plainNode, nodeArgs: opts.nodeArgs },
  );
  try {
    console.log(`service pid ${service.pid} on ${service.grpcAddr}; memory service ${memoryUrl}`);
    // Warm-up: connections, JIT, the body-decoder thread; not recorded.
    await runLoad({
      addr: service.grpcAddr,
      rate: quietRate,
      durationS: 2,
      connections: 2,
      timeoutMs: BENCH_DEADLINE_MS,
      source: cyclingSource('quiet warm-up', quietRequests()),
    });
    const alone = await quietPhase(service, probe, seconds, quietRate);
    const memoryAttack = attack(worker, service.grpcAddr, seconds * 1000, MEMORY_KINDS);
    const underMemoryAttack = await quietPhase(service, probe, seconds, quietRate);
    const noisyMemory = await memoryAttack;
    const attackDone = attack(worker, service.grpcAddr, seconds * 1000, opts.kinds);
    const underAttack = await quietPhase(service, probe, seconds, quietRate);
    const noisy = await attackDone;

    // The decode bomb is invalid: its right answer is INVALID_ARGUMENT, checked on its own below. The rate
    // is over the valid heavy requests, answered OK at any degradation level (the isolation target).
    const valid = Object.entries(noisy)
      .filter(([kind]) => kind !== 'decode_bomb')
      .map(([, r]) => r);
    const noisySent = valid.reduce((s, r) => s + r.sent, 0);
    const noisyAnswered = valid.reduce((s, r) => s + (r.codes.OK ?? 0), 0);
    const p99Ratio = underAttack.p99_ms / Math.max(1e-9, alone.p99_ms);
    const checks = {
      quiet_ok_rate: underAttack.ok_rate >= TARGETS.quiet_ok_rate,
      quiet_l0_rate: underAttack.l0_rate >= TARGETS.quiet_l0_rate,
      quiet_p99_ratio: p99Ratio <= TARGETS.quiet_p99_ratio_max,
      event_loop_delay_p99: underAttack.event_loop_delay_ms.p99 <= TARGETS.event_loop_delay_p99_ms,
      noisy_answered_rate: noisyAnswered / Math.max(1, noisySent) >= TARGETS.noisy_answered_rate,
      // null when --kinds left the bomb out.
      decode_bomb_invalid_argument: noisy.decode_bomb
        ? (noisy.decode_bomb.codes.INVALID_ARGUMENT ?? 0) === noisy.decode_bomb.answered
        : null,
    };
    const pct = (x: number) => `${(100 * x).toFixed(1)} %`;
    console.log(`\nquiet org at ${quietRate} req/s, ${seconds} s per phase (target beside each figure):`);
    const m = underMemoryAttack;
    // Main-thread CPU the service spent per noisy memory call, beyond the quiet load: robust to a busy
    // machine (CPU seconds, not wall time), unlike the event-loop delay.
    const mainCpuS = (q: typeof alone) => (q.server.cpu_cores?.main_thread ?? Number.NaN) * seconds;
    const memorySent = Object.values(noisyMemory).reduce((sum, r) => sum + r.sent, 0);
    const mainMsPerMemoryCall =
      Math.round(((mainCpuS(m) - mainCpuS(alone)) / Math.max(1, memorySent)) * 1e6) / 1e3;
    const last = opts.kinds.length === HEAVY_KINDS.length ? 'all heavy kinds' : opts.kinds.join(' + ');
    console.log(`columns: alone / memory kinds only / ${last}`);
    printTable([
      ['OK rate', `${pct(alone.ok_rate)} / ${pct(m.ok_rate)} / ${pct(underAttack.ok_rate)}  (≥ 99 %)`],
      ['L0 rate', `${pct(alone.l0_rate)} / ${pct(m.l0_rate)} / ${pct(underAttack.l0_rate)}  (≥ 95 %)`],
      [
        'p99',
        `${alone.p99_ms} / ${m.p99_ms} / ${underAttack.p99_ms} ms, last phase ×${p99Ratio.toFixed(2)} of alone  (≤ ×2)`,
      ],
      [
        'of it, p99 in the service (total_ms) | outside it',
        [alone, m, underAttack]
          .map((q) => `${q.split_ms.service.p99} | ${q.split_ms.outside.p99}`)
          .join(' / ') + ' ms',
      ],
      [
        'event-loop delay p99',
        `${alone.event_loop_delay_ms.p99} / ${m.event_loop_delay_ms.p99} / ${underAttack.event_loop_delay_ms.p99} ms  (≤ 2 ms)`,
      ],
      [
        'the same, empty Node process (floor)',
        [alone, m, underAttack].map((q) => q.floor_event_loop_delay_ms.p99).join(' / ') + ' ms',
      ],
      [
        'main-thread GC ms/s (mark-compacts/s)',
        [alone, m, underAttack].map((q) => `${q.gc.ms_per_s} (${q.gc.major_per_s})`).join(' / '),
      ],
      [
        'main thread runnable, no CPU: ms/s (preemptions/s)',
        [alone, m, underAttack]
          .map((q) => {
            const s = q.server.main_thread_sched;
            return s ? `${s.runqueue_wait_ms_per_s} (${s.preemptions_per_s})` : 'n/a';
          })
          .join(' / '),
      ],
      ['main-thread CPU per noisy memory call', `${mainMsPerMemoryCall} ms (5,000 hits: 2.8 MB; HTML: 6 MB)`],
      [
        'large histories refused (no time for an answer)',
        [alone, m, underAttack].map((q) => q.server.refused_too_late).join(' / '),
      ],
      [
        'noisy answered OK (all but the bomb)',
        `${noisyAnswered}/${noisySent} = ${pct(noisyAnswered / Math.max(1, noisySent))}  (≥ 95 %)`,
      ],
    ]);
    console.log(`\nnoisy org, ${noisyRate} req/s per kind (memory-only phase, then all kinds):`);
    printTable(
      [
        ...Object.entries(noisyMemory).map(([k, r]) => [`${k} (memory phase)`, r] as const),
        ...Object.entries(noisy),
      ].map(([kind, r]) => [
        kind,
        `${r.request_bytes} B; ${JSON.stringify(r.codes)} levels ${JSON.stringify(r.levels)}${r.details.length ? ` — ${r.details[0]}` : ''}`,
      ]),
    );
    console.log(`\nchecks: ${JSON.stringify(checks)}`);

    const out = {
      bench: 'isolation',
      generated_at: new Date().toISOString(),
      note: 'shared machines give noisy figures; the lead re-runs on a quiet machine',
      machine,
      settings: {
        seconds,
        quiet_rate: quietRate,
        noisy_rate_per_kind: noisyRate,
        kinds: opts.kinds,
        client_deadline_ms: BENCH_DEADLINE_MS,
        server_timeout_ms: BENCH_DEADLINE_MS,
        noisy_client_deadline_ms: noisyTimeoutMs,
        service_node_flags: opts.plainNode ? [] : SERVICE_NODE_FLAGS,
        service_node_args: opts.nodeArgs,
        service_env: opts.serviceEnv,
      },
      targets: TARGETS,
      checks,
      quiet: {
        alone,
        under_memory_attack: underMemoryAttack,
        under_attack: underAttack,
        p99_ratio: Math.round(p99Ratio * 100) / 100,
        // The empty process before any of the bench's servers or load (each phase has its own floor too).
        machine_idle_floor_event_loop_delay_ms: idleFloor,
        // The ratio's floor: a server that does no work, alone and beside a busy loop per core.
        bare_server: bare,
        main_thread_cpu_ms_per_noisy_memory_call: mainMsPerMemoryCall,
        memory_attack_p99_ratio: Math.round((m.p99_ms / Math.max(1e-9, alone.p99_ms)) * 100) / 100,
      },
      noisy_memory_phase: noisyMemory,
      noisy,
      main_thread_parse: parse,
      main_thread_crossing_ms: crossing,
    };
    const file = writeResultFile(path.join(opts.out, 'isolation.json'), out);
    console.log(`wrote ${path.relative(process.cwd(), file) || file}`);
    return 0;
  } finally {
    worker.postMessage({ stop: true });
    memoryWorker.postMessage({ stop: true });
    await service.stop();
    await probe.stop();
    await worker.terminate();
    await memoryWorker.terminate();
  }
}

runBenchMain(main);
