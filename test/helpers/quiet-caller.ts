/**
 * A quiet caller of another org running alongside a heavy call: the heavy call must not take its service.
 */
import { status } from '@grpc/grpc-js';
import { expect } from 'vitest';
import type { CallOutcome } from '../../src/tools/client/context-client.js';
import type { AssembleContextResponse } from '../../src/wire/proto.js';
import type { TestClient } from './grpc-client.js';

/**
 * Runs `heavy` while a quiet caller of another org sends `calls` small requests one after another, and
 * asserts every quiet call is OK at L0 within its (generous: the machine is shared) deadline.
 * @returns the heavy call's result.
 */
export async function withQuietCaller<T>(
  client: TestClient,
  quietRequest: () => Parameters<TestClient['assemble']>[0],
  heavy: () => Promise<T>,
  calls = 4,
  deadlineMs = 5_000,
): Promise<T> {
  const quiet = (async () => {
    const outcomes: CallOutcome<AssembleContextResponse>[] = [];
    for (let i = 0; i < calls; i++) outcomes.push(await client.assemble(quietRequest(), { deadlineMs }));
    return outcomes;
  })();
  const [result, outcomes] = await Promise.all([heavy(), quiet]);
  for (const o of outcomes) {
    expect(o.status.code).toBe(status.OK);
    expect(o.response!.degradation.level).toBe('L0');
  }
  return result;
}
