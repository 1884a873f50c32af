/**
 * A service started on an empty PostgreSQL schema warms on the agents an import writes afterwards (heard
 * of through LISTEN/NOTIFY), as it does on the embedded store, and those warm-up calls leave no trace: no
 * call in the metrics, no inclusion counted.
 */
import { afterAll, expect, it } from 'vitest';
import { PgStore } from '../../../src/retrieval/postgres/pg-store.js';
import { createLogger } from '../../../src/telemetry/logger.js';
import { memories, request, startTestService, tenant } from '../../e2e/harness.js';
import { logSink } from '../../helpers/log-sink.js';
import { expectQuietNewTenantWarmup } from '../../helpers/new-tenant-warmup.js';
import { adminQuery, describePg, dropSchema, PG_TEST_URL, pgTestFile } from '../../helpers/postgres.js';
import { waitFor } from '../../helpers/wait.js';

const { reachable, schema } = await pgTestFile('new_tenant_warmup');

async function inclusionSum(): Promise<number> {
  const rows = await adminQuery<{ n: string | null }>(
    `SELECT sum(inclusions)::text AS n FROM ${schema}.memories`,
  );
  return Number(rows[0]?.n ?? 0);
}

describePg('new-tenant warm-up on PostgreSQL', reachable, () => {
  afterAll(async () => {
    await dropSchema(schema);
  });

  it('warms on the agents an import writes after a start on an empty schema, counting nothing', async () => {
    const sink = logSink();
    const svc = await startTestService(
      {
        IBEX_CONTEXT_POSTGRES_URL: PG_TEST_URL,
        IBEX_CONTEXT_POSTGRES_SCHEMA: schema,
        IBEX_CONTEXT_INCLUSION_FLUSH_MS: '50',
      },
      { logger: createLogger({ logLevel: 'debug' }, sink.stream) },
    );
    const t = tenant();
    try {
      expect(sink.lines.find((l) => l.msg === 'pipeline warmed on stored agents')).toMatchObject({
        calls: 0,
      });
      // As `ingest` does: another process's write, announced by NOTIFY.
      const writer = await PgStore.open({ url: PG_TEST_URL, schema, poolMax: 1 });
      try {
        await writer.replaceAgent(t.org, t.agent, memories(t.org, t.agent, 40));
      } finally {
        await writer.close();
      }
      await expectQuietNewTenantWarmup(sink.lines, svc.service.adminUrl);
      await new Promise((r) => setTimeout(r, 150));
      expect(await inclusionSum()).toBe(0);

      // A served call counts: the checks above could fail.
      const out = await svc.client.assemble(request(t));
      expect(out.response?.degradation?.level).toBe('L0');
      expect(await waitFor(async () => (await inclusionSum()) > 0, 5_000)).toBe(true);
    } finally {
      await svc.stop();
    }
  });
});
