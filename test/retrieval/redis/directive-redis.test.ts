import { randomUUID } from 'node:crypto';
import net from 'node:net';
import { createClient } from 'redis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { freePort } from '../../../bench/lib/service-process.js';
import { directiveKey } from '../../../src/retrieval/directive.js';
import { RedisDirectiveSource } from '../../../src/retrieval/redis/directive-redis.js';
import type { MemorySource, RetrievalTimeouts } from '../../../src/retrieval/retrieve.js';
import { retrieve } from '../../../src/retrieval/retrieve.js';
import { describeRedis, probeRedis, REDIS_TEST_URL } from '../../helpers/redis.js';
import { bundle } from '../fixtures.js';

const reachable = await probeRedis();

/** Memory that answers nothing at once, so these tests are about the directive branch only. */
const noMemory: MemorySource = {
  hot: async () => [],
  search: async () => [],
  close: async () => {},
};
const t: RetrievalTimeouts = { wallMs: 500, directiveMs: 250, hotMs: 500, coldMs: 500 };
const signal = () => new AbortController().signal;

describeRedis('Redis directive store (contract.md §4.2)', reachable, () => {
  const org = randomUUID();
  const seeded: string[] = [];
  let admin: ReturnType<typeof createClient>;
  let source: RedisDirectiveSource;

  const seed = async (value: string | Buffer | object): Promise<string> => {
    const agent = randomUUID();
    const key = directiveKey(org, agent);
    seeded.push(key);
    await admin.set(key, typeof value === 'string' || Buffer.isBuffer(value) ? value : JSON.stringify(value));
    return agent;
  };
  const read = async (agent: string) => {
    const r = await retrieve(
      bundle(noMemory, source),
      { orgId: org, agentId: agent, query: 'q', skipHot: true, skipCold: true },
      t,
      signal(),
    );
    return { directive: r.directive, outcome: r.branches[0]! };
  };

  beforeAll(async () => {
    admin = createClient({ url: REDIS_TEST_URL });
    admin.on('error', () => {});
    await admin.connect();
    source = await RedisDirectiveSource.connect({ url: REDIS_TEST_URL });
    expect(source.isReady).toBe(true);
  });
  afterAll(async () => {
    if (seeded.length > 0) await admin.del(seeded);
    admin.destroy();
    await source.close();
  });

  it('reads a directive by its lower-case key, whatever the request case', async () => {
    const version = randomUUID();
    const agent = await seed({
      v: 1,
      content: 'Speak like a pirate.',
      injection_mode: 'user_prepend',
      version_id: version,
    });
    const r = await retrieve(
      bundle(noMemory, source),
      { orgId: org.toUpperCase(), agentId: agent.toUpperCase(), query: 'q', skipHot: true, skipCold: true },
      t,
      signal(),
    );
    expect(r.directive).toEqual({
      content: 'Speak like a pirate.',
      injection_mode: 'user_prepend',
      version_id: version,
    });
    expect(r.branches[0]).toMatchObject({ name: 'directive', status: 'success', detail: '' });
    expect(r.branches[0]!.latency_ms).toBeGreaterThan(0);
  });

  it.each([
    ['system_first', 'system_first'],
    ['system_append', 'system_append'],
    ['user_prepend', 'user_prepend'],
    ['', 'system_first'],
    ['  ', 'system_first'],
    ['assistant_first', 'system_first'],
  ])('mode %j ⇒ %s', async (mode, expected) => {
    const agent = await seed({ v: 1, content: 'x', injection_mode: mode, version_id: randomUUID() });
    const { directive, outcome } = await read(agent);
    expect(outcome.status).toBe('success');
    expect(directive?.injection_mode).toBe(expected);
  });

  it('missing key ⇒ success, no directive', async () => {
    const { directive, outcome } = await read(randomUUID());
    expect(directive).toBeNull();
    expect(outcome).toMatchObject({ status: 'success', detail: 'no directive' });
  });

  it('null, absent or empty content ⇒ success, no directive', async () => {
    for (const content of [null, undefined, '']) {
      const agent = await seed({ v: 1, content, injection_mode: 'system_first', version_id: randomUUID() });
      const { directive, outcome } = await read(agent);
      expect(directive).toBeNull();
      expect(outcome.status).toBe('success');
    }
  });

  it.each([
    ['not JSON', '{"v": 1, "content": ', 'bad directive: not JSON'],
    ['a JSON array', '[1, 2]', 'bad directive: not an object'],
    [
      'v = 2',
      { v: 2, content: 'x', injection_mode: '', version_id: randomUUID() },
      'bad directive: v must be 1',
    ],
    [
      'non-string content',
      { v: 1, content: 42, injection_mode: '', version_id: randomUUID() },
      'bad directive: content must be a string',
    ],
    [
      'non-string mode',
      { v: 1, content: 'x', injection_mode: null, version_id: randomUUID() },
      'bad directive: injection_mode must be a string',
    ],
    [
      'non-string version',
      { v: 1, content: 'x', injection_mode: '', version_id: 7 },
      'bad directive: version_id must be a string',
    ],
    [
      'version not a UUID',
      { v: 1, content: 'x', injection_mode: '', version_id: 'v-2024' },
      'bad directive: version_id must be a UUID',
    ],
    [
      'invalid UTF-8 bytes',
      Buffer.from([0x7b, 0x22, 0x76, 0x22, 0x3a, 0x31, 0xc3, 0x28, 0x7d]),
      'bad directive: not UTF-8',
    ],
  ])('%s ⇒ error', async (_name, value, detail) => {
    const agent = await seed(value as string | Buffer | object);
    const { directive, outcome } = await read(agent);
    expect(directive).toBeNull();
    expect(outcome).toMatchObject({ status: 'error', detail });
  });

  it('a key of the wrong type ⇒ error with the reply code only', async () => {
    const agent = randomUUID();
    const key = directiveKey(org, agent);
    seeded.push(key);
    await admin.rPush(key, 'x');
    const { outcome } = await read(agent);
    expect(outcome).toMatchObject({ status: 'error', detail: 'redis error (WRONGTYPE)' });
  });

  it('keeps UTF-8 text intact', async () => {
    const agent = await seed(
      Buffer.from(
        JSON.stringify({ v: 1, content: 'Grüße 👋 東京', injection_mode: '', version_id: randomUUID() }),
      ),
    );
    const { directive } = await read(agent);
    expect(directive?.content).toBe('Grüße 👋 東京');
  });
});

describe('Redis unavailable (no Redis needed)', () => {
  it('nothing listening: start-up does not hang, the branch records error quickly', async () => {
    const port = await freePort();
    const started = performance.now();
    const source = await RedisDirectiveSource.connect({
      url: `redis://127.0.0.1:${port}`,
      initialWaitMs: 200,
    });
    // Bounded by initialWaitMs, not by the reconnect loop (generous: a real-clock figure on a busy machine).
    expect(performance.now() - started).toBeLessThan(5000);
    expect(source.isReady).toBe(false);
    try {
      // Timeouts far away: `error`, not `timeout`, is what shows the read did not wait.
      const r = await retrieve(
        bundle(noMemory, source),
        { orgId: randomUUID(), agentId: randomUUID(), query: 'q', skipHot: false, skipCold: false },
        { wallMs: 10_000, directiveMs: 5_000, hotMs: 5_000, coldMs: 5_000 },
        signal(),
      );
      expect(r.branches[0]).toMatchObject({ status: 'error', detail: 'redis unavailable (offline)' });
      expect(r.branches[1]!.status).toBe('success');
    } finally {
      await source.close();
    }
  });

  it('a server that accepts and never answers: directive times out, retrieve keeps its wall', async () => {
    const sockets = new Set<net.Socket>();
    const mute = net.createServer((s) => {
      sockets.add(s);
      s.on('error', () => {});
    });
    await new Promise<void>((resolve) => mute.listen(0, '127.0.0.1', resolve));
    const port = (mute.address() as net.AddressInfo).port;
    const source = await RedisDirectiveSource.connect({
      url: `redis://127.0.0.1:${port}`,
      initialWaitMs: 100,
    });
    try {
      // A fake clock for the deadline logic: the directive's own 5 ms ends it.
      vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
      for (let i = 0; i < 3; i++) {
        const started = performance.now();
        const p = retrieve(
          bundle(noMemory, source),
          { orgId: randomUUID(), agentId: randomUUID(), query: 'q', skipHot: true, skipCold: true },
          { wallMs: 40, directiveMs: 5, hotMs: 15, coldMs: 45 },
          signal(),
        );
        await vi.advanceTimersByTimeAsync(5);
        const r = await p;
        expect(performance.now() - started).toBeLessThanOrEqual(5);
        expect(['error', 'timeout']).toContain(r.branches[0]!.status);
        expect(r.directive).toBeNull();
      }
    } finally {
      vi.useRealTimers();
      await source.close();
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => mute.close(() => resolve()));
    }
  });
});

/**
 * A RESP server that answers `+OK` to every command, PING included, until `silence()`: from then on the
 * open connections get nothing back and stay open (a half-open flow); new connections are answered again.
 */
async function startSilenceableRedis() {
  const open = new Set<net.Socket>();
  let connections = 0;
  let pings = 0;
  const server = net.createServer((s) => {
    connections++;
    const dead = { value: false };
    open.add(s);
    s.on('error', () => {});
    s.on('close', () => open.delete(s));
    (s as net.Socket & { dead?: typeof dead }).dead = dead;
    s.on('data', (d) => {
      if (dead.value) return;
      // One +OK per command (each starts with a `*` array header at the beginning of a line).
      const lines = d.toString('latin1').split('\r\n');
      pings += lines.filter((l) => l.toUpperCase() === 'PING').length;
      const n = lines.filter((l) => l.startsWith('*')).length;
      s.write('+OK\r\n'.repeat(n));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `redis://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    connections: () => connections,
    /** PING commands answered so far. */
    pings: () => pings,
    silence() {
      for (const s of open) (s as net.Socket & { dead?: { value: boolean } }).dead!.value = true;
    },
    async close() {
      for (const s of open) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

describe('half-open connection watchdog, on a fake clock', () => {
  it('a PING unanswered for 3 s (sent every 2 s) replaces the connection: 5 s after the flow died, under 10 s', async () => {
    const redis = await startSilenceableRedis();
    // Faked: the watchdog's interval and PING timeout; sockets (and node-redis's own timers) stay real.
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval', 'setTimeout', 'clearTimeout'] });
    const source = await RedisDirectiveSource.connect({ url: redis.url, initialWaitMs: 60_000 });
    try {
      expect(source.isReady).toBe(true);
      expect(redis.connections()).toBe(1);
      redis.silence();
      // The first PING goes out at 2 s and gets no answer; 3 s later (5 s) the connection is replaced.
      await vi.advanceTimersByTimeAsync(4999);
      // 50 ms of real time for a (wrong) early reconnect to reach the server.
      const until = Date.now() + 50;
      while (Date.now() < until) await new Promise((r) => setImmediate(r));
      expect(redis.connections()).toBe(1);
      await vi.advanceTimersByTimeAsync(1);
      const giveUp = Date.now() + 5000;
      while (redis.connections() < 2 && Date.now() < giveUp) await new Promise((r) => setImmediate(r));
      expect(redis.connections()).toBe(2);
      vi.useRealTimers();
      // And the new connection serves reads.
      const giveUpReady = Date.now() + 5000;
      while (!source.isReady && Date.now() < giveUpReady) await new Promise((r) => setTimeout(r, 10));
      expect(source.isReady).toBe(true);
    } finally {
      vi.useRealTimers();
      await source.close();
      await redis.close();
    }
  });

  it('a healthy connection answering every PING is never replaced (60 s of fake time)', async () => {
    const redis = await startSilenceableRedis();
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval', 'setTimeout', 'clearTimeout'] });
    const source = await RedisDirectiveSource.connect({ url: redis.url, initialWaitMs: 60_000 });
    try {
      for (let i = 1; i <= 30; i++) {
        await vi.advanceTimersByTimeAsync(2000);
        // The i-th PING is out; let its answer come back over the real socket before the clock moves on.
        const until = Date.now() + 50;
        while (redis.pings() < i || Date.now() < until) await new Promise((r) => setImmediate(r));
      }
      expect(redis.pings()).toBe(30);
      expect(redis.connections()).toBe(1);
      expect(source.isReady).toBe(true);
    } finally {
      vi.useRealTimers();
      await source.close();
      await redis.close();
    }
  });
});
