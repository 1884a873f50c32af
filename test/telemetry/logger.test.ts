import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger, degradedAssemblyLog } from '../../src/telemetry/logger.js';
import { logSink } from '../helpers/log-sink.js';

describe('createLogger', () => {
  it('writes JSON lines with a level label, ISO time and the service name', () => {
    const { lines, stream } = logSink();
    createLogger({ logLevel: 'info' }, stream).child({ component: 'test' }).info({ n: 1 }, 'hello');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({
      level: 'info',
      service: 'ibex-context',
      component: 'test',
      n: 1,
      msg: 'hello',
    });
    expect(typeof lines[0]!.time).toBe('string');
    expect(Number.isNaN(Date.parse(lines[0]!.time as string))).toBe(false);
  });

  it('redacts tokens and authorization headers', () => {
    const { lines, stream } = logSink();
    createLogger({ logLevel: 'info' }, stream).info(
      {
        authorization: 'Bearer a',
        headers: { authorization: 'Bearer b' },
        req: { headers: { authorization: 'Bearer c' } },
        metadata: { authorization: 'Bearer d' },
        settings: { memoryApiToken: 'secret-e', grpcAddr: '127.0.0.1:9092' },
        memoryApiToken: 'secret-f',
        client: { token: 'secret-g' },
      },
      'request',
    );
    const text = JSON.stringify(lines[0]);
    for (const secret of ['Bearer', 'secret-']) expect(text).not.toContain(secret);
    expect(lines[0]).toMatchObject({
      settings: { grpcAddr: '127.0.0.1:9092', memoryApiToken: '[redacted]' },
    });
  });

  it('writes the degraded-assembly line with every field, through a child that skips redaction', () => {
    // Raw text, not parsed objects: a duplicate key would vanish in JSON.parse.
    const raw: string[] = [];
    const stream = new Writable({
      write(chunk, _enc, cb) {
        raw.push(String(chunk));
        cb();
      },
    });
    const root = createLogger({ logLevel: 'info' }, stream).child({ component: 'assemble' });
    const branches = [
      { name: 'directive' as const, status: 'success' as const, latency_ms: 0.5, detail: '' },
      { name: 'hot' as const, status: 'success' as const, latency_ms: 1.25, detail: '' },
      { name: 'cold' as const, status: 'error' as const, latency_ms: 2, detail: 'memory service HTTP 503' },
    ];
    degradedAssemblyLog(root)({
      degradation_level: 'L1',
      reasons: ['cold_error:memory service HTTP 503'],
      branches,
      intentional: false,
      request_id: 'r-1',
    });
    expect(raw).toHaveLength(1);
    expect(JSON.parse(raw[0]!)).toMatchObject({
      level: 'info',
      component: 'assemble',
      msg: 'degraded assembly',
      degradation_level: 'L1',
      reasons: ['cold_error:memory service HTTP 503'],
      branches,
      intentional: false,
      request_id: 'r-1',
    });
    // One `level` key, pino's: the degradation level has its own name.
    expect(raw[0]!.match(/"level":/g)).toHaveLength(1);
    // The parent logger still redacts.
    root.info({ token: 'secret-h' }, 'after');
    expect(raw[1]).toContain('[redacted]');
    expect(raw[1]).not.toContain('secret-h');
  });
});
