/** Errors without a stack trace, for flow control under load. */

/**
 * Builds an error without capturing a stack trace, for the errors an overloaded process raises by the
 * thousand as flow control (refused store reads, branch and call timeouts, CPU-stage deadlines and a full
 * pool queue). Their stacks are never logged or read, and capturing one costs the main thread 7–9 µs
 * (`new Error` or a DOMException 15 frames deep with the default 10-frame limit; 0.6 µs without, on this
 * 2-core VM) on the very calls it can least afford. `stack` then holds only `Name: message`. The limit is restored even if `build` throws.
 * @param build constructs the error (any Error subclass, or a DOMException).
 */
export function stackless<E>(build: () => E): E {
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    return build();
  } finally {
    Error.stackTraceLimit = limit;
  }
}
