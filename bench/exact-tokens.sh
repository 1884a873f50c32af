#!/usr/bin/env bash
# `npm run bench:exact-tokens [-- <locomo dir> <calls>]`: LoCoMo replay against the embedded-store service
# with estimates (chars_div_4) and with exact counts (IBEX_CONTEXT_EXACT_TOKENS=true), one after the other
# on the same store: server CPU per call (utime + stime of the server process over the replay / calls)
# and the client's and server's p50/p99. The replay checks the budget invariant with the same kinds (a
# catalog file selecting bpe_* for the exact run). Ports: BENCH_GRPC_PORT (default 19600) and +1 (admin).
# Writes bench/results/exact-tokens.json (`runs`: one entry per mode).
set -euo pipefail
cd "$(dirname "$0")/.."
CALLS=${2:-600}
PORT=${BENCH_GRPC_PORT:-19600}
source bench/lib/locomo-service.sh
trap 'rm -rf "$WORK"' EXIT
bench_store "${1:-../shared/datasets/locomo10}"
cat >"$WORK/exact-catalog.json" <<'JSON'
{"schema_version":1,"models":[],"families":[
 {"tokenizer_family":"o200k_base","estimate_kind":"bpe_o200k_base","safety_buffer_fraction":0.02},
 {"tokenizer_family":"cl100k_base","estimate_kind":"bpe_cl100k_base","safety_buffer_fraction":0.02}]}
JSON

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
run() { # $1 label, $2 exact (true/false), $3 catalog for the replay check ('' = built-in)
  IBEX_CONTEXT_EMBEDDED_DB="$DB" IBEX_CONTEXT_EXACT_TOKENS="$2" IBEX_CONTEXT_LOG_LEVEL=warn \
    IBEX_CONTEXT_GRPC_ADDR="127.0.0.1:$PORT" IBEX_CONTEXT_ADMIN_ADDR="127.0.0.1:$((PORT + 1))" \
    "${SERVICE_NODE[@]}" serve >"$WORK/$1.log" 2>&1 &
  local pid=$!
  wait_ready "$((PORT + 1))" 100
  # Warm-up calls (JIT, caches) are not measured.
  $CLI replay --locomo "$LOCOMO" --limit 100 --addr "127.0.0.1:$PORT" ${3:+--catalog "$3"} --json >/dev/null || true
  local before after
  before=$(ticks "$pid")
  $CLI replay --locomo "$LOCOMO" --limit "$CALLS" --addr "127.0.0.1:$PORT" ${3:+--catalog "$3"} --json \
    >"$WORK/$1.json" || true
  after=$(ticks "$pid")
  kill -TERM "$pid"
  wait "$pid" || true
  node -e '
    const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    const ticks = Number(process.argv[3]) - Number(process.argv[2]);
    console.log(JSON.stringify({ label: process.argv[4], calls: r.calls, ok: r.ok,
      errors: r.errors, levels: r.levels, invariant_violations: r.invariant_violations,
      tokens_used: r.tokens_used, budget_unchecked: r.budget_unchecked,
      server_cpu_ms_per_call: Math.round((ticks * 10 / r.calls) * 100) / 100,
      client_latency_ms: r.latency_ms ?? r.client_latency_ms, server_total_ms: r.server_total_ms }));
  ' "$WORK/$1.json" "$before" "$after" "$1"
}
{
  echo '{"runs": ['
  run estimates false ''
  echo ","
  run exact true "$WORK/exact-catalog.json"
  echo "]}"
} | write_result exact-tokens
