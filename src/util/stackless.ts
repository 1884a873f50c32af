/** Builds an error without a stack trace, for flow-control errors (docs/design/main-thread.md). */
export function stackless<E>(build: () => E): E {
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    return build();
  } finally {
    Error.stackTraceLimit = limit;
  }
}
