// Tracing settings from the standard OTEL_* variables (contract.md §12); off unless an OTLP exporter or
// endpoint is set. Unlike the SDKs, an invalid value stops start-up: a typo is better found at deploy time.

/** How calls are sampled: a head decision, parent-based unless the variable says otherwise. */
export interface SamplerConfig {
  /** `OTEL_TRACES_SAMPLER` value (default `parentbased_always_on`). */
  name:
    | 'always_on'
    | 'always_off'
    | 'traceidratio'
    | 'parentbased_always_on'
    | 'parentbased_always_off'
    | 'parentbased_traceidratio';
  /** Ratio in [0, 1] for the `*traceidratio` samplers (`OTEL_TRACES_SAMPLER_ARG`, default 1). */
  ratio: number;
}

/** Tracing on: where spans go and how they are batched. */
export interface TracingConfig {
  /** Full OTLP/HTTP traces URL, e.g. `http://collector:4318/v1/traces`. */
  url: string;
  /** Export request timeout, ms (`OTEL_EXPORTER_OTLP_TRACES_TIMEOUT` / `OTEL_EXPORTER_OTLP_TIMEOUT`, default 10 000). */
  exportTimeoutMs: number;
  sampler: SamplerConfig;
  /** Spans waiting for export; past it new spans are dropped and counted (`OTEL_BSP_MAX_QUEUE_SIZE`, 2048). */
  maxQueueSize: number;
  /** Spans per export request (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, 512; at most maxQueueSize). */
  maxExportBatchSize: number;
  /** Delay between exports, ms (`OTEL_BSP_SCHEDULE_DELAY`, 5000). */
  scheduleDelayMs: number;
  /** `OTEL_SERVICE_NAME` (default `ibex-context`); `OTEL_RESOURCE_ATTRIBUTES` are read by the SDK. */
  serviceName: string;
  /** Org and agent ids on the server span (`IBEX_CONTEXT_TRACE_TENANT_IDS`, default false): tenant data. */
  tenantIds: boolean;
}

/** OTLP/HTTP's default traces URL (the collector's HTTP receiver on this host). */
export const DEFAULT_OTLP_TRACES_URL = 'http://localhost:4318/v1/traces';

const SAMPLERS: readonly SamplerConfig['name'][] = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
];

type Env = Record<string, string | undefined>;

function text(env: Env, name: string): string | undefined {
  const v = env[name]?.trim();
  return v ? v : undefined;
}

function positiveInt(env: Env, name: string, fallback: number): number {
  const v = text(env, name);
  if (v === undefined) return fallback;
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new Error(`${name} must be an integer ≥ 1, got '${v}'`);
  return n;
}

function bool(env: Env, name: string): boolean {
  const v = text(env, name)?.toLowerCase();
  if (v === undefined || v === 'false') return false;
  if (v === 'true') return true;
  throw new Error(`${name} must be true or false, got '${v}'`);
}

function checkUrl(name: string, value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new Error(`${name} must be an http(s) URL, got '${value}'`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new Error(`${name} must be an http(s) URL, got '${value}'`);
  return value;
}

/** The traces URL per the OTLP spec: the signal's variable, else endpoint + `v1/traces`, else default. */
function tracesUrl(env: Env): string {
  const specific = text(env, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT');
  if (specific) return checkUrl('OTEL_EXPORTER_OTLP_TRACES_ENDPOINT', specific);
  const base = text(env, 'OTEL_EXPORTER_OTLP_ENDPOINT');
  if (base) {
    checkUrl('OTEL_EXPORTER_OTLP_ENDPOINT', base);
    return `${base.endsWith('/') ? base : `${base}/`}v1/traces`;
  }
  return DEFAULT_OTLP_TRACES_URL;
}

function sampler(env: Env): SamplerConfig {
  const raw = text(env, 'OTEL_TRACES_SAMPLER')?.toLowerCase() ?? 'parentbased_always_on';
  if (!(SAMPLERS as readonly string[]).includes(raw))
    throw new Error(`OTEL_TRACES_SAMPLER must be one of ${SAMPLERS.join(', ')}, got '${raw}'`);
  const name = raw as SamplerConfig['name'];
  let ratio = 1;
  const arg = text(env, 'OTEL_TRACES_SAMPLER_ARG');
  if (arg !== undefined && name.endsWith('traceidratio')) {
    ratio = Number(arg);
    if (!Number.isFinite(ratio) || ratio < 0 || ratio > 1)
      throw new Error(`OTEL_TRACES_SAMPLER_ARG must be a number in [0, 1], got '${arg}'`);
  }
  return { name, ratio };
}

/**
 * Reads the tracing settings from `env`; null when off (`OTEL_SDK_DISABLED`, exporter `none`, or no OTLP).
 * @throws Error naming the variable: unsupported exporter, protocol, URL, sampler, ratio, size or delay.
 */
export function tracingConfigFromEnv(env: Env = process.env): TracingConfig | null {
  if (text(env, 'OTEL_SDK_DISABLED')?.toLowerCase() === 'true') return null;
  const exporter = text(env, 'OTEL_TRACES_EXPORTER')?.toLowerCase();
  if (exporter === 'none') return null;
  if (exporter !== undefined && exporter !== 'otlp')
    throw new Error(`OTEL_TRACES_EXPORTER must be otlp or none, got '${exporter}'`);
  const endpointSet =
    text(env, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT') !== undefined ||
    text(env, 'OTEL_EXPORTER_OTLP_ENDPOINT') !== undefined;
  if (exporter === undefined && !endpointSet) return null;
  for (const name of ['OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', 'OTEL_EXPORTER_OTLP_PROTOCOL']) {
    const protocol = text(env, name);
    if (protocol === undefined) continue;
    if (protocol !== 'http/protobuf')
      throw new Error(`${name} must be http/protobuf (the only OTLP protocol exported), got '${protocol}'`);
    break;
  }
  const maxQueueSize = positiveInt(env, 'OTEL_BSP_MAX_QUEUE_SIZE', 2048);
  return {
    url: tracesUrl(env),
    exportTimeoutMs: positiveInt(
      env,
      text(env, 'OTEL_EXPORTER_OTLP_TRACES_TIMEOUT')
        ? 'OTEL_EXPORTER_OTLP_TRACES_TIMEOUT'
        : 'OTEL_EXPORTER_OTLP_TIMEOUT',
      10_000,
    ),
    sampler: sampler(env),
    maxQueueSize,
    maxExportBatchSize: Math.min(maxQueueSize, positiveInt(env, 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE', 512)),
    scheduleDelayMs: positiveInt(env, 'OTEL_BSP_SCHEDULE_DELAY', 5000),
    serviceName: text(env, 'OTEL_SERVICE_NAME') ?? 'ibex-context',
    tenantIds: bool(env, 'IBEX_CONTEXT_TRACE_TENANT_IDS'),
  };
}
