/**
 * A read statement whose LIMIT is written into its SQL for the limit it is nearly always run with.
 *
 * SQLite (3.53 here) expires a statement whenever a parameter its planner read the value of is bound
 * again, even to the same value, and an `ORDER BY … LIMIT @limit` is one (the planner reads the limit);
 * better-sqlite3 binds on every run, so every store search was parsed and planned again before it ran
 * (docs/design/embedded-store.md, "The limit is written into the SQL"). With the limit as a literal the
 * plan is made once.
 */
import type Database from 'better-sqlite3';

/** Bind parameters of a limited read: `limit` is the one its SQL may hold as a literal. */
export interface LimitParams {
  /** Most rows to return (≥ 1; store-rows.ts `limitArg` checks it). */
  limit: number;
}

/**
 * The same read prepared twice: with the default limit as a literal (prepared once, never re-planned),
 * and with `@limit` bound for any other limit (the memory wire's `limit`: re-planned per run, as before).
 */
export class LimitStatement<P extends LimitParams, R> {
  readonly #fixed: Database.Statement<P, R>;
  readonly #bound: Database.Statement<P, R>;

  /**
   * @param sql the statement's text for a limit written as `limit` (`"20"` or `"@limit"`); every place the
   *   limit appears (e.g. `LIMIT 2 * ${limit}` of an inner ranking) takes it.
   * @param defaultLimit the limit written into the fixed statement, rows.
   * @throws RangeError when `defaultLimit` is not an integer ≥ 1; SqliteError when the SQL does not prepare.
   */
  constructor(
    db: Database.Database,
    sql: (limit: string) => string,
    readonly defaultLimit: number,
  ) {
    if (!Number.isSafeInteger(defaultLimit) || defaultLimit < 1) {
      throw new RangeError(`defaultLimit must be an integer ≥ 1, got ${defaultLimit}`);
    }
    this.#fixed = db.prepare<P, R>(sql(String(defaultLimit)));
    this.#bound = db.prepare<P, R>(sql('@limit'));
  }

  /** The statement a run with `limit` uses (tests look at its `source`). */
  statementFor(limit: number): Database.Statement<P, R> {
    return limit === this.defaultLimit ? this.#fixed : this.#bound;
  }

  /** Every row of the read with `params` (better-sqlite3 `all`; a parameter the SQL lacks is ignored). */
  all(params: P): R[] {
    return this.statementFor(params.limit).all(params);
  }
}
