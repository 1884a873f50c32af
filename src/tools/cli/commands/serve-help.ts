// `ibex-context serve --help`: the variables the service reads, found by running `loadSettings` over a
// recording empty environment, so a new setting shows up here and in docs/configuration.md by itself.
import os from 'node:os';
import { SERVICE_NODE_FLAGS } from '../../../config/node-flags.js';
import { loadSettings, type Settings } from '../../../config/settings.js';

/** Every variable name `loadSettings` reads, in order (aliases included). */
export function settingNames(): string[] {
  const seen: string[] = [];
  const recorder = new Proxy<Record<string, string | undefined>>(
    {},
    {
      get(_target, key) {
        if (typeof key === 'string' && !seen.includes(key)) seen.push(key);
        return undefined;
      },
    },
  );
  loadSettings(recorder);
  return seen;
}

/** What one variable means, and its default as the code computes it from the defaults. */
interface SettingDoc {
  meaning: string;
  default: (s: Settings) => string;
}

const ms = (v: number) => `${v} ms`;
const quoted = (v: string) => (v === '' ? '""' : v);

/** Meaning and default of each variable; aliases point at the `IBEX_CONTEXT_*` name they stand for. */
export const SETTING_DOCS: Record<string, SettingDoc | { aliasOf: string }> = {
  IBEX_CONTEXT_TIMEOUT: {
    meaning: 'outer retrieval budget and the cap of every call',
    default: (s) => ms(s.timeoutMs),
  },
  IBEX_CONTEXT_TIMEOUT_MS: { aliasOf: 'IBEX_CONTEXT_TIMEOUT' },
  IBEX_CONTEXT_DEADLINE_MS: {
    meaning: 'retrieval wall; effective = min(TIMEOUT, DEADLINE_MS)',
    default: (s) => ms(s.deadlineMs),
  },
  IBEX_CONTEXT_POOL_MAX_THREADS: {
    meaning: 'CPU-stage worker threads at most (more than the cores only adds switches)',
    default: (s) => `${s.pool.maxThreads} (the cores)`,
  },
  IBEX_CONTEXT_POOL_MIN_THREADS: {
    meaning: 'worker threads kept warm, all started before SERVING',
    default: (s) => `${s.pool.minThreads} (min(max threads, cores))`,
  },
  IBEX_CONTEXT_MEMORY_BASE_URL: {
    meaning: 'memory service origin; blank = embedded store',
    default: (s) => quoted(s.memoryBaseUrl),
  },
  IBEX_CONTEXT_MEMORY_API_TOKEN: {
    meaning: 'memory service bearer token (required with the URL)',
    default: () => '""',
  },
  IBEX_CONTEXT_DIRECTIVE_TIMEOUT_MS: {
    meaning: 'directive branch timeout',
    default: (s) => ms(s.directiveTimeoutMs),
  },
  IBEX_CONTEXT_HOT_TIMEOUT_MS: { meaning: 'hot memory branch timeout', default: (s) => ms(s.hotTimeoutMs) },
  IBEX_CONTEXT_COLD_TIMEOUT_MS: {
    meaning: 'cold search branch timeout',
    default: (s) => ms(s.coldTimeoutMs),
  },
  IBEX_CONTEXT_REDIS_URL: {
    meaning: 'Redis directive store; blank = embedded directives',
    default: (s) => quoted(s.redisUrl),
  },
  IBEX_CONTEXT_GRPC_ADDR: { meaning: 'gRPC listen address (host:port)', default: (s) => s.grpcAddr },
  IBEX_CONTEXT_ADMIN_ADDR: {
    meaning: 'admin HTTP: /metrics, /healthz, /readyz',
    default: (s) => s.adminAddr,
  },
  IBEX_CONTEXT_PACKER_DP_CELL_CEILING: {
    meaning: 'DP table ceiling in cells (contract.md §8)',
    default: (s) => String(s.dpCellCeiling),
  },
  IBEX_CONTEXT_PACKER_MAX_CONSECUTIVE_SKIPS: {
    meaning: 'greedy fallback skip limit',
    default: (s) => String(s.maxConsecutiveSkips),
  },
  IBEX_CONTEXT_FORMATTER_NONCE_BYTES: {
    meaning: 'nonce entropy in bytes (1..64)',
    default: (s) => String(s.nonceBytes),
  },
  IBEX_CONTEXT_CATALOG_FILE: {
    meaning: 'capability catalog override file',
    default: (s) => quoted(s.catalogFile),
  },
  IBEX_CONTEXT_EXACT_TOKENS: {
    meaning: 'exact BPE counts for o200k_base / cl100k_base (contract.md §5)',
    default: (s) => String(s.exactTokens),
  },
  IBEX_CONTEXT_MEMORY_DATES: {
    meaning: 'each memory block carries its date (created_at, ISO date) as a date attribute',
    default: (s) => String(s.memoryDates),
  },
  IBEX_CONTEXT_MAX_MEMORY_CHARS: {
    meaning: 'longest memory kept, code points; longer hits dropped as oversize',
    default: (s) => String(s.maxMemoryChars),
  },
  IBEX_CONTEXT_MEMORY_HTTP_THREAD: {
    meaning: 'memory calls of orgs with large bodies in a thread (false = all on the loop)',
    default: (s) => String(s.memoryHttpThread),
  },
  IBEX_CONTEXT_EMBEDDED_DB: { meaning: 'embedded SQLite store', default: (s) => s.embeddedDb },
  IBEX_CONTEXT_EMBEDDED_READ_THREADS: {
    meaning: 'threads running FTS5 searches (0 = event loop)',
    default: (s) => `${s.embeddedReadThreads} (one per 4 cores, ≥ 1)`,
  },
  IBEX_CONTEXT_INCLUSION_FLUSH_MS: {
    meaning: 'interval between writes of counted inclusions (the frequency term), one statement per 500',
    default: (s) => ms(s.inclusions.flushMs),
  },
  IBEX_CONTEXT_INCLUSION_MAX_PENDING: {
    meaning: 'most distinct memories counted between writes; past it inclusions are dropped and counted',
    default: (s) => String(s.inclusions.maxPending),
  },
  IBEX_CONTEXT_POSTGRES_URL: {
    meaning: 'PostgreSQL store shared by replicas; blank = off (never logged)',
    default: (s) => quoted(s.postgres.url === '' ? '' : 'set'),
  },
  IBEX_CONTEXT_POSTGRES_SCHEMA: {
    meaning: 'schema of the PostgreSQL store (migrated at start-up)',
    default: (s) => s.postgres.schema,
  },
  IBEX_CONTEXT_POSTGRES_POOL_MAX: {
    meaning: 'PostgreSQL connections per replica',
    default: (s) => String(s.postgres.poolMax),
  },
  IBEX_CONTEXT_POSTGRES_POOL_MIN: {
    meaning: 'PostgreSQL connections kept open through quiet spells',
    default: (s) => String(s.postgres.poolMin),
  },
  IBEX_CONTEXT_POSTGRES_STATEMENT_TIMEOUT_MS: {
    meaning: 'server-side bound of a PostgreSQL read (statement_timeout, set once per connection)',
    default: (s) => String(s.postgres.statementTimeoutMs),
  },
  IBEX_CONTEXT_POSTGRES_TRANSACTION_POOLER: {
    meaning: 'the PostgreSQL URL is a transaction-pooling PgBouncer (docs/postgres.md)',
    default: (s) => String(s.postgres.transactionPooler),
  },
  IBEX_CONTEXT_POSTGRES_LISTEN_URL: {
    meaning: "direct URL for the read cache's LISTEN (blank: the URL, or none through a pooler)",
    default: (s) => quoted(s.postgres.listenUrl === '' ? '' : 'set'),
  },
  IBEX_CONTEXT_POOL_MAX_QUEUE: {
    meaning: 'queued CPU tasks before pool_saturated',
    default: (s) => `${s.pool.maxQueue} (64 × max threads)`,
  },
  IBEX_CONTEXT_POOL_IDLE_TIMEOUT_MS: {
    meaning: 'idle worker retirement above min threads',
    default: (s) => ms(s.pool.idleTimeoutMs),
  },
  IBEX_CONTEXT_POOL_MAX_OLD_GENERATION_MB: {
    meaning: 'worker heap limit, MB',
    default: (s) => String(s.pool.maxOldGenerationMb),
  },
  IBEX_CONTEXT_POOL_LARGE_TASK_BYTES: {
    meaning: 'CPU tasks with this many bytes of text hold all pool threads but one at most (0 = off)',
    default: (s) => String(s.pool.largeTaskBytes),
  },
  IBEX_CONTEXT_SHUTDOWN_GRACE_MS: {
    meaning: 'SIGTERM: time in-flight calls get to finish',
    default: (s) => ms(s.shutdownGraceMs),
  },
  IBEX_CONTEXT_CPU_STAGE_RESERVE_MS: {
    meaning: 'share of the deadline kept for the CPU stage',
    default: (s) => ms(s.cpuStageReserveMs),
  },
  IBEX_CONTEXT_SCORE_SCHEMA: {
    meaning: 'score the packer maximises: composite_v1 or interim_v1 (docs/scoring.md)',
    default: (s) => s.ranking.scoreSchema,
  },
  IBEX_CONTEXT_RELEVANCE_FLOOR: {
    meaning: 'composite_v1: candidates below this relevance are filter (< 0.5; 1 % of it for large budgets)',
    default: (s) => String(s.ranking.relevanceFloor),
  },
  IBEX_CONTEXT_RELEVANCE_EXPONENT: {
    meaning: 'composite_v1: power relevance is raised to in the score (1..8)',
    default: (s) => String(s.ranking.relevanceExponent),
  },
  IBEX_CONTEXT_MAX_CANDIDATES: {
    meaning: 'most cold hits the embedded or PostgreSQL store is asked for (10..5000)',
    default: (s) => String(s.ranking.maxCandidates),
  },
  IBEX_CONTEXT_NEIGHBOUR_HITS: {
    meaning: 'searches add the memories before and after this many best hits (0..20, 0 = none)',
    default: (s) => String(s.ranking.neighbourHits),
  },
  IBEX_CONTEXT_MAX_IN_FLIGHT: {
    meaning: 'ceiling of the adaptive admission limit (calls in flight); past the limit a call gets L2 shed',
    default: (s) => String(s.maxInFlight),
  },
  IBEX_CONTEXT_MAX_RECEIVE_MESSAGE_BYTES: {
    meaning: 'largest accepted request, bytes',
    default: (s) => String(s.maxReceiveMessageBytes),
  },
  IBEX_CONTEXT_MAX_METADATA_BYTES: {
    meaning: 'largest accepted request metadata, bytes',
    default: (s) => String(s.maxMetadataBytes),
  },
  IBEX_CONTEXT_TLS_CERT: { meaning: 'server TLS certificate (PEM file)', default: () => '""' },
  IBEX_CONTEXT_TLS_KEY: { meaning: 'server TLS key (PEM file)', default: () => '""' },
  IBEX_CONTEXT_TLS_CLIENT_CA: {
    meaning: 'CA of client certificates: enables mutual TLS',
    default: () => '""',
  },
  IBEX_CONTEXT_AUTH_TOKENS_FILE: { meaning: 'bearer-token file (token → org ids)', default: () => '""' },
  IBEX_CONTEXT_ALLOW_INSECURE: {
    meaning: 'allow a non-loopback bind with no authentication',
    default: (s) => String(s.auth.allowInsecure),
  },
  IBEX_CONTEXT_LOG_LEVEL: { meaning: 'pino level', default: (s) => s.logLevel },
};

/** Names `loadSettings` reads that {@link SETTING_DOCS} does not describe (should be none). */
export function undocumentedSettings(): string[] {
  return settingNames().filter((n) => !(n in SETTING_DOCS));
}

/** Each described variable's other names (the `aliasOf` entries of {@link SETTING_DOCS} among `names`). */
export function settingAliases(names: readonly string[]): Map<string, string[]> {
  const aliases = new Map<string, string[]>();
  for (const n of names) {
    const d = SETTING_DOCS[n];
    if (d && 'aliasOf' in d) aliases.set(d.aliasOf, [...(aliases.get(d.aliasOf) ?? []), n]);
  }
  return aliases;
}

/** The full `serve --help` text: usage, then one line per variable with its default. */
export function serveUsage(): string {
  const defaults = loadSettings({});
  const names = settingNames();
  const aliases = settingAliases(names);
  const rows: [string, string, string][] = [];
  for (const n of names) {
    const d = SETTING_DOCS[n];
    if (d && 'aliasOf' in d) continue;
    const label = [n, ...(aliases.get(n) ?? [])].join(', ');
    rows.push(
      d
        ? [label, d.default(defaults), d.meaning]
        : [label, '?', '(not described yet: see docs/configuration.md)'],
    );
  }
  const w0 = Math.max(...rows.map((r) => r[0].length));
  const w1 = Math.max(...rows.map((r) => r[1].length));
  return [
    'usage: ibex-context serve',
    '',
    'Runs the gRPC service until SIGTERM/SIGINT (then drains and exits 0). It takes no flags: it is',
    'configured by these environment variables (an invalid value stops start-up, naming the variable;',
    'timeouts take ms or text such as "45ms" / "0.05s"; of two names the first one set wins).',
    `Defaults shown for this machine (${os.availableParallelism()} cores).`,
    `Start node with ${SERVICE_NODE_FLAGS.join(' ')} (npm start and the Docker image do; without it serve`,
    'warns: the main thread then collects its old generation after every large upload).',
    '',
    ...rows.map(([n, def, m]) => `  ${n.padEnd(w0)}  ${def.padEnd(w1)}  ${m}`),
  ].join('\n');
}
