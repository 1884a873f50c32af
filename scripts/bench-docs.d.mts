/** docs/benchmarks.md text rendered from bench/results/*.json (see bench-docs.mjs). */
export function renderBenchmarks(): string;
/** bench/results/<name>.json parsed, or undefined when none is committed. */
export function result(name: string): unknown;
