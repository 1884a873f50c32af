/**
 * V8 flags the service process starts with (issue 9). They cannot be set from inside a running process
 * (V8 sizes the heap when the isolate is created) nor through NODE_OPTIONS (Node refuses V8 flags it does
 * not list), so `npm start`, the Dockerfile's entrypoint and the benches pass them on node's command line,
 * and `serve` warns when they are missing.
 *
 * `--initial-old-space-size=128`: the main thread's live heap is ~24 MB, for which V8 sets an old-generation
 * limit of ~47 MB. With the young generation grown to its maximum under multi-MB uploads, the slack under
 * that limit is smaller than the young generation, and V8 then starts incremental marking after every
 * mark-compact: 2.5 mark-compacts a second on the event loop while one org uploaded 3.9 MB histories at
 * 10 req/s, with an old generation that was not growing at all. An initial old-generation size is also
 * V8's floor for that limit ("allow V8 to skip full GCs below that threshold"): 128 MB keeps ~100 MB of
 * slack, and the same run had 3 mark-compacts in all. Cost: the old generation may hold up to 128 MB of
 * garbage before it is collected. Figures: README "Main-thread heap".
 */
export const SERVICE_NODE_FLAGS: readonly string[] = ['--initial-old-space-size=128'];

/**
 * The {@link SERVICE_NODE_FLAGS} this process was not started with (by flag name: any value counts).
 * @param execArgv node's own arguments (default `process.execArgv`).
 * @returns the missing flags as they should be given, `[]` when none is missing.
 */
export function missingServiceNodeFlags(execArgv: readonly string[] = process.execArgv): string[] {
  const given = new Set(execArgv.map((arg) => arg.split('=')[0]!.replaceAll('_', '-')));
  return SERVICE_NODE_FLAGS.filter((flag) => !given.has(flag.split('=')[0]!));
}
