/**
 * Node/V8 flags the service process starts with. They cannot be set from inside a running
 * process (V8 sizes the heap and Node its V8 thread pool when they start) and NODE_OPTIONS refuses V8 flags
 * Node does not list, so `npm start`, the Dockerfile's entrypoint and the benches pass them on node's
 * command line, and `serve` warns when they are missing.
 *
 * `--initial-old-space-size=128`: the main thread's live heap is ~24 MB, for which V8 sets an old-generation
 * limit of ~47 MB. With the young generation grown to its maximum under multi-MB uploads, the slack under
 * that limit is smaller than the young generation, and V8 then starts incremental marking after every
 * mark-compact, with an old generation that is not growing at all. An initial old-generation size is also
 * V8's floor for that limit ("allow V8 to skip full GCs below that threshold"): 128 MB keeps ~100 MB of
 * slack. Cost: the old generation may hold up to 128 MB of garbage before it is collected. Figures:
 * docs/design/main-thread.md, "Node flags".
 *
 * `--v8-pool-size=0`: V8's background threads (parallel scavenge and marking helpers, concurrent compiles)
 * for every isolate of the process — the main thread and each pool and store-read thread — number
 * available parallelism − 1, at least 1, instead of Node's fixed 4. On two cores the four helpers competed
 * with the service's own threads: a main-thread scavenge waited in its parallel phase for helpers that had
 * no core, and the store-read and pool threads lost their cores to other isolates' GC work, so searches and
 * CPU tasks missed the wall. Figures: docs/design/main-thread.md, "Node flags". Unlike the heap flag, Node accepts this one in
 * NODE_OPTIONS too, which {@link missingServiceNodeFlags} reads.
 * Node 20's libuv reads the affinity mask, not a cgroup CPU quota: docs/scaling.md says how to give a
 * pod on a large node its own count.
 */
export const SERVICE_NODE_FLAGS: readonly string[] = ['--initial-old-space-size=128', '--v8-pool-size=0'];

/**
 * The {@link SERVICE_NODE_FLAGS} this process was not started with (by flag name: any value counts), on
 * node's command line or in NODE_OPTIONS.
 * @param execArgv node's own arguments (default `process.execArgv`).
 * @param nodeOptions the NODE_OPTIONS the process started with (default `process.env.NODE_OPTIONS`).
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
