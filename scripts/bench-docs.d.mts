/** docs/benchmarks.md text rendered from bench/results/*.json (see bench-docs.mjs). */
export function renderBenchmarks(): string;
