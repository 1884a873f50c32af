// grpc-js does not enforce `grpc.max_metadata_size` (contract.md §11), so the first interceptor does.
import { type Metadata, ServerInterceptingCall, type ServerInterceptor } from '@grpc/grpc-js';
import { Errors, toStatusObject } from '../wire/errors.js';

/** Request metadata size as HTTP/2 counts it (RFC 9113 §6.5.2: name + value + 32 per field). */
export function metadataSize(metadata: Metadata): number {
  let size = 0;
  for (const [key, value] of Object.entries(metadata.toHttp2Headers())) {
    const values = Array.isArray(value) ? value : [value];
    for (const v of values) size += key.length + Buffer.byteLength(String(v)) + 32;
  }
  return size;
}

/** Refuses calls whose metadata exceeds `maxBytes` with RESOURCE_EXHAUSTED, for every service. */
export function metadataLimitInterceptor(maxBytes: number): ServerInterceptor {
  return (_method, call) => {
    const intercepting: ServerInterceptingCall = new ServerInterceptingCall(call, {
      start: (next) => {
        next({
          onReceiveMetadata: (metadata, nextMetadata) => {
            const size = metadataSize(metadata);
            if (size > maxBytes) {
              intercepting.sendStatus(toStatusObject(Errors.metadataTooLarge(size, maxBytes)));
              return;
            }
            nextMetadata(metadata);
          },
        });
      },
    });
    return intercepting;
  };
}
