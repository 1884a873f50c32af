/** A read with its usual LIMIT written into the SQL (docs/design/embedded-store.md explains why). */
import type Database from 'better-sqlite3';

export interface LimitParams {
  limit: number;
}

/** The read prepared with the default limit as a literal, and with `@limit` bound for any other. */
export class LimitStatement<P extends LimitParams, R> {
  readonly #fixed: Database.Statement<P, R>;
  readonly #bound: Database.Statement<P, R>;

  /**
   * @param sql the text for a limit written as `limit`; @param raw rows as arrays of column values in
   *   select order (better-sqlite3 `raw` mode: no object with named keys per row). @throws RangeError, or
   *   SqliteError.
   */
  constructor(
    db: Database.Database,
    sql: (limit: string) => string,
    readonly defaultLimit: number,
    raw = false,
  ) {
    if (!Number.isSafeInteger(defaultLimit) || defaultLimit < 1) {
      throw new RangeError(`defaultLimit must be an integer ≥ 1, got ${defaultLimit}`);
    }
    this.#fixed = db.prepare<P, R>(sql(String(defaultLimit)));
    this.#bound = db.prepare<P, R>(sql('@limit'));
    if (raw) {
      this.#fixed.raw(true);
      this.#bound.raw(true);
    }
  }

  statementFor(limit: number): Database.Statement<P, R> {
    return limit === this.defaultLimit ? this.#fixed : this.#bound;
  }

  all(params: P): R[] {
    return this.statementFor(params.limit).all(params);
  }
}
