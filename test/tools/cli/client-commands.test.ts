/**
 * Client commands as a user meets them: a host without a port dials 9092, a refused connection
 * is one line naming the address (JSON with --json) without waiting out the connect timeout, whose deadline
 * fired, `assemble --json` order and rounding, `replay` warning when no call got a memory, `ingest`'s table.
 * Real gRPC servers on 127.0.0.1 (test doubles behind the real transport) and real CLI processes.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AssembleResult } from '../../../src/grpc/grpc-server.js';
import type { ValidatedRequest } from '../../../src/request/validate.js';
import { deadlineSide, errorKey, withDefaultPort } from '../../../src/tools/client/cli-options.js';
import { Errors } from '../../../src/wire/errors.js';
import { startAssembleServer } from '../../helpers/assemble-server.js';
import { CLI_AGENT as AGENT, assembleArgs, CLI_ORG as ORG, runCli } from '../../helpers/cli.js';
import { closedPort } from '../../helpers/closed-port.js';
import { stubResponse, ZERO_METRICS } from '../../helpers/stub-response.js';

let dir: string;

async function startFake(assemble: (req: ValidatedRequest) => Promise<AssembleResult>): Promise<string> {
  const { addr } = await startAssembleServer(assemble);
  return addr;
}

/** A `host:port` nothing listens on. */
async function refusedAddr(): Promise<string> {
  return `127.0.0.1:${await closedPort()}`;
}

beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'ibex-cli-'));
  const turns = (s: number) =>
    Array.from({ length: 4 }, (_, i) => ({
      speaker: i % 2 ? 'B' : 'A',
      dia_id: `D${s}:${i}`,
      text: `t${i}`,
    }));
  const conv: Record<string, unknown> = { speaker_a: 'A', speaker_b: 'B' };
  for (let s = 1; s <= 3; s++) {
    conv[`session_${s}_date_time`] = `1:56 pm on ${s} May, 2023`;
    conv[`session_${s}`] = turns(s);
  }
  writeFileSync(path.join(dir, '1.json'), JSON.stringify(conv));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('addresses and whose deadline', () => {
  it('withDefaultPort adds 9092 to a bare host and leaves ports and schemes alone', () => {
    expect(withDefaultPort('127.0.0.1')).toBe('127.0.0.1:9092');
    expect(withDefaultPort(' svc.local ')).toBe('svc.local:9092');
    expect(withDefaultPort('127.0.0.1:50')).toBe('127.0.0.1:50');
    expect(withDefaultPort('[::1]')).toBe('[::1]:9092');
    expect(withDefaultPort('[::1]:7')).toBe('[::1]:7');
    expect(withDefaultPort('::1')).toBe('[::1]:9092');
    expect(withDefaultPort('dns:///svc:9000')).toBe('dns:///svc:9000');
    expect(() => withDefaultPort(' ')).toThrow('--addr must not be empty');
  });

  it("whose deadline: the caller's own timer or ≥ 90 % of its timeout is the client side, sooner the server cap", () => {
    expect(deadlineSide(1002, 1000)).toBe('client');
    expect(deadlineSide(900, 1000)).toBe('client');
    expect(deadlineSide(899, 1000)).toBe('server');
    // Our timer fired: the client's deadline whatever the clock says (a stalled loop can fire it late or early).
    expect(deadlineSide(10, 1000, true)).toBe('client');
    // No timings (a health check: nothing caps it on the server).
    expect(deadlineSide()).toBe('client');
    expect(errorKey({ code: 4 }, 45, 1000)).toBe('DEADLINE_EXCEEDED (server cap)');
    expect(errorKey({ code: 4 }, 45, 1000, true)).toBe('DEADLINE_EXCEEDED (client --timeout)');
    expect(errorKey({ code: 4 }, 1000, 1000)).toBe('DEADLINE_EXCEEDED (client --timeout)');
    expect(errorKey({ code: 14 }, 1, 1000)).toBe('UNAVAILABLE');
  });
});

describe('a refused connection is one line naming the address', () => {
  it('assemble, healthcheck, replay and load all say it; --json gives an error object on stdout', async () => {
    const addr = await refusedAddr();
    const line = `cannot reach the service at ${addr} (connection refused); is it running, and is --addr right?`;
    const assemble = await runCli(assembleArgs(addr));
    expect(assemble.code).toBe(1);
    expect(assemble.stderr).toBe(`ibex-context assemble: ${line}\n`);
    const health = await runCli(['healthcheck', '--addr', addr]);
    expect(health.stderr).toBe(`ibex-context healthcheck: ${line}\n`);
    const healthJson = await runCli(['healthcheck', '--addr', addr, '--json']);
    expect(healthJson.code).toBe(1);
    expect(JSON.parse(healthJson.stdout)).toEqual({ error: line, target: addr });
    const replay = await runCli(['replay', '--locomo', dir, '--addr', addr]);
    expect(replay.code).toBe(1);
    expect(replay.stderr).toBe(`ibex-context replay: ${line}\n`);
    // A connect timeout of 10 min: the command can only pass by not waiting for it.
    const load = await runCli(['load', '--addr', addr, '-d', '1', '--connect-timeout', '600000', '--json']);
    expect(load.code).toBe(1);
    expect(JSON.parse(load.stdout)).toEqual({ error: line, target: addr });
    expect(load.stderr).toBe('');
  });

  it('--addr without a port dials 9092 (named in the error, not 443)', async () => {
    const r = await runCli(['healthcheck', '--addr', '127.0.0.1', '--timeout', '1000']);
    expect(r.stderr + r.stdout).toContain('127.0.0.1:9092');
  });
});

describe('assemble output', () => {
  it('--json puts assembled_context first and memories_used last, with 4-decimal scores and 0.01 ms latencies', async () => {
    const addr = await startFake(async () => {
      const row = {
        memory_id: '44444444-4444-4444-8444-444444444444',
        composite_score: 0.9819999933242798,
        relevance_score: 0.5,
        recency_score: 0,
        usefulness_score: 0,
        rank: 1,
        category: 'episodic',
        exclusion: 'budget' as const,
        similarity: 0.1234567,
        confidence: 0.5,
        token_estimate: 10,
      };
      const res = stubResponse(undefined, {
        assembled_context: 'CTX',
        metrics: { ...ZERO_METRICS, total_ms: 3 },
        memories_used: [row],
        degradation: {
          level: 'L0',
          intentional: false,
          reasons: [],
          branches: [{ name: 'hot', status: 'success', latency_ms: 1.23456, detail: '' }],
        },
      });
      return { response: res, level: 'L0' };
    });
    const r = await runCli(assembleArgs(addr, '--json'));
    expect(r.code).toBe(0);
    const body = JSON.parse(r.stdout) as Record<string, unknown>;
    const keys = Object.keys(body);
    expect(keys[0]).toBe('assembled_context');
    expect(keys.at(-1)).toBe('memories_used');
    const used = (body.memories_used as Record<string, number>[])[0]!;
    expect(used.composite_score).toBe(0.982);
    expect(used.similarity).toBe(0.1235);
    expect((body.metrics as Record<string, number>).total_ms).toBe(3); // int32 on the wire
    expect((body.degradation as { branches: { latency_ms: number }[] }).branches[0]!.latency_ms).toBe(1.23);
  });

  it("says whose deadline fired: the client's --timeout or the service's cap", async () => {
    const slow = await startFake(() => new Promise(() => {}));
    const base = ['--org', ORG, '--agent', AGENT, '--model', 'gpt-4o'];
    const client = await runCli(['assemble', '--addr', slow, ...base, '--timeout', '200', '--json']);
    expect(client.code).toBe(1);
    const c = JSON.parse(client.stdout);
    expect(c.code).toBe('DEADLINE_EXCEEDED');
    expect(c.deadline).toBe('client');
    expect(c.error).toBe(
      "DEADLINE_EXCEEDED: the client's deadline (--timeout 200 ms) passed before the answer came",
    );
    const capped = await startFake(async () => {
      throw Errors.deadlineExceeded();
    });
    const server = await runCli(['assemble', '--addr', capped, ...base]);
    expect(server.code).toBe(1);
    expect(server.stderr).toContain("DEADLINE_EXCEEDED: the service's deadline");
  });
});

describe('replay and ingest', () => {
  it('replay warns when no OK answer included a memory (a wrong --org)', async () => {
    const addr = await startFake(async () => {
      return { response: stubResponse(undefined, { assembled_context: 'no memories here' }), level: 'L0' };
    });
    const r = await runCli(['replay', '--locomo', dir, '--addr', addr, '--org', ORG, '--limit', '3']);
    expect(r.stderr).toMatch(
      /^ibex-context replay: warning: none of the 3 OK answers included a memory; check that --org/m,
    );
  });

  it('ingest prints the org and a table of agents; --json the machine form', async () => {
    const db = path.join(dir, 'store.db');
    const table = await runCli(['ingest', '--locomo', dir, '--db', db]);
    expect(table.code).toBe(0);
    expect(table.stdout).toContain(`ingested into ${db}\norg_id `);
    expect(table.stdout).toMatch(/│ total +│ +│ 1 agents +│ 12 +│/);
    const json = await runCli(['ingest', '--locomo', dir, '--db', db, '--json']);
    expect(JSON.parse(json.stdout)).toMatchObject({ db, memories: 12, directives: 1 });
    const bad = await runCli(['ingest', '--locomo', path.join(dir, 'nope'), '--db', db, '--json']);
    expect(bad.code).toBe(1);
    expect(JSON.parse(bad.stdout).error).toContain('nope');
  });
});
