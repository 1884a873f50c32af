/**
 * The slice of a pino logger the retrieval layer needs, so callers can pass the service's logger (or a
 * child of it) and tests can pass nothing.
 */
export interface RetrievalLogger {
  warn(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
}

/** Logger that drops everything. */
export const silentLogger: RetrievalLogger = {
  warn() {},
  info() {},
};
