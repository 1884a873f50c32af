/**
 * The start-up warm-up on stored agents (docs/deploy.md, "First traffic"): before SERVING, the serving
 * pipeline answers real-shaped calls over the store's own recently written agents, and those calls leave
 * no trace a user can see: no inclusion counted toward a memory's frequency, no call in the metrics. A
 * service started on an empty store does the same on the agents an import adds while it runs.
 */
import Database from 'better-sqlite3';
import { expect, it } from 'vitest';
import { createLogger } from '../../src/telemetry/logger.js';
import { logSink } from '../helpers/log-sink.js';
import { expectQuietNewTenantWarmup } from '../helpers/new-tenant-warmup.js';
import { waitFor } from '../helpers/wait.js';
import { memories, request, startTestService, tempServiceStore, tenant } from './harness.js';

function inclusionSum(db: string): number {
  const conn = new Database(db, { readonly: true });
  try {
    return (conn.prepare('SELECT sum(inclusions) AS n FROM memories').get() as { n: number }).n;
  } finally {
    conn.close();
  }
}

it('warms on stored agents before SERVING, counting no inclusion and no call in the metrics', async () => {
  const stored = tempServiceStore();
  const t = tenant();
  stored.store.upsertMemories(memories(t.org, t.agent, 40));
  const sink = logSink();
  const svc = await startTestService(
    { IBEX_CONTEXT_EMBEDDED_DB: stored.db, IBEX_CONTEXT_INCLUSION_FLUSH_MS: '50' },
    { logger: createLogger({ logLevel: 'debug' }, sink.stream) },
  );
  try {
    const warmed = sink.lines.find((l) => l.msg === 'pipeline warmed on stored agents');
    expect(warmed).toMatchObject({ agents: 1 });
    expect(warmed?.calls).toBeGreaterThan(0);
    expect(warmed?.l0).toBeGreaterThan(0);
    const metrics = await (await fetch(`${svc.service.adminUrl}/metrics`)).text();
    expect(metrics).not.toMatch(/^ibex_context_branch_outcomes_total\{/m);
    expect(metrics).not.toMatch(/^ibex_context_assemblies_total\{/m);
    // Three flush intervals after start: the warm-up's answers have counted nothing.
    await new Promise((r) => setTimeout(r, 150));
    expect(inclusionSum(stored.db)).toBe(0);

    // A served call counts, as it should: the check above could fail.
    const out = await svc.client.assemble(request(t));
    expect(out.response?.degradation?.level).toBe('L0');
    expect(out.response?.memories_included).toBeGreaterThan(0);
    expect(await waitFor(() => inclusionSum(stored.db) > 0, 5_000)).toBe(true);
  } finally {
    await svc.stop();
    stored.close();
  }
});

it('warms on the agents an import adds after a start on an empty store, counting nothing', async () => {
  const stored = tempServiceStore();
  const sink = logSink();
  const svc = await startTestService(
    { IBEX_CONTEXT_EMBEDDED_DB: stored.db, IBEX_CONTEXT_INCLUSION_FLUSH_MS: '50' },
    { logger: createLogger({ logLevel: 'debug' }, sink.stream) },
  );
  try {
    expect(sink.lines.find((l) => l.msg === 'pipeline warmed on stored agents')).toMatchObject({ calls: 0 });
    // As `ingest` does, from another connection while the service runs.
    const t = tenant();
    stored.store.upsertMemories(memories(t.org, t.agent, 40));
    await expectQuietNewTenantWarmup(sink.lines, svc.service.adminUrl);
    await new Promise((r) => setTimeout(r, 150));
    expect(inclusionSum(stored.db)).toBe(0);

    const out = await svc.client.assemble(request(t));
    expect(out.response?.degradation?.level).toBe('L0');
    expect(await waitFor(() => inclusionSum(stored.db) > 0, 5_000)).toBe(true);
  } finally {
    await svc.stop();
    stored.close();
  }
});
