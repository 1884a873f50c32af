/** The slice of a pino logger the retrieval layer needs. */
export interface RetrievalLogger {
  warn(obj: object, msg: string): void;
  info(obj: object, msg: string): void;
}

export const silentLogger: RetrievalLogger = {
  warn() {},
  info() {},
};
