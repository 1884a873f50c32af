import { move, transferableSymbol, valueSymbol } from 'piscina';

/** `value`, marked so piscina transfers `transfer` (each buffer once) with it. */
export function transferred<T extends object>(value: T, transfer: ArrayBuffer[]): T {
  return move({ [transferableSymbol]: transfer, [valueSymbol]: value }) as unknown as T;
}
