/**
 * Flow-control errors carry no stack trace: an overloaded process builds thousands a second
 * (refused store reads, branch and call timeouts, CPU-stage deadlines), and capturing a stack costs ~10 µs
 * of main thread each. Errors that are logged keep theirs.
 */
import { describe, expect, it } from 'vitest';
import { cancelledReason, deadlineReason } from '../../src/request/call-context.js';
import { BranchError, BranchErrors } from '../../src/retrieval/branch-error.js';
import { stackless } from '../../src/util/stackless.js';
import { Errors } from '../../src/wire/errors.js';

/** True when `err.stack` lists at least one call frame (`    at …`). */
function hasFrames(err: unknown): boolean {
  return /\n\s+at /.test((err as Error).stack ?? '');
}

describe('stackless', () => {
  it('builds the error with its name and message and no frames', () => {
    const err = stackless(() => Object.assign(new Error('store-read queue full'), { code: 'busy' }));
    expect(err.stack).toBe('Error: store-read queue full');
    expect(err.code).toBe('busy');
    expect(err).toBeInstanceOf(Error);
  });

  it('restores Error.stackTraceLimit, also when the builder throws', () => {
    const before = Error.stackTraceLimit;
    stackless(() => new Error('x'));
    expect(Error.stackTraceLimit).toBe(before);
    expect(() =>
      stackless(() => {
        throw new TypeError('builder failed');
      }),
    ).toThrow('builder failed');
    expect(Error.stackTraceLimit).toBe(before);
    expect(hasFrames(new Error('after'))).toBe(true);
  });

  it('the flow-control errors have no frames', () => {
    for (const err of [
      Errors.poolDeadline('withdrawn'),
      Errors.poolSaturated(),
      Errors.deadlineExceeded(),
      Errors.cancelled(),
      BranchErrors.unavailable('embedded store', 'busy'),
      BranchErrors.httpTimeout('cold'),
      // Built directly, as the body decoder does from its thread's answer.
      new BranchError('IBEX_RETRIEVAL_INVALID_JSON', 'error', 'invalid JSON'),
      deadlineReason(),
      cancelledReason(),
    ]) {
      expect(hasFrames(err), (err as Error).message).toBe(false);
    }
    expect(deadlineReason().name).toBe('TimeoutError');
    expect(Errors.poolDeadline('abandoned').poolReason).toBe('abandoned');
  });

  it('errors that are logged keep their stacks', () => {
    expect(hasFrames(Errors.poolTaskFailed(new Error('worker died')))).toBe(true);
    expect(hasFrames(Errors.internal('bug'))).toBe(true);
    expect(hasFrames(Errors.invalidArgument('query', 'too long'))).toBe(true);
  });
});
