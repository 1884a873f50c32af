#!/usr/bin/env bash
# First traffic after start: for each path (embedded store, memory service), N fresh starts of `serve`, each
# followed as soon as /readyz answers by `replay --limit 300`, then the same replay on the warm service;
# writes bench/results/first-traffic.json. The path `embedded, README order` follows the README instead:
# `serve` on an empty store, `ingest` once /readyz answers, the replay $README_GAP_S (default 2) s later.
# usage: bench/first-traffic.sh <locomo dir> [starts=3] [base port=20200] [postgres url]
# Needs `npm run build`. Ingests LoCoMo into a temporary embedded store; the memory path serves that store
# through `ibex-context memory-server` (started once, before the first start). With a PostgreSQL URL (a
# database this script may fill: it replaces the LoCoMo agents there), the postgres path runs too, with
# `psql` vacuuming the memories table before each start.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib/locomo-service.sh
locomo="${1:?usage: bench/first-traffic.sh <locomo dir> [starts] [base port]}"
starts="${2:-3}"
port="${3:-20200}"
pg_url="${4:-}"
tmp="$(mktemp -d)"
export IBEX_CONTEXT_EMBEDDED_DB="$tmp/ibex.db"
cli=(node dist/src/tools/cli/main.js)
"${cli[@]}" ingest --locomo "$locomo" > /dev/null
gap="${README_GAP_S:-2}"
paths=(embedded readme-order memory)
if [ -n "$pg_url" ]; then
  IBEX_CONTEXT_POSTGRES_URL="$pg_url" "${cli[@]}" ingest --locomo "$locomo" > /dev/null
  paths+=(postgres)
fi
"${cli[@]}" memory-server --db "$IBEX_CONTEXT_EMBEDDED_DB" --port "$((port + 10))" --token bench > "$tmp/ms.log" 2>&1 &
ms=$!
trap 'kill "$ms" 2>/dev/null || true; rm -rf "$tmp"' EXIT
sleep 1
runs=()
for path in "${paths[@]}"; do
  for k in $(seq 1 "$starts"); do
    extra=()
    if [ "$path" = memory ]; then
      extra=(IBEX_CONTEXT_MEMORY_BASE_URL="http://127.0.0.1:$((port + 10))" IBEX_CONTEXT_MEMORY_API_TOKEN=bench)
    elif [ "$path" = postgres ]; then
      extra=(IBEX_CONTEXT_POSTGRES_URL="$pg_url")
      # Each start meets the table as autovacuum (PostgreSQL's default) would leave it, not with the dead
      # row versions the previous start's inclusion counts left on a server that runs without it.
      psql "$pg_url" -qc 'VACUUM (ANALYZE) ibex_context.memories' > /dev/null
    elif [ "$path" = readme-order ]; then
      extra=(IBEX_CONTEXT_EMBEDDED_DB="$tmp/readme-$k.db")
    fi
    env "${extra[@]}" IBEX_CONTEXT_GRPC_ADDR="127.0.0.1:$port" IBEX_CONTEXT_ADMIN_ADDR="127.0.0.1:$((port + 1))" \
      "${SERVICE_NODE[@]}" serve > "$tmp/serve.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 240); do curl -sf "http://127.0.0.1:$((port + 1))/readyz" > /dev/null && break; sleep 0.25; done
    if [ "$path" = readme-order ]; then
      env "${extra[@]}" "${cli[@]}" ingest --locomo "$locomo" > /dev/null
      sleep "$gap"
    fi
    "${cli[@]}" replay --addr "127.0.0.1:$port" --locomo "$locomo" --limit 300 --json > "$tmp/r.json" 2> /dev/null || true
    load="$(cut -d' ' -f1 /proc/loadavg)"
    # The same replay again on the now-warm service: what this machine gives at the README's pace anyway.
    "${cli[@]}" replay --addr "127.0.0.1:$port" --locomo "$locomo" --limit 300 --json > "$tmp/w.json" 2> /dev/null || true
    runs+=("$(node -e 'const r=require(process.argv[1]);const w=require(process.argv[5]);console.log(JSON.stringify({path:process.argv[2]==="readme-order"?"embedded, README order":process.argv[2],start:+process.argv[3],load_avg_1m:+process.argv[4],calls:r.calls,ok:r.ok,errors:r.errors,levels:r.levels,l0_share:r.levels.L0/r.calls,p99_ms:r.latency_ms.p99,warm:{calls:w.calls,ok:w.ok,errors:w.errors,levels:w.levels,l0_share:w.levels.L0/w.calls}}))' "$tmp/r.json" "$path" "$k" "$load" "$tmp/w.json")")
    echo "${runs[-1]}"
    kill "$pid"; wait "$pid" 2> /dev/null || true
    sleep 1
  done
done
(IFS=,; echo "{\"note\":\"first replay --limit 300 right after each fresh start, then the same replay again on the warm service (warm); load_avg_1m shows how busy the machine was; README order: serve on an empty store, ingest, the replay ${gap} s later\",\"readme_gap_s\":${gap},\"runs\":[${runs[*]}]}") \
  | write_result first-traffic > /dev/null
echo "wrote bench/results/first-traffic.json"
