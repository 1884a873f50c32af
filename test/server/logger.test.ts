import { describe, expect, it } from 'vitest';
import { createLogger } from '../../src/telemetry/logger.js';
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
});
