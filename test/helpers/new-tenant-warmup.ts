/** The new-tenant warm-up as a test sees it from outside the service (src/app/tenant-warmup.ts). */
import { expect } from 'vitest';
import { waitFor } from './wait.js';

/**
 * Waits (≤ 10 s) for the warm-up's debug line in `lines`, then checks that it warmed one agent with L0
 * answers and that `/metrics` at `adminUrl` counts no assembly.
 */
export async function expectQuietNewTenantWarmup(
  lines: Record<string, unknown>[],
  adminUrl: string,
): Promise<void> {
  const added = () => lines.find((l) => l.msg === 'pipeline warmed on newly stored agents');
  expect(await waitFor(() => added() !== undefined, 10_000)).toBe(true);
  expect(added()).toMatchObject({ agents: 1 });
  expect(added()?.l0).toBeGreaterThan(0);
  const metrics = await (await fetch(`${adminUrl}/metrics`)).text();
  expect(metrics).not.toMatch(/^ibex_context_assemblies_total\{/m);
}
