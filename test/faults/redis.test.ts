/**
 * Redis directives: down, slow, garbage. The directive never changes the level (contract.md
 * §10), so each case checks that the call is answered at L0 with its memories and the directive branch
 * says `error` / `timeout`, that a concurrent call of another agent is answered in full, that a normal
 * call afterwards is fine, and that `ibex_context_branch_outcomes_total{branch="directive"}` counted it.
 *
 * "Slow" and protocol-level garbage use a fake Redis on loopback (a real `CLIENT PAUSE` would stall every
 * other test using the shared Redis); garbage *values* also run against the real Redis (REDIS_URL) under
 * the availability rule of test/helpers/redis.ts.
 */
import { randomUUID } from 'node:crypto';
import net from 'node:net';
import { status } from '@grpc/grpc-js';
import { createClient } from 'redis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { memories, request, startTestService, type TestService, tenant } from '../e2e/harness.js';
import { closedPort } from '../helpers/closed-port.js';
import { describeRedis, probeRedis, REDIS_TEST_URL } from '../helpers/redis.js';
import { type FakeRedis, moved, scrape, startFakeRedis } from './helpers.js';

const N = 4;
/**
 * Directive timeout (1 s) far from every injected stall (≥ 2.5 s, or for ever; under the 3 s watchdog PING timeout) and from a healthy read, so
 * that a loaded machine cannot flip an outcome; wall and deadline leave it room.
 */
const FAR_TIMEOUTS = {
  IBEX_CONTEXT_DIRECTIVE_TIMEOUT_MS: '1000',
  IBEX_CONTEXT_HOT_TIMEOUT_MS: '2000',
  IBEX_CONTEXT_COLD_TIMEOUT_MS: '2000',
  IBEX_CONTEXT_DEADLINE_MS: '2500',
  IBEX_CONTEXT_TIMEOUT: '4000',
};
const keyOf = (t: { org: string; agent: string }) => `${t.org}:directive:${t.agent}`;
const envelope = (content: string) =>
  JSON.stringify({ v: 1, content, injection_mode: 'system_first', version_id: randomUUID() });

/** Two tenants with memories in the service's embedded store. */
function seed(svc: TestService) {
  const victim = tenant();
  const other = tenant();
  svc.store.upsertMemories(memories(victim.org, victim.agent, N));
  svc.store.upsertMemories(memories(other.org, other.agent, N));
  return { victim, other };
}

/**
 * The shared expectations: answered, L0, memories intact, directive branch as given; a directive that
 * failed or timed out is named in `reasons` and sets `x-ibex-context-degraded: true` (contract.md §10).
 */
function expectAnswered(
  r: Awaited<ReturnType<TestService['client']['assemble']>>,
  directive: { status: string; detail?: RegExp },
) {
  expect(r.status.code, r.status.details).toBe(status.OK);
  const res = r.response!;
  expect(res.degradation.level).toBe('L0');
  expect(r.metadata.get('x-ibex-context-level')).toEqual(['L0']);
  expect(res.memories_included).toBe(N);
  expect(res.degradation.branches[0]!.status).toBe(directive.status);
  if (directive.detail) expect(res.degradation.branches[0]!.detail).toMatch(directive.detail);
  if (directive.status === 'success') {
    expect(res.degradation.reasons).toEqual([]);
    expect(r.metadata.get('x-ibex-context-degraded')).toEqual(['false']);
  } else {
    expect(res.degradation.reasons.map((x) => x.split(':')[0])).toEqual([`directive_${directive.status}`]);
    expect(r.metadata.get('x-ibex-context-degraded')).toEqual(['true']);
    expect(res.assembled_context).not.toContain('Only treat content inside');
  }
}

type Tenant = ReturnType<typeof tenant>;

/** The victim's and the other's calls at once: the victim's directive fails with `detail`, the other is served. */
async function victimBesideOther(svc: TestService, victim: Tenant, other: Tenant, detail: RegExp) {
  const [a, b] = await Promise.all([victim, other].map((t) => svc.client.assemble(request(t))));
  expectAnswered(a!, { status: 'error', detail });
  expectAnswered(b!, { status: 'success' });
  expect(b!.response!.assembled_context.startsWith('Other directive.\n')).toBe(true);
}

describe('Redis down (nothing listening)', () => {
  let svc: TestService;

  beforeAll(async () => {
    svc = await startTestService({
      IBEX_CONTEXT_REDIS_URL: `redis://127.0.0.1:${await closedPort()}`,
      ...FAR_TIMEOUTS,
    });
  });
  afterAll(async () => {
    await svc?.stop();
  });

  it('⇒ directive error, level unchanged, every call answered, and counted', async () => {
    const { victim, other } = seed(svc);
    const before = await scrape(svc.service.adminUrl);
    const [a, b] = await Promise.all([
      svc.client.assemble(request(victim)),
      svc.client.assemble(request(other)),
    ]);
    // No offline queue: the read fails at once (`error`, offline/closed) instead of waiting out the
    // directive timeout (which would say `timeout`).
    for (const r of [a, b]) expectAnswered(r, { status: 'error', detail: /^redis unavailable \(/ });
    const next = await svc.client.assemble(request(victim));
    expectAnswered(next, { status: 'error', detail: /^redis unavailable \(/ });
    const after = await scrape(svc.service.adminUrl);
    expect(
      moved(before, after, 'ibex_context_branch_outcomes_total', { branch: 'directive', status: 'error' }),
    ).toBe(3);
    expect(moved(before, after, 'ibex_context_assemblies_total', { level: 'L0', code: 'OK' })).toBe(3);
    expect(
      moved(before, after, 'ibex_context_degraded_total', { level: 'L0', reason: 'directive_error' }),
    ).toBe(3);
  });
});

describe('fake Redis: slow and garbage replies', () => {
  let redis: FakeRedis;
  let svc: TestService;

  beforeAll(async () => {
    redis = await startFakeRedis();
    svc = await startTestService({ IBEX_CONTEXT_REDIS_URL: redis.redisUrl, ...FAR_TIMEOUTS });
  });
  afterAll(async () => {
    await svc?.stop();
    await redis?.close();
  });

  it('slow (a GET stalls 2.5 s) ⇒ directive timeout, level unchanged; replies stay matched afterwards', async () => {
    const { victim, other } = seed(svc);
    redis.set(keyOf(victim), { stallMs: 2500, answer: { value: envelope('Victim directive.') } });
    redis.set(keyOf(other), { value: envelope('Other directive.') });
    const before = await scrape(svc.service.adminUrl);
    const [a, b] = await Promise.all([
      svc.client.assemble(request(victim)),
      svc.client.assemble(request(other)),
    ]);
    expectAnswered(a, { status: 'timeout', detail: /^directive_timeout$/ });
    // Ended by the directive timeout, not by the stall.
    expect(a.response!.degradation.branches[0]!.latency_ms).toBeLessThan(2500);
    // One connection, replies in order: a GET sent behind the stalled one waits too (timeout), or went
    // first (success). Either way the call is whole.
    expect(['success', 'timeout']).toContain(b.response!.degradation.branches[0]!.status);
    expectAnswered(b, { status: b.response!.degradation.branches[0]!.status });
    // After the stall the late replies are discarded, not handed to the next GETs: each agent gets its own.
    await new Promise((r) => setTimeout(r, 2600));
    redis.set(keyOf(victim), { value: envelope('Victim directive.') });
    for (const [t, text] of [
      [other, 'Other directive.'],
      [victim, 'Victim directive.'],
      [other, 'Other directive.'],
    ] as const) {
      const r = await svc.client.assemble(request(t));
      expectAnswered(r, { status: 'success' });
      expect(r.response!.assembled_context.startsWith(`${text}\n`)).toBe(true);
    }
    const after = await scrape(svc.service.adminUrl);
    expect(
      moved(before, after, 'ibex_context_branch_outcomes_total', { branch: 'directive', status: 'timeout' }),
    ).toBeGreaterThanOrEqual(1);
    expect(moved(before, after, 'ibex_context_assemblies_total', { level: 'L0', code: 'OK' })).toBe(5);
  });

  it.each([
    ['not UTF-8', { value: Buffer.from([0xff, 0xfe, 0x7b, 0x7d]) }, /^bad directive: /],
    ['not JSON', { value: 'garbage <<<' }, /^bad directive: /],
    ['a JSON array', { value: '[1,2,3]' }, /^bad directive: /],
    [
      'v = 2',
      { value: JSON.stringify({ v: 2, content: 'x', injection_mode: '', version_id: randomUUID() }) },
      /^bad directive: /,
    ],
    [
      'an error reply',
      { raw: '-WRONGTYPE Operation against a key holding the wrong kind of value\r\n' },
      /^redis error \(WRONGTYPE\)$/,
    ],
    ['an integer reply', { raw: ':42\r\n' }, /^bad directive: not a string value$/],
  ] as const)(
    'garbage (%s) ⇒ directive error, level unchanged, the other agent served',
    async (_what, answer, detail) => {
      const { victim, other } = seed(svc);
      redis.set(keyOf(victim), answer);
      redis.set(keyOf(other), { value: envelope('Other directive.') });
      const before = await scrape(svc.service.adminUrl);
      await victimBesideOther(svc, victim, other, detail);
      redis.set(keyOf(victim), { value: envelope('Victim directive.') });
      const next = await svc.client.assemble(request(victim));
      expectAnswered(next, { status: 'success' });
      expect(next.response!.assembled_context.startsWith('Victim directive.\n')).toBe(true);
      const after = await scrape(svc.service.adminUrl);
      expect(
        moved(before, after, 'ibex_context_branch_outcomes_total', { branch: 'directive', status: 'error' }),
      ).toBe(1);
      expect(
        moved(before, after, 'ibex_context_branch_outcomes_total', {
          branch: 'directive',
          status: 'success',
        }),
      ).toBe(2);
    },
  );

  // Regression: node-redis resets its decoder on a bad type byte but kept the connection and the
  // commands waiting on it, so from then on every GET got the reply of the GET before it — under
  // concurrency, another agent's directive, for good.
  it('a corrupt reply stream ⇒ that read fails, the connection is replaced, nobody gets another agent’s directive', async () => {
    const { victim, other } = seed(svc);
    const third = tenant();
    svc.store.upsertMemories(memories(third.org, third.agent, N));
    redis.set(keyOf(victim), { raw: '?garbage\r\n' });
    redis.set(keyOf(other), { value: envelope('Other directive.') });
    redis.set(keyOf(third), { value: envelope('Third directive.') });
    const before = await scrape(svc.service.adminUrl);
    const bad = await svc.client.assemble(request(victim));
    expectAnswered(bad, { status: 'error', detail: /^redis unavailable \(closed\)$/ });
    redis.set(keyOf(victim), { value: envelope('Victim directive.') });
    const own = new Map([
      [other.agent, 'Other directive.'],
      [third.agent, 'Third directive.'],
      [victim.agent, 'Victim directive.'],
    ]);
    let served = 0;
    for (let round = 0; round < 10; round++) {
      const batch = await Promise.all(
        [other, third, victim].map((t) => svc.client.assemble(request(t)).then((r) => ({ t, r }))),
      );
      for (const { t, r } of batch) {
        expect(r.status.code).toBe(status.OK);
        const res = r.response!;
        for (const [agent, text] of own) {
          if (agent !== t.agent) expect(res.assembled_context).not.toContain(text);
        }
        if (res.degradation.branches[0]!.status === 'success') {
          expect(res.assembled_context.startsWith(`${own.get(t.agent)}\n`)).toBe(true);
          served++;
        }
      }
    }
    // Reconnected: the reads succeed again (all but the first round or so).
    expect(served).toBeGreaterThanOrEqual(24);
    const after = await scrape(svc.service.adminUrl);
    expect(moved(before, after, 'ibex_context_assemblies_total', { level: 'L0', code: 'OK' })).toBe(31);
  });
});

const redisUp = await probeRedis();

describeRedis('real Redis: garbage values', redisUp, () => {
  let svc: TestService;
  const redis = createClient({ url: REDIS_TEST_URL });
  const keys: string[] = [];

  beforeAll(async () => {
    await redis.connect();
    svc = await startTestService({ IBEX_CONTEXT_REDIS_URL: REDIS_TEST_URL, ...FAR_TIMEOUTS });
  });
  afterAll(async () => {
    if (keys.length) await redis.del(keys);
    await redis.quit();
    await svc?.stop();
  });

  it.each([
    ['not UTF-8', Buffer.from([0xc3, 0x28, 0xa0, 0xa1]), /^bad directive: /],
    ['not JSON', 'not json at all', /^bad directive: /],
    ['a JSON string', '"just a string"', /^bad directive: /],
    [
      'a bad version uuid',
      JSON.stringify({ v: 1, content: 'x', injection_mode: '', version_id: 'v1' }),
      /^bad directive: /,
    ],
    ['a list (WRONGTYPE)', null, /^redis error \(WRONGTYPE\)$/],
  ] as const)(
    'garbage (%s) ⇒ directive error, level unchanged, the other agent served',
    async (_what, value, detail) => {
      const { victim, other } = seed(svc);
      keys.push(keyOf(victim), keyOf(other));
      if (value === null) await redis.rPush(keyOf(victim), ['a', 'b']);
      else await redis.set(keyOf(victim), value);
      await redis.set(keyOf(other), envelope('Other directive.'));
      const before = await scrape(svc.service.adminUrl);
      await victimBesideOther(svc, victim, other, detail);
      await redis.del(keyOf(victim));
      await redis.set(keyOf(victim), envelope('Victim directive.'));
      const next = await svc.client.assemble(request(victim));
      expectAnswered(next, { status: 'success' });
      const after = await scrape(svc.service.adminUrl);
      expect(
        moved(before, after, 'ibex_context_branch_outcomes_total', { branch: 'directive', status: 'error' }),
      ).toBe(1);
    },
  );
});

/**
 * A TCP proxy to Redis whose open flows can be cut the way a NAT or load balancer forgets them: the
 * sockets stay open, nothing is forwarded any more in either direction, nothing is closed. New
 * connections are forwarded normally.
 */
async function startBlackholeProxy(target: URL) {
  const flows = new Set<{ client: net.Socket; upstream: net.Socket; dead: boolean }>();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port || 6379), target.hostname);
    const flow = { client, upstream, dead: false };
    flows.add(flow);
    client.on('error', () => {});
    upstream.on('error', () => {});
    client.on('data', (d) => {
      if (!flow.dead) upstream.write(d);
    });
    upstream.on('data', (d) => {
      if (!flow.dead) client.write(d);
    });
    client.on('close', () => upstream.destroy());
    upstream.on('close', () => {
      if (!flow.dead) client.destroy();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as net.AddressInfo).port;
  return {
    url: `redis://127.0.0.1:${port}`,
    /** Stops forwarding every open flow without closing it; returns how many there were. */
    blackhole(): number {
      let n = 0;
      for (const f of flows) {
        if (f.dead || f.client.destroyed) continue;
        f.dead = true;
        n++;
      }
      return n;
    },
    /** Open flows still forwarding. */
    live: () => [...flows].filter((f) => !f.dead && !f.client.destroyed).length,
    async close() {
      for (const f of flows) {
        f.client.destroy();
        f.upstream.destroy();
      }
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

describeRedis('half-open Redis connection', redisUp, () => {
  let svc: TestService;
  let proxy: Awaited<ReturnType<typeof startBlackholeProxy>>;
  const redis = createClient({ url: REDIS_TEST_URL });
  const keys: string[] = [];

  beforeAll(async () => {
    await redis.connect();
    proxy = await startBlackholeProxy(new URL(REDIS_TEST_URL));
    svc = await startTestService({ IBEX_CONTEXT_REDIS_URL: proxy.url, ...FAR_TIMEOUTS });
  });
  afterAll(async () => {
    if (keys.length) await redis.del(keys);
    await redis.quit();
    await svc?.stop();
    await proxy?.close();
  });

  // Real time: the ping timer and node-redis's command timeout (AbortSignal.timeout) are not fakeable.
  // With the defaults (PING every 2 s, 3 s command timeout) the flow is replaced in ≈ 5 s.
  it('a flow that stops forwarding ⇒ directive_timeout in reasons, degraded true, level L0; replaced within 10 s', async () => {
    const { victim } = seed(svc);
    keys.push(keyOf(victim));
    await redis.set(keyOf(victim), envelope('Victim directive.'));
    const ok = await svc.client.assemble(request(victim));
    expectAnswered(ok, { status: 'success' });
    expect(ok.response!.assembled_context.startsWith('Victim directive.\n')).toBe(true);

    expect(proxy.blackhole()).toBe(1);
    const cutAt = performance.now();
    const missing = await svc.client.assemble(request(victim));
    expectAnswered(missing, { status: 'timeout', detail: /^directive_timeout$/ });
    expect(missing.response!.degradation.reasons).toEqual(['directive_timeout:directive_timeout']);

    let recoveredAfter = Number.POSITIVE_INFINITY;
    while (performance.now() - cutAt < 15_000) {
      await new Promise((r) => setTimeout(r, 250));
      const r = await svc.client.assemble(request(victim));
      if (r.response?.degradation.branches[0]?.status === 'success') {
        recoveredAfter = performance.now() - cutAt;
        expectAnswered(r, { status: 'success' });
        expect(r.response.assembled_context.startsWith('Victim directive.\n')).toBe(true);
        break;
      }
      // Until then every answer says the directive is missing.
      expectAnswered(r, { status: r.response!.degradation.branches[0]!.status });
    }
    expect(recoveredAfter).toBeLessThan(10_000);
    // On a new connection through the proxy, not the dead one.
    expect(proxy.live()).toBe(1);
  }, 30_000);
});
