/** Builds an error whose `stack` is only `Name: message`, for flow control (docs/design/main-thread.md). */
export function stackless<E>(build: () => E): E {
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    return build();
  } finally {
    Error.stackTraceLimit = limit;
  }
}
