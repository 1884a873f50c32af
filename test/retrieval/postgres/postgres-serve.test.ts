/**
 * End to end on PostgreSQL: a real `ibex-context serve` process with IBEX_CONTEXT_POSTGRES_URL
 * (and no memory URL, no Redis) answers AssembleContext over gRPC at L0 from the shared database, names
 * the active store in its start-up log line and on /readyz, never logs the URL's password, and never
 * shows another org's memories of the same agent id.
 */
import os from 'node:os';
import path from 'node:path';
import { status } from '@grpc/grpc-js';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { type ServiceProcess, startServiceProcess } from '../../../bench/lib/service-process.js';
import { PgStore } from '../../../src/retrieval/postgres/pg-store.js';
import { memories, request, tenant } from '../../e2e/harness.js';
import { createTestClient, type TestClient } from '../../helpers/grpc-client.js';
import { describePg, dropSchema, PG_TEST_URL, pgTestFile } from '../../helpers/postgres.js';

const { reachable, schema } = await pgTestFile('serve');
const t = tenant();
const other = tenant();
// Trust auth ignores the password; it is here to prove it never reaches a log line.
const PASSWORD = 'pw-never-logged-5f2c';
const url = (() => {
  const u = new URL(PG_TEST_URL);
  u.password = PASSWORD;
  return u.toString();
})();

describePg('serve on PostgreSQL', reachable, () => {
  let service: ServiceProcess;
  let client: TestClient;
  beforeAll(async () => {
    const store = await PgStore.open({ url: PG_TEST_URL, schema, poolMax: 2 });
    try {
      await store.replaceAgent(t.org, t.agent, memories(t.org, t.agent, 12), {
        org_id: t.org,
        agent_id: t.agent,
        content: 'You are the lake assistant.',
        injection_mode: 'system_first',
        version_id: '11111111-1111-4111-8111-111111111111',
      });
      await store.upsertMemories(memories(other.org, t.agent, 5, 'secret'));
    } finally {
      await store.close();
    }
    service = await startServiceProcess({
      db: path.join(os.tmpdir(), `ibex-unused-${schema}.db`),
      logLevel: 'info',
      env: {
        IBEX_CONTEXT_POSTGRES_URL: url,
        IBEX_CONTEXT_POSTGRES_SCHEMA: schema,
        IBEX_CONTEXT_POSTGRES_POOL_MAX: '4',
        // Generous: the suite runs on two shared cores; only fault tests depend on timing.
        IBEX_CONTEXT_TIMEOUT: '2000',
        IBEX_CONTEXT_DEADLINE_MS: '1000',
        IBEX_CONTEXT_DIRECTIVE_TIMEOUT_MS: '1000',
        IBEX_CONTEXT_HOT_TIMEOUT_MS: '1000',
        IBEX_CONTEXT_COLD_TIMEOUT_MS: '1000',
        IBEX_CONTEXT_POOL_MIN_THREADS: '1',
        IBEX_CONTEXT_POOL_MAX_THREADS: '1',
      },
    });
    client = createTestClient(service.grpcAddr);
  }, 60_000);
  afterAll(async () => {
    client?.close();
    await service?.stop();
    await dropSchema(schema);
  });

  it('answers AssembleContext at L0 from PostgreSQL, own org only', async () => {
    const r = await client.assemble(request(t), { deadlineMs: 5000 });
    expect(r.status.code).toBe(status.OK);
    const res = r.response!;
    expect(res.degradation.level).toBe('L0');
    expect(res.degradation.branches.map((b) => [b.name, b.status])).toEqual([
      ['directive', 'success'],
      ['hot', 'success'],
      ['cold', 'success'],
    ]);
    expect(res.assembled_context.startsWith('You are the lake assistant.')).toBe(true);
    expect(res.memories_included).toBe(12);
    expect(res.assembled_context).not.toContain('secret');
  });

  it('names the active stores on /readyz and in the start-up log line, without the password', async () => {
    const body = await (await fetch(`${service.adminUrl}/readyz`)).json();
    expect(body).toMatchObject({ status: 'ready', stores: { memory: 'postgres', directive: 'postgres' } });
    const log = service.logTail();
    const serving = log.split('\n').find((l) => l.includes('ibex-context serving'));
    expect(JSON.parse(serving!)).toMatchObject({ memory: 'postgres', directive: 'postgres' });
    expect(log).not.toContain(PASSWORD);
  });
});
