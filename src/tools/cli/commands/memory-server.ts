// `ibex-context memory-server`: the command line of src/tools/memory-server/server.ts.

import { memoryApiTokenSetting } from '../../../config/settings.js';
import { numberFlag } from '../../client/cli-options.js';
import {
  type MemoryServerHandle,
  type MemoryServerOptions,
  startMemoryServer,
} from '../../memory-server/server.js';
import { booleanFlags, commandPrologue, STORE_FLAGS, storeFromFlags, stringFlags } from '../command-args.js';
import { printCommandError } from '../command-error.js';

const USAGE = `usage: ibex-context memory-server [--db <path>] [--port 8088] [--host 127.0.0.1] [--token <t>]
  [--latency-ms <n>] [--latency-dist fixed|uniform|exponential] [--latency-route both|hot|search]
  [--error-rate <0..1>]
  [--malformed-rate <0..1>] [--plant-foreign] [--plant-invalid]
  [--postgres <url>] [--json]
--json: errors as {"error"} on stdout; token: --token or IBEX_CONTEXT_MEMORY_API_TOKEN; store: --postgres, else --db, else
IBEX_CONTEXT_POSTGRES_URL (schema IBEX_CONTEXT_POSTGRES_SCHEMA), else IBEX_CONTEXT_EMBEDDED_DB`;

/** CLI entry: prints `{"listening": url}`, serves until a signal; 0 clean stop, 2 bad flags, 1 start-up. */
export async function run(argv: string[]): Promise<number> {
  const parsed = await commandPrologue(
    argv,
    {
      command: 'memory-server',
      usage: USAGE,
      options: {
        ...STORE_FLAGS,
        ...stringFlags(
          'port',
          'host',
          'token',
          'latency-ms',
          'latency-dist',
          'latency-route',
          'error-rate',
          'malformed-rate',
        ),
        ...booleanFlags('plant-foreign', 'plant-invalid'),
      },
    },
    (values): MemoryServerOptions => {
      const port = numberFlag('port', values.port, 8088, { max: 65_535, integer: true });
      const latencyMs = numberFlag('latency-ms', values['latency-ms'], 0);
      const dist = values['latency-dist'] ?? 'fixed';
      if (dist !== 'fixed' && dist !== 'uniform' && dist !== 'exponential') {
        throw new Error('--latency-dist must be fixed, uniform or exponential');
      }
      const route = values['latency-route'] ?? 'both';
      if (route !== 'both' && route !== 'hot' && route !== 'search') {
        throw new Error('--latency-route must be both, hot or search');
      }
      const token = values.token ?? memoryApiTokenSetting();
      if (token.trim() === '')
        throw new Error('a token is required: --token or IBEX_CONTEXT_MEMORY_API_TOKEN');
      const { db, postgres } = storeFromFlags(values);
      return {
        token,
        db,
        ...(postgres === null ? {} : { postgres }),
        port,
        host: values.host ?? '127.0.0.1',
        latencyMs,
        latencyDist: dist,
        latencyRoute: route,
        errorRate: numberFlag('error-rate', values['error-rate'], 0, { max: 1 }),
        malformedRate: numberFlag('malformed-rate', values['malformed-rate'], 0, { max: 1 }),
        plantForeign: values['plant-foreign'] ?? false,
        plantInvalid: values['plant-invalid'] ?? false,
      };
    },
  );
  if (parsed.exit !== null) return parsed.exit;
  const opts = parsed.config;
  let handle: MemoryServerHandle;
  try {
    handle = await startMemoryServer(opts);
  } catch (err) {
    printCommandError('memory-server', (err as Error).message, parsed.json);
    return 1;
  }
  process.stdout.write(`${JSON.stringify({ listening: handle.url })}\n`);
  return new Promise<number>((resolve) => {
    const stop = () => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      handle.close().then(
        () => resolve(0),
        () => resolve(1),
      );
    };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
}
