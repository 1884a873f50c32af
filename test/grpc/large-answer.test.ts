/**
 * Answers over gRPC's default 4 MiB client receive limit: the service logs what a client must set, at most
 * once a minute; the CLI's own clients allow the largest valid answer.
 */
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { CLIENT_RECEIVE_BYTES_NEEDED, largeAnswerNotice } from '../../src/grpc/large-answer.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { MAX_RECEIVE_MESSAGE_BYTES } from '../../src/tools/client/context-client.js';
import { MAX_ASSEMBLE_REQUEST_BYTES } from '../../src/wire/limits.js';
import { memories, request, startTestService, tenant } from '../e2e/harness.js';
import { logSink } from '../helpers/log-sink.js';

describe('large answers', () => {
  it('logs an error naming grpc.max_receive_message_length for an answer over 4 MiB, then once a minute', () => {
    const sink = logSink();
    let t = 0;
    const note = largeAnswerNotice(pino({ level: 'info' }, sink.stream) as never, () => t);
    note(4 * 1024 * 1024);
    expect(sink.lines).toHaveLength(0);
    note(5_245_559);
    note(6_000_000);
    t = 61_000;
    note(7_000_000);
    expect(sink.lines).toHaveLength(2);
    expect(sink.lines[0]).toMatchObject({ level: 50, answer_bytes: 5_245_559, large_answers: 1 });
    expect(String(sink.lines[0]!.msg)).toContain('grpc.max_receive_message_length');
    expect(String(sink.lines[0]!.msg)).toContain(String(CLIENT_RECEIVE_BYTES_NEEDED));
    expect(sink.lines[1]).toMatchObject({ answer_bytes: 7_000_000, large_answers: 2 });
  });

  it("the CLI's clients receive what the service says a client needs, above the largest request", () => {
    expect(MAX_RECEIVE_MESSAGE_BYTES).toBe(CLIENT_RECEIVE_BYTES_NEEDED);
    expect(CLIENT_RECEIVE_BYTES_NEEDED).toBeGreaterThan(MAX_ASSEMBLE_REQUEST_BYTES + 1024 * 1024);
  });

  it('answers whose context is spliced on the history (a SplicedMessage) are measured, not logged as large', async () => {
    const sink = logSink();
    const t = tenant();
    const withLog = await startTestService({}, { logger: createLogger({ logLevel: 'info' }, sink.stream) });
    try {
      withLog.store.replaceAgent(t.org, t.agent, memories(t.org, t.agent, 3));
      for (let i = 0; i < 3; i++) {
        const r = await withLog.client.assemble(request(t), { deadlineMs: 2000 });
        expect(r.status.code).toBe(0);
        expect(r.response!.assembled_context).toContain('Do you remember the lake?');
      }
    } finally {
      await withLog.stop();
    }
    const large = sink.lines.filter((l) => String(l.msg).includes('client receive limit'));
    expect(large).toEqual([]);
  });
});
