/**
 * Which OTEL_* environments turn tracing on, where spans go, how they are sampled and batched, and the
 * start-up errors for values the service cannot honour.
 */
import { describe, expect, it } from 'vitest';
import { DEFAULT_OTLP_TRACES_URL, tracingConfigFromEnv } from '../../src/telemetry/tracing/config.js';

describe('tracingConfigFromEnv', () => {
  it('is off by default and with OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true', () => {
    expect(tracingConfigFromEnv({})).toBeNull();
    expect(tracingConfigFromEnv({ OTEL_TRACES_SAMPLER: 'always_on' })).toBeNull();
    expect(
      tracingConfigFromEnv({ OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }),
    ).toBeNull();
    expect(
      tracingConfigFromEnv({ OTEL_SDK_DISABLED: 'true', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }),
    ).toBeNull();
  });

  it('is on with OTEL_TRACES_EXPORTER=otlp (default URL) or an endpoint, with the SDK defaults', () => {
    expect(tracingConfigFromEnv({ OTEL_TRACES_EXPORTER: 'otlp' })).toEqual({
      url: DEFAULT_OTLP_TRACES_URL,
      exportTimeoutMs: 10_000,
      sampler: { name: 'parentbased_always_on', ratio: 1 },
      maxQueueSize: 2048,
      maxExportBatchSize: 512,
      scheduleDelayMs: 5000,
      serviceName: 'ibex-context',
      tenantIds: false,
    });
    expect(tracingConfigFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' })?.url).toBe(
      'http://collector:4318/v1/traces',
    );
    expect(tracingConfigFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/otlp/' })?.url).toBe(
      'http://collector:4318/otlp/v1/traces',
    );
    // The signal-specific variable is used as given and wins over the base one.
    expect(
      tracingConfigFromEnv({
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318',
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://traces.example:443/ingest',
      })?.url,
    ).toBe('https://traces.example:443/ingest');
  });

  it('reads the sampler, its ratio, the batch sizes, the timeout and the tenant-id switch', () => {
    const c = tracingConfigFromEnv({
      OTEL_TRACES_EXPORTER: 'OTLP',
      OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
      OTEL_TRACES_SAMPLER_ARG: '0.01',
      OTEL_BSP_MAX_QUEUE_SIZE: '100',
      OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '512',
      OTEL_BSP_SCHEDULE_DELAY: '250',
      OTEL_EXPORTER_OTLP_TIMEOUT: '2000',
      OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: '1500',
      OTEL_SERVICE_NAME: 'ctx-eu',
      IBEX_CONTEXT_TRACE_TENANT_IDS: 'true',
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
    });
    expect(c).toMatchObject({
      sampler: { name: 'parentbased_traceidratio', ratio: 0.01 },
      maxQueueSize: 100,
      // Never above the queue.
      maxExportBatchSize: 100,
      scheduleDelayMs: 250,
      exportTimeoutMs: 1500,
      serviceName: 'ctx-eu',
      tenantIds: true,
    });
  });

  it.each([
    [{ OTEL_TRACES_EXPORTER: 'jaeger' }, 'OTEL_TRACES_EXPORTER'],
    [{ OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }, 'OTEL_EXPORTER_OTLP_PROTOCOL'],
    [
      { OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json' },
      'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL',
    ],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318' }, 'OTEL_EXPORTER_OTLP_ENDPOINT'],
    [{ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'ftp://c/v1/traces' }, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT'],
    [{ OTEL_TRACES_EXPORTER: 'otlp', OTEL_TRACES_SAMPLER: 'sometimes' }, 'OTEL_TRACES_SAMPLER'],
    [
      { OTEL_TRACES_EXPORTER: 'otlp', OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '1.5' },
      'OTEL_TRACES_SAMPLER_ARG',
    ],
    [{ OTEL_TRACES_EXPORTER: 'otlp', OTEL_BSP_MAX_QUEUE_SIZE: '0' }, 'OTEL_BSP_MAX_QUEUE_SIZE'],
    [{ OTEL_TRACES_EXPORTER: 'otlp', IBEX_CONTEXT_TRACE_TENANT_IDS: 'yes' }, 'IBEX_CONTEXT_TRACE_TENANT_IDS'],
  ])('refuses %j naming %s', (env, variable) => {
    expect(() => tracingConfigFromEnv(env)).toThrow(variable);
  });
});
