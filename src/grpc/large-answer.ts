// Valid answers can exceed gRPC's default 4 MiB client receive limit (history is echoed, contract.md §11);
// such a client fails with RESOURCE_EXHAUSTED unseen by the service, so it logs what the client must set.
import type { Logger } from '../telemetry/logger.js';
import { MAX_ASSEMBLE_REQUEST_BYTES } from '../wire/limits.js';

/** gRPC's default max receive message length on clients (grpc-js, grpc-go, grpc-java, …), bytes. */
export const DEFAULT_CLIENT_RECEIVE_BYTES = 4 * 1024 * 1024;
/** What a client must allow to receive every valid answer (largest request + memories); the CLI's. */
export const CLIENT_RECEIVE_BYTES_NEEDED = 16 * 1024 * 1024;
const REPEAT_MS = 60_000;

/** Hook for each answer's size: answers over the default log an error, at most once a minute, with a count. */
export function largeAnswerNotice(logger: Logger, now: () => number = Date.now): (bytes: number) => void {
  let last = Number.NEGATIVE_INFINITY;
  let since = 0;
  return (bytes) => {
    if (bytes <= DEFAULT_CLIENT_RECEIVE_BYTES) return;
    since++;
    const t = now();
    if (t - last < REPEAT_MS) return;
    last = t;
    logger.error(
      { answer_bytes: bytes, large_answers: since, client_receive_bytes_needed: CLIENT_RECEIVE_BYTES_NEEDED },
      `answer of ${bytes} bytes exceeds gRPC's default 4 MiB client receive limit: a client left at the default fails it with RESOURCE_EXHAUSTED; clients must set their max receive message length (grpc.max_receive_message_length) to ${CLIENT_RECEIVE_BYTES_NEEDED} (requests up to ${MAX_ASSEMBLE_REQUEST_BYTES} bytes are echoed in the answer; docs/deploy.md)`,
    );
    since = 0;
  };
}
