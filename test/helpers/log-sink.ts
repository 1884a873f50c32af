/** A pino destination for tests: every JSON log line the service writes, parsed, in order. */
import { Writable } from 'node:stream';

/** @returns `lines` (parsed objects, appended as written) and the `stream` to give createLogger. */
export function logSink(): { lines: Record<string, unknown>[]; stream: Writable } {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk, _enc, cb) {
      for (const line of String(chunk).split('\n')) if (line) lines.push(JSON.parse(line));
      cb();
    },
  });
  return { lines, stream };
}
