/**
 * `ibex-context healthcheck`: `grpc.health.v1.Health/Check` (SPEC §2) with a 2 s deadline; exit 0 iff
 * the answer is SERVING. The Dockerfile's HEALTHCHECK runs it, so it prints one short line and never
 * waits longer than the deadline.
 */
import { parseArgs } from 'node:util';
import { status } from '@grpc/grpc-js';
import {
  CONNECTION_FLAGS,
  CONNECTION_USAGE,
  connectionFromFlags,
  describeStatus,
  numberFlag,
} from '../../client/cli-options.js';
import { type ConnectionOptions, createContextClient } from '../../client/context-client.js';

const USAGE = `usage: ibex-context healthcheck [options]

      --service <name>      service to check (default "": the whole server)
      --timeout <ms>        deadline (default 2000)
  -h, --help                this text

A refused connection fails at once (no wait for the deadline), with one line naming the address.
${CONNECTION_USAGE}`;

/**
 * CLI entry.
 * @returns 0 when SERVING; 1 for any other health status or a gRPC error (UNAVAILABLE when nothing
 *   listens, DEADLINE_EXCEEDED after the deadline); 2 for bad flags.
 */
export async function run(argv: string[]): Promise<number> {
  let conn: ConnectionOptions;
  let service: string;
  let timeoutMs: number;
  try {
    const { values } = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: {
        ...CONNECTION_FLAGS,
        service: { type: 'string' },
        timeout: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
    });
    if (values.help) {
      process.stdout.write(`${USAGE}\n`);
      return 0;
    }
    conn = connectionFromFlags(values);
    service = values.service ?? '';
    timeoutMs = numberFlag('timeout', values.timeout, 2000, { min: 1, max: 600_000 });
  } catch (err) {
    process.stderr.write(`ibex-context healthcheck: ${(err as Error).message}\n${USAGE}\n`);
    return 2;
  }
  const client = createContextClient(conn);
  try {
    // waitForReady is left off: an unreachable server must fail fast, not wait out the deadline.
    const outcome = await client.healthCheck(service, { deadlineMs: timeoutMs });
    if (outcome.status.code !== status.OK || outcome.response === null) {
      process.stderr.write(
        `ibex-context healthcheck: ${describeStatus(outcome.status, conn.addr, timeoutMs)}\n`,
      );
      return 1;
    }
    const health = outcome.response.status;
    if (health === 'SERVING') {
      process.stdout.write(`${conn.addr}: SERVING\n`);
      return 0;
    }
    process.stderr.write(`${conn.addr}: ${health}\n`);
    return 1;
  } finally {
    client.close();
  }
}
