import { status } from '@grpc/grpc-js';
import { describe, expect, it } from 'vitest';
import { Errors, IbexError, toStatusObject } from '../../src/wire/errors.js';

describe('toStatusObject: the one error → gRPC status mapping', () => {
  it('metadata over the limit is RESOURCE_EXHAUSTED naming both sizes', () => {
    expect(toStatusObject(Errors.metadataTooLarge(9000, 8192))).toEqual({
      code: status.RESOURCE_EXHAUSTED,
      details: 'request metadata of 9000 bytes exceeds 8192',
    });
  });

  it('an unimplemented method is UNIMPLEMENTED with its details', () => {
    expect(toStatusObject(Errors.unimplemented('ListContexts is not implemented'))).toEqual({
      code: status.UNIMPLEMENTED,
      details: 'ListContexts is not implemented',
    });
  });

  it('each coded error keeps its exact message and gets the table code', () => {
    expect(toStatusObject(Errors.invalidArgument('model', 'model is required'))).toEqual({
      code: status.INVALID_ARGUMENT,
      details: 'model is required',
    });
    expect(toStatusObject(Errors.unauthenticated('missing bearer token'))).toEqual({
      code: status.UNAUTHENTICATED,
      details: 'missing bearer token',
    });
    expect(toStatusObject(Errors.deadlineExceeded())).toEqual({
      code: status.DEADLINE_EXCEEDED,
      details: 'deadline exceeded',
    });
    expect(toStatusObject(new IbexError('IBEX_ERR_POOL_SATURATED', 'worker pool queue is full'))).toEqual({
      code: status.RESOURCE_EXHAUSTED,
      details: 'worker pool queue is full',
    });
  });

  it('an uncoded error is INTERNAL and never sends its own text to the caller', () => {
    expect(toStatusObject(new Error('secret path /etc/token'))).toEqual({
      code: status.INTERNAL,
      details: 'internal error',
    });
    expect(toStatusObject('thrown string')).toEqual({ code: status.INTERNAL, details: 'internal error' });
  });
});
