/**
 * End-to-end harness: the real service (pool, retrieval, gRPC) started in-process on loopback port 0
 * with a temp embedded store, and a real gRPC client.
 */
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import { type RunningService, type StartOptions, startService } from '../../src/app/service.js';
import { loadSettings, type Settings } from '../../src/config/settings.js';
import { EmbeddedStore, type MemoryRow } from '../../src/retrieval/sqlite/embedded-store.js';
import { createLogger } from '../../src/telemetry/logger.js';
import type { AssembleContextRequestInput } from '../../src/wire/proto.js';
import { createTestClient, type TestClient } from '../helpers/grpc-client.js';

/** A running service with its client and store. */
export interface TestService {
  service: RunningService;
  client: TestClient;
  settings: Settings;
  /** The embedded store file (memories + directives when no URLs are set). */
  store: EmbeddedStore;
  dir: string;
  stop(): Promise<void>;
}

/**
 * Generous deadlines by default: tests run in parallel on two cores, and only the deadline tests should
 * depend on timing. Pass `IBEX_CONTEXT_TIMEOUT` / `IBEX_CONTEXT_DEADLINE_MS` to test those.
 */
const BASE_ENV: Record<string, string> = {
  IBEX_CONTEXT_GRPC_ADDR: '127.0.0.1:0',
  IBEX_CONTEXT_ADMIN_ADDR: '127.0.0.1:0',
  IBEX_CONTEXT_TIMEOUT: '2000',
  IBEX_CONTEXT_DEADLINE_MS: '400',
  IBEX_CONTEXT_HOT_TIMEOUT_MS: '300',
  IBEX_CONTEXT_COLD_TIMEOUT_MS: '400',
  IBEX_CONTEXT_DIRECTIVE_TIMEOUT_MS: '300',
  IBEX_CONTEXT_POOL_MIN_THREADS: '1',
  IBEX_CONTEXT_POOL_MAX_THREADS: '2',
  IBEX_CONTEXT_LOG_LEVEL: 'silent',
};

/**
 * Starts the service with `env` over the base test environment; `opts` adds start options (tracing,
 * interceptors, a logger of the test's own).
 */
export async function startTestService(
  env: Record<string, string> = {},
  opts: Partial<StartOptions> = {},
): Promise<TestService> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ibex-e2e-'));
  const db = path.join(dir, 'store.db');
  const settings = loadSettings({ ...BASE_ENV, IBEX_CONTEXT_EMBEDDED_DB: db, ...env });
  const store = EmbeddedStore.open(db);
  const service = await startService(settings, { logger: createLogger(settings), ...opts });
  const client = createTestClient(service.grpcAddr);
  return {
    service,
    client,
    settings,
    store,
    dir,
    async stop() {
      client.close();
      await service.stop(1000);
      store.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * One test service for the enclosing `describe` (or file): started by `beforeAll` with `env` over the base
 * test environment, stopped by `afterAll`.
 * @returns the service; it throws if called before `beforeAll` has run.
 */
export function useTestService(env: Record<string, string> = {}): () => TestService {
  let svc: TestService | undefined;
  beforeAll(async () => {
    svc = await startTestService(env);
  });
  afterAll(async () => {
    await svc?.stop();
  });
  return () => {
    if (!svc) throw new Error('the test service starts in beforeAll: call the getter inside a test');
    return svc;
  };
}

/**
 * Deadlines for a test service whose outcomes, not speed, are under test (the suite shares two cores):
 * `totalMs` for the request (IBEX_CONTEXT_TIMEOUT), `branchMs` for the retrieval wall and the hot and
 * cold branches, and for the directive branch too when `directive` is set.
 */
export function roomyDeadlines(
  totalMs: number,
  branchMs: number,
  { directive = false } = {},
): Record<string, string> {
  const b = String(branchMs);
  return {
    IBEX_CONTEXT_TIMEOUT: String(totalMs),
    IBEX_CONTEXT_DEADLINE_MS: b,
    IBEX_CONTEXT_HOT_TIMEOUT_MS: b,
    IBEX_CONTEXT_COLD_TIMEOUT_MS: b,
    ...(directive ? { IBEX_CONTEXT_DIRECTIVE_TIMEOUT_MS: b } : {}),
  };
}

/** A pool of exactly `threads` workers (min = max) whose queue holds `queue` tasks. */
export function fixedPool(threads: number, queue: number): Record<string, string> {
  return {
    IBEX_CONTEXT_POOL_MIN_THREADS: String(threads),
    IBEX_CONTEXT_POOL_MAX_THREADS: String(threads),
    IBEX_CONTEXT_POOL_MAX_QUEUE: String(queue),
  };
}

/** The settings that point a service at the memory HTTP service at `url` with bearer `token`. */
export function memoryService(url: string, token: string): Record<string, string> {
  return { IBEX_CONTEXT_MEMORY_BASE_URL: url, IBEX_CONTEXT_MEMORY_API_TOKEN: token };
}

/**
 * A test service reading memories from the memory HTTP service at `url` (often a test's own server) with
 * bearer `token`, under {@link roomyDeadlines}`(totalMs, branchMs)`, plus `env`.
 */
export function startServiceOverMemory(
  url: string,
  token: string,
  [totalMs, branchMs]: [number, number],
  env: Record<string, string> = {},
): Promise<TestService> {
  return startTestService({ ...memoryService(url, token), ...roomyDeadlines(totalMs, branchMs), ...env });
}

/** An embedded store in a new temp dir (`store.db`), for a service to read; `close()` removes it all. */
export function tempServiceStore(prefix = 'ibex-e2e-'): { store: EmbeddedStore; db: string; close(): void } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  const db = path.join(dir, 'store.db');
  const store = EmbeddedStore.open(db);
  return {
    store,
    db,
    close() {
      store.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A new tenant: org and agent ids. */
export function tenant(): { org: string; agent: string } {
  return { org: randomUUID(), agent: randomUUID() };
}

/** `n` memories of one org+agent mentioning `topic`, newest last. */
export function memories(org: string, agent: string, n: number, topic = 'sailing', size = 1): MemoryRow[] {
  return Array.from({ length: n }, (_, i) => ({
    id: randomUUID(),
    org_id: org,
    agent_id: agent,
    content: `${`memory ${i} about ${topic} and the lake. `.repeat(size)}`.trim(),
    category: ['procedural', 'factual', 'preference', 'behavioral', 'episodic', 'misc'][i % 6]!,
    confidence: 0.5 + (i % 5) / 10,
    created_at: Date.UTC(2025, 0, 1) + i * 60_000,
  }));
}

/** A valid request for a tenant. */
export function request(
  t: { org: string; agent: string },
  extra: Partial<AssembleContextRequestInput> = {},
): AssembleContextRequestInput {
  return {
    org_id: t.org,
    agent_id: t.agent,
    model: 'gpt-4o',
    query: 'sailing',
    recent_messages: [
      { role: 'user', content: 'Do you remember the lake?' },
      { role: 'assistant', content: 'Yes.' },
    ],
    request_id: 'req-1',
    trace_id: 'trace-1',
    span_id: 'span-1',
    ...extra,
  };
}
