// `ibex-context load`: flags, progress line and report around {@link runLoad} (client/load-driver.ts).

import { canonicalUuid } from '../../../util/uuid.js';
import { budgetMix, mixedSource, probeCandidateTokens } from '../../client/budget-mix.js';
import {
  CONNECTION_FLAGS,
  CONNECTION_USAGE,
  connectionFromFlags,
  numberFlag,
} from '../../client/cli-options.js';
import { type LoadOptions, runLoad } from '../../client/load-driver.js';
import { describeRun, formatLoadReport, formatProgress } from '../../client/load-report.js';
import { transportFlag } from '../../client/load-transport.js';
import { type RequestSource, syntheticSource } from '../../client/request-source.js';
import { booleanFlags, commandPrologue, progressLine, stringFlags } from '../command-args.js';
import { printCommandError } from '../command-error.js';
import { unreachableExit } from '../reachability.js';

const USAGE = `usage: ibex-context load [options]

  -c, --connections <n>     separate gRPC channels (default 10)
  -d, --duration <s>        measured seconds (default 10)
  -R, --rate <req/s>        total rate: open loop, latency from the intended send time
  -p, --pipelining <n>      closed loop (no -R): calls in flight per connection (default 1)
  -a, --max-requests <n>    stop after n measured requests (hard bound)
      --warmup <s>          unrecorded traffic before the measured phase (default 0)
      --timeout <ms>        per-call gRPC deadline (default 1000)
      --connect-timeout <ms> wait this long for every channel to connect (default 5000)
      --locomo <dir>        real LoCoMo turns as requests (as ingested by 'ibex-context ingest')
      --org <uuid>          org the LoCoMo conversations were ingested under
      --seed <n>            seed of the synthetic request generator and of the budget mix (default 1)
      --constrained <share> share of calls (0..1) sent with an available_tokens that fits 30–80 % of the
                            candidates' tokens, probed per agent before the run (default 0)
      --transport <name>    h2 (default): pre-encoded messages over node:http2, one session per
                            connection; grpc-js: a grpc-js channel per connection (for comparison)
      --tail-ms <ms>        a call slower than this is counted in the report's tail: slow calls grouped
                            into incidents by send time, and how often large ones recur (default 20)
      --verify              decode every OK answer in full and check its level (costs driver CPU)
      --json                print one JSON object instead of the tables (errors too: {"error": …})
  -h, --help                this text
${CONNECTION_USAGE}

Errors are counted by gRPC code; DEADLINE_EXCEEDED is split into "(client --timeout)" and
"(server cap)" (the service caps every call at its IBEX_CONTEXT_TIMEOUT).`;

/** CLI entry: 0 when the run completed (gRPC errors are results), 2 for bad flags, 1 when unreachable. */
export async function run(argv: string[]): Promise<number> {
  const parsed = await commandPrologue(
    argv,
    {
      command: 'load',
      usage: USAGE,
      options: {
        ...CONNECTION_FLAGS,
        connections: { type: 'string', short: 'c' },
        duration: { type: 'string', short: 'd' },
        rate: { type: 'string', short: 'R' },
        pipelining: { type: 'string', short: 'p' },
        'max-requests': { type: 'string', short: 'a' },
        ...stringFlags(
          'warmup',
          'timeout',
          'connect-timeout',
          'locomo',
          'org',
          'seed',
          'constrained',
          'transport',
          'tail-ms',
        ),
        ...booleanFlags('verify'),
      },
    },
    (values) => {
      const seed = numberFlag('seed', values.seed, 1, { integer: true });
      const rate = numberFlag('rate', values.rate, 0, { min: 0, max: 1_000_000 });
      const constrained = numberFlag('constrained', values.constrained, 0, { min: 0, max: 1 });
      const transport = transportFlag(values.transport ?? 'h2');
      const opts: LoadOptions = {
        ...connectionFromFlags(values),
        connections: numberFlag('connections', values.connections, 10, { min: 1, max: 1000, integer: true }),
        durationS: numberFlag('duration', values.duration, 10, { min: 0.001, max: 86_400 }),
        pipelining: numberFlag('pipelining', values.pipelining, 1, { min: 1, max: 10_000, integer: true }),
        warmupS: numberFlag('warmup', values.warmup, 0, { min: 0, max: 3600 }),
        timeoutMs: numberFlag('timeout', values.timeout, 1000, { min: 1, max: 3_600_000 }),
        connectTimeoutMs: numberFlag('connect-timeout', values['connect-timeout'], 5000, {
          min: 1,
          max: 600_000,
        }),
        tailThresholdMs: numberFlag('tail-ms', values['tail-ms'], 20, { min: 0.001, max: 3_600_000 }),
        transport,
        verify: values.verify ?? false,
      };
      if (rate > 0) opts.rate = rate;
      if (values['max-requests'] !== undefined) {
        opts.maxRequests = numberFlag('max-requests', values['max-requests'], 0, { min: 1, integer: true });
      }
      if (values.org !== undefined && values.locomo === undefined)
        throw new Error('--org only applies with --locomo');
      const org = values.org === undefined ? undefined : canonicalUuid(values.org);
      if (org === null) throw new Error('--org must be a UUID');
      const locomo = values.locomo === undefined ? undefined : { dir: values.locomo, org };
      return { opts, seed, constrained, locomo };
    },
  );
  if (parsed.exit !== null) return parsed.exit;
  const { json } = parsed;
  const { opts, seed, constrained, locomo } = parsed.config;

  let source: RequestSource;
  try {
    if (locomo) {
      // Loaded on demand: the LoCoMo reader pulls in the ingest module (and its store).
      const { locomoSource } = await import('../../client/locomo-requests.js');
      source = await locomoSource(locomo.dir, locomo.org === undefined ? {} : { orgId: locomo.org });
    } else {
      source = syntheticSource({ seed });
    }
  } catch (err) {
    printCommandError('load', (err as Error).message, json);
    return 1;
  }
  // A refused connection is known at once: say so in a line instead of waiting out --connect-timeout.
  const unreachable = await unreachableExit('load', opts, json, Math.min(1000, opts.connectTimeoutMs!));
  if (unreachable !== null) return unreachable;
  if (constrained > 0) {
    try {
      // The probe is a few unconstrained calls per agent, before the run (and before any warmup).
      const requests = source.requests ?? [];
      const tokens = await probeCandidateTokens(opts, requests, { connectTimeoutMs: opts.connectTimeoutMs });
      source = mixedSource(source, budgetMix(tokens, { share: constrained, seed }), constrained);
    } catch (err) {
      printCommandError('load', `--constrained: ${(err as Error).message}`, json);
      return 1;
    }
  }
  opts.source = source;

  const progress = progressLine();
  const controller = new AbortController();
  // The first Ctrl-C ends the run early and still prints the report of what was measured.
  const onSigint = () => controller.abort();
  process.once('SIGINT', onSigint);
  opts.signal = controller.signal;
  if (progress.tty) {
    process.stderr.write(
      `${describeRun({
        target: opts.addr,
        open_loop: opts.rate !== undefined,
        rate: opts.rate ?? null,
        connections: opts.connections!,
        pipelining: opts.pipelining!,
        duration_s: opts.durationS!,
        warmup_s: opts.warmupS!,
        timeout_ms: opts.timeoutMs!,
        source: source.name,
      })}\n`,
    );
    opts.onProgress = (p) => progress.draw(formatProgress(p));
  }
  try {
    const report = await runLoad(opts);
    progress.clear();
    process.stdout.write(json ? `${JSON.stringify(report)}\n` : `${formatLoadReport(report)}\n`);
    return 0;
  } catch (err) {
    progress.clear();
    printCommandError('load', (err as Error).message, json, { target: opts.addr });
    return 1;
  } finally {
    process.removeListener('SIGINT', onSigint);
  }
}
