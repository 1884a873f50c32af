/**
 * The benches' bare gRPC server (bench/lib/bare-grpc.ts; bench:floor's CPU floor, bench:isolation's p99
 * ratio floor): a child with the service's definition answering every call at once with the canned
 * LoCoMo-sized answer, in both forms, and gone once its parent is.
 */
import { describe, expect, it, onTestFinished } from 'vitest';
import { GRPC_FORMS, startBareGrpcServer } from '../../../bench/lib/bare-grpc.js';
import { cannedAnswer } from '../../../bench/lib/canned-rows.js';
import { ASSEMBLE_METHOD } from '../../../src/tools/client/context-client.js';
import { summarizeResponse } from '../../../src/tools/client/grpc-frames.js';
import { runLoad } from '../../../src/tools/client/load-driver.js';
import { cyclingSource } from '../../../src/tools/client/request-source.js';

const REQUEST = {
  org_id: 'a1a1a1a1-0000-4000-8000-000000000001',
  agent_id: 'a1a1a1a1-0000-4000-8000-0000000000a1',
  model: 'gpt-4o',
  query: 'the lake?',
};

describe('bare gRPC server', () => {
  it.each(GRPC_FORMS)(
    '%s: answers every call OK at L0 with the canned answer, then exits once its parent is gone',
    async (form) => {
      const { port, child } = await startBareGrpcServer(form);
      onTestFinished(() => {
        child.kill('SIGKILL');
      });
      const report = await runLoad({
        addr: `127.0.0.1:${port}`,
        rate: 40,
        durationS: 0.5,
        connections: 1,
        source: cyclingSource('bare', [REQUEST]),
      });
      expect(report.requests.sent).toBe(20);
      expect(report.requests.ok).toBe(20);
      expect(report.requests.levels.L0).toBe(20);
      // The canned answer's rows as the walker reads them: 30 rows, 6 excluded for budget, no metrics.
      const canned = summarizeResponse(ASSEMBLE_METHOD.responseSerialize(cannedAnswer()) as Buffer);
      expect(canned).toMatchObject({ candidates: 30, budgetExcluded: 6, totalMs: null });
      expect(report.split_ms.answers).toBe(0);
      expect(report.packing.budget_choice).toBe(20);
      // Its parent gone (the IPC channel closed), it exits by itself: no bench leaves one behind.
      const exited = new Promise((resolve) =>
        child.once('exit', (code, signal) => resolve({ code, signal })),
      );
      child.disconnect();
      expect(await exited).toEqual({ code: 0, signal: null });
    },
  );
});
