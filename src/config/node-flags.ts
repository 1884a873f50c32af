/**
 * Node/V8 flags the service starts with. They cannot be set from a running process, and Node refuses the
 * heap flag in NODE_OPTIONS, so start scripts pass them and `serve` warns when missing.
 * Why these: docs/design/main-thread.md, "Node flags".
 */
export const SERVICE_NODE_FLAGS: readonly string[] = [
  '--initial-old-space-size=128',
  '--v8-pool-size=0',
  '--no-allocation-site-pretenuring',
];

/**
 * The {@link SERVICE_NODE_FLAGS} missing from node's command line and NODE_OPTIONS (by name; any value counts).
 * @returns the missing flags as they should be given, `[]` when none is missing.
 */
export function missingServiceNodeFlags(
  execArgv: readonly string[] = process.execArgv,
  nodeOptions: string | undefined = process.env.NODE_OPTIONS,
): string[] {
  const args = [...execArgv, ...(nodeOptions ?? '').split(/\s+/)];
  const given = new Set(args.map((arg) => arg.split('=')[0]!.replaceAll('_', '-')));
  return SERVICE_NODE_FLAGS.filter((flag) => !given.has(flag.split('=')[0]!));
}
