/** An empty task for bench/internal/hops.ts: returns its input, so a run costs only the thread hop. */
export default function echo(x: number): number {
  return x;
}
