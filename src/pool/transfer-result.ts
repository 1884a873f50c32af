/**
 * A worker's result with buffers transferred back instead of cloned (piscina's `move()`), for the CPU
 * worker (its index arrays, spliced context), the body-decoder worker (the body, for reuse) and the
 * store-read and memory-fetch workers (the hits' content bytes).
 */
import { move, transferableSymbol, valueSymbol } from 'piscina';

/**
 * `value`, marked so that piscina transfers `transfer` with it. The pool receives `value` itself; the
 * wrapper exists only on the worker's side, hence the cast.
 * @param transfer each buffer once (a buffer listed twice is a DataCloneError).
 */
export function transferred<T extends object>(value: T, transfer: ArrayBuffer[]): T {
  // piscina transfers `[transferableSymbol]` and delivers `[valueSymbol]` for a value marked by move().
  return move({ [transferableSymbol]: transfer, [valueSymbol]: value }) as unknown as T;
}
