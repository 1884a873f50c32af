/**
 * Service settings from the environment (contract.md §3), validated once with zod; an invalid setting stops
 * start-up naming the variable. Variables are listed in docs/configuration.md.
 */

import { z } from 'zod';
import { Errors } from '../wire/errors.js';
import { DEFAULT_MAX_MEMORY_CHARS, MAX_ASSEMBLE_REQUEST_BYTES } from '../wire/limits.js';
import { loadRankingSettings, type RankingSettings } from './ranking-settings.js';
import { defaultThreadCounts } from './thread-sizing.js';
import { timeoutMsSchema } from './timeout.js';

/** Durations in ms, sizes as stated. */
export interface Settings {
  ranking: RankingSettings;
  /** Outer retrieval budget; also the default request deadline. */
  timeoutMs: number;
  deadlineMs: number;
  /** min(timeoutMs, deadlineMs). */
  wallMs: number;
  directiveTimeoutMs: number;
  hotTimeoutMs: number;
  coldTimeoutMs: number;
  /** "" = embedded store. */
  memoryBaseUrl: string;
  /** Secret, never logged. */
  memoryApiToken: string;
  memoryHttpThread: boolean;
  redisUrl: string;
  grpcAddr: string;
  adminAddr: string;
  dpCellCeiling: number;
  maxConsecutiveSkips: number;
  nonceBytes: number;
  maxMemoryChars: number;
  catalogFile: string;
  exactTokens: boolean;
  memoryDates: boolean;
  embeddedDb: string;
  /** Precedence: memory URL, then PostgreSQL, then embedded. */
  postgres: PostgresSettings;
  embeddedReadThreads: number;
  inclusions: InclusionSettings;
  pool: PoolSettings;
  shutdownGraceMs: number;
  cpuStageReserveMs: number;
  maxInFlight: number;
  maxReceiveMessageBytes: number;
  maxMetadataBytes: number;
  auth: AuthSettings;
  logLevel: string;
}

export interface PoolSettings {
  minThreads: number;
  maxThreads: number;
  maxQueue: number;
  idleTimeoutMs: number;
  maxOldGenerationMb: number;
  /** Text bytes from which a CPU task is large and leaves a thread free; 0 = no limit. */
  largeTaskBytes?: number;
}

/** 1 MiB, the size from which requests are large messages. */
export const LARGE_TASK_BYTES = 1024 * 1024;

export interface PostgresSettings {
  /** May hold a password: never logged. */
  url: string;
  schema: string;
  poolMax: number;
  poolMin: number;
  statementTimeoutMs: number;
  transactionPooler: boolean;
  listenUrl: string;
}

export interface InclusionSettings {
  flushMs: number;
  maxPending: number;
}

export interface AuthSettings {
  tlsCert: string;
  tlsKey: string;
  tlsClientCa: string;
  tokensFile: string;
  allowInsecure: boolean;
}

type Env = Record<string, string | undefined>;

function pick(env: Env, names: readonly string[]): { name: string; value: string | undefined } {
  for (const name of names) {
    const value = env[name];
    if (value !== undefined) return { name, value };
  }
  return { name: names[0]!, value: undefined };
}

function parseWith<T>(schema: z.ZodType<T>, env: Env, names: readonly string[], fallback: T): T {
  const { name, value } = pick(env, names);
  if (value === undefined) return fallback;
  const result = schema.safeParse(value);
  if (!result.success) throw Errors.config(name, result.error.issues[0]?.message ?? 'invalid value');
  return result.data;
}

const intText = (min: number, max = Number.MAX_SAFE_INTEGER) =>
  z
    .string()
    .trim()
    .regex(/^[+-]?\d+$/, 'must be an integer')
    .transform(Number)
    .pipe(z.number().int().min(min, `must be ≥ ${min}`).max(max, `must be ≤ ${max}`));

const boolText = z
  .string()
  .trim()
  .toLowerCase()
  .pipe(z.enum(['true', 'false', '1', '0', 'yes', 'no', '']))
  .transform((v) => v === 'true' || v === '1' || v === 'yes');

const addrText = z
  .string()
  .trim()
  .regex(/^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):\d{1,5}$/, 'must be host:port');

const urlText = z
  .string()
  .trim()
  .refine((v) => v === '' || URL.canParse(v), 'must be a URL or blank');

const text = z.string();

/** Also read on its own by the JSON CLI. @throws IbexError `IBEX_ERR_CONFIG` for a non-boolean word. */
export function exactTokensSetting(env: Env = process.env): boolean {
  return parseWith(boolText, env, ['IBEX_CONTEXT_EXACT_TOKENS'], false);
}
const pgUrlText = z
  .string()
  .trim()
  .refine(
    (v) => v === '' || (URL.canParse(v) && /^postgres(ql)?:$/.test(new URL(v).protocol)),
    'must be a postgres:// URL or blank',
  );

export const DEFAULT_GRPC_ADDR = '127.0.0.1:9092';
export const DEFAULT_ADMIN_ADDR = '127.0.0.1:9464';
/** Bare aliases (MEMORY_BASE_URL, MEMORY_API_TOKEN, REDIS_URL) are not read: one set for another tool moved the stores. */
export const MEMORY_API_TOKEN_VARS = ['IBEX_CONTEXT_MEMORY_API_TOKEN'] as const;

export function memoryApiTokenSetting(env: Env = process.env): string {
  return parseWith(text, env, MEMORY_API_TOKEN_VARS, '');
}

export function catalogFileSetting(env: Env = process.env): string {
  return parseWith(text, env, ['IBEX_CONTEXT_CATALOG_FILE'], '');
}

/** 70 × 6251 (contract.md §3). */
export const DEFAULT_DP_CELL_CEILING = 437_570;
export const DEFAULT_MAX_CONSECUTIVE_SKIPS = 5;
export const DEFAULT_NONCE_BYTES = 16;
export { DEFAULT_MAX_MEMORY_CHARS };

/** @throws IbexError `IBEX_ERR_CONFIG` whose message starts with the variable's name. */
export function loadSettings(env: Env = process.env): Settings {
  const timeoutMs = parseWith(timeoutMsSchema, env, ['IBEX_CONTEXT_TIMEOUT', 'IBEX_CONTEXT_TIMEOUT_MS'], 45);
  const deadlineMs = parseWith(timeoutMsSchema, env, ['IBEX_CONTEXT_DEADLINE_MS'], 40);
  const threads = defaultThreadCounts();
  const parallelism = threads.poolThreads;
  const maxThreads = parseWith(intText(1, 256), env, ['IBEX_CONTEXT_POOL_MAX_THREADS'], parallelism);
  const minThreads = parseWith(
    intText(0, 256),
    env,
    ['IBEX_CONTEXT_POOL_MIN_THREADS'],
    Math.min(maxThreads, parallelism),
  );
  if (minThreads > maxThreads) {
    throw Errors.config(
      'IBEX_CONTEXT_POOL_MIN_THREADS',
      `must be ≤ IBEX_CONTEXT_POOL_MAX_THREADS (${maxThreads})`,
    );
  }
  const memoryBaseUrl = parseWith(urlText, env, ['IBEX_CONTEXT_MEMORY_BASE_URL'], '');
  const memoryApiToken = memoryApiTokenSetting(env);
  if (memoryBaseUrl !== '' && memoryApiToken.trim() === '') {
    throw Errors.config('IBEX_CONTEXT_MEMORY_API_TOKEN', 'required when IBEX_CONTEXT_MEMORY_BASE_URL is set');
  }
  const settings: Settings = {
    ranking: loadRankingSettings(env),
    timeoutMs,
    deadlineMs,
    wallMs: Math.min(timeoutMs, deadlineMs),
    directiveTimeoutMs: parseWith(timeoutMsSchema, env, ['IBEX_CONTEXT_DIRECTIVE_TIMEOUT_MS'], 5),
    hotTimeoutMs: parseWith(timeoutMsSchema, env, ['IBEX_CONTEXT_HOT_TIMEOUT_MS'], 15),
    coldTimeoutMs: parseWith(timeoutMsSchema, env, ['IBEX_CONTEXT_COLD_TIMEOUT_MS'], 45),
    memoryBaseUrl: memoryBaseUrl.replace(/\/+$/, ''),
    memoryApiToken,
    memoryHttpThread: parseWith(boolText, env, ['IBEX_CONTEXT_MEMORY_HTTP_THREAD'], true),
    redisUrl: parseWith(urlText, env, ['IBEX_CONTEXT_REDIS_URL'], ''),
    grpcAddr: parseWith(addrText, env, ['IBEX_CONTEXT_GRPC_ADDR'], DEFAULT_GRPC_ADDR),
    adminAddr: parseWith(addrText, env, ['IBEX_CONTEXT_ADMIN_ADDR'], DEFAULT_ADMIN_ADDR),
    dpCellCeiling: parseWith(
      intText(1),
      env,
      ['IBEX_CONTEXT_PACKER_DP_CELL_CEILING'],
      DEFAULT_DP_CELL_CEILING,
    ),
    maxConsecutiveSkips: parseWith(
      intText(0),
      env,
      ['IBEX_CONTEXT_PACKER_MAX_CONSECUTIVE_SKIPS'],
      DEFAULT_MAX_CONSECUTIVE_SKIPS,
    ),
    nonceBytes: parseWith(intText(1, 64), env, ['IBEX_CONTEXT_FORMATTER_NONCE_BYTES'], DEFAULT_NONCE_BYTES),
    // ≤ 2^24: the body cap (limit × 6 bytes per code point) must stay far below what Node can buffer.
    maxMemoryChars: parseWith(
      intText(1, 16_777_216),
      env,
      ['IBEX_CONTEXT_MAX_MEMORY_CHARS'],
      DEFAULT_MAX_MEMORY_CHARS,
    ),
    catalogFile: catalogFileSetting(env),
    exactTokens: exactTokensSetting(env),
    memoryDates: parseWith(boolText, env, ['IBEX_CONTEXT_MEMORY_DATES'], false),
    embeddedDb: parseWith(text.trim().min(1), env, ['IBEX_CONTEXT_EMBEDDED_DB'], './var/ibex-context.db'),
    postgres: {
      url: parseWith(pgUrlText, env, ['IBEX_CONTEXT_POSTGRES_URL'], ''),
      schema: parseWith(
        z
          .string()
          .trim()
          .regex(/^[a-z_][a-z0-9_]{0,62}$/, 'must be a lower-case identifier'),
        env,
        ['IBEX_CONTEXT_POSTGRES_SCHEMA'],
        'ibex_context',
      ),
      poolMax: parseWith(intText(1, 256), env, ['IBEX_CONTEXT_POSTGRES_POOL_MAX'], 8),
      poolMin: parseWith(intText(0, 256), env, ['IBEX_CONTEXT_POSTGRES_POOL_MIN'], 4),
      statementTimeoutMs: parseWith(
        intText(1, 600_000),
        env,
        ['IBEX_CONTEXT_POSTGRES_STATEMENT_TIMEOUT_MS'],
        100,
      ),
      transactionPooler: parseWith(boolText, env, ['IBEX_CONTEXT_POSTGRES_TRANSACTION_POOLER'], false),
      listenUrl: parseWith(pgUrlText, env, ['IBEX_CONTEXT_POSTGRES_LISTEN_URL'], ''),
    },
    embeddedReadThreads: parseWith(
      intText(0, 16),
      env,
      ['IBEX_CONTEXT_EMBEDDED_READ_THREADS'],
      threads.storeReadThreads,
    ),
    inclusions: {
      flushMs: parseWith(timeoutMsSchema, env, ['IBEX_CONTEXT_INCLUSION_FLUSH_MS'], 10_000),
      maxPending: parseWith(intText(1, 10_000_000), env, ['IBEX_CONTEXT_INCLUSION_MAX_PENDING'], 50_000),
    },
    pool: {
      minThreads,
      maxThreads,
      maxQueue: parseWith(intText(0), env, ['IBEX_CONTEXT_POOL_MAX_QUEUE'], maxThreads * 64),
      idleTimeoutMs: parseWith(timeoutMsSchema, env, ['IBEX_CONTEXT_POOL_IDLE_TIMEOUT_MS'], 30_000),
      maxOldGenerationMb: parseWith(
        intText(16, 65_536),
        env,
        ['IBEX_CONTEXT_POOL_MAX_OLD_GENERATION_MB'],
        256,
      ),
      largeTaskBytes: parseWith(intText(0), env, ['IBEX_CONTEXT_POOL_LARGE_TASK_BYTES'], LARGE_TASK_BYTES),
    },
    shutdownGraceMs: parseWith(timeoutMsSchema, env, ['IBEX_CONTEXT_SHUTDOWN_GRACE_MS'], 10_000),
    cpuStageReserveMs: parseWith(timeoutMsSchema, env, ['IBEX_CONTEXT_CPU_STAGE_RESERVE_MS'], 5),
    maxInFlight: parseWith(intText(1), env, ['IBEX_CONTEXT_MAX_IN_FLIGHT'], 128),
    maxReceiveMessageBytes: parseWith(
      intText(1024),
      env,
      ['IBEX_CONTEXT_MAX_RECEIVE_MESSAGE_BYTES'],
      MAX_ASSEMBLE_REQUEST_BYTES,
    ),
    maxMetadataBytes: parseWith(intText(1024), env, ['IBEX_CONTEXT_MAX_METADATA_BYTES'], 16 * 1024),
    auth: {
      tlsCert: parseWith(text, env, ['IBEX_CONTEXT_TLS_CERT'], ''),
      tlsKey: parseWith(text, env, ['IBEX_CONTEXT_TLS_KEY'], ''),
      tlsClientCa: parseWith(text, env, ['IBEX_CONTEXT_TLS_CLIENT_CA'], ''),
      tokensFile: parseWith(text, env, ['IBEX_CONTEXT_AUTH_TOKENS_FILE'], ''),
      allowInsecure: parseWith(boolText, env, ['IBEX_CONTEXT_ALLOW_INSECURE'], false),
    },
    logLevel: parseWith(
      z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']),
      env,
      ['IBEX_CONTEXT_LOG_LEVEL'],
      'info',
    ),
  };
  return settings;
}
