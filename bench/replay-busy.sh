#!/usr/bin/env bash
# `npm run build && bash bench/replay-busy.sh [<locomo dir> <runs>]`: the README's `replay --limit 1000` against the
# embedded-store service while two `node -e 'for(;;){}'` loops keep both cores of a 2-core machine busy,
# `runs` times (default 5): each run's exit code, errors, levels, answers sent after their deadline and client
# latency, and how many exited 0.
# Ports: BENCH_GRPC_PORT (default 19640) and +1 (admin). Writes bench/results/replay-busy.json.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${2:-5}
PORT=${BENCH_GRPC_PORT:-19640}
source bench/lib/locomo-service.sh
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
bench_store "${1:-../shared/datasets/locomo10}"
IBEX_CONTEXT_EMBEDDED_DB="$DB" IBEX_CONTEXT_LOG_LEVEL=warn \
  IBEX_CONTEXT_GRPC_ADDR="127.0.0.1:$PORT" IBEX_CONTEXT_ADMIN_ADDR="127.0.0.1:$((PORT + 1))" \
  "${SERVICE_NODE[@]}" serve >"$WORK/serve.log" 2>&1 &
SERVICE=$!
PIDS+=("$SERVICE")
wait_ready "$((PORT + 1))" 150
node -e 'for(;;){}' &
PIDS+=($!)
node -e 'for(;;){}' &
PIDS+=($!)
ok=0
{
  echo "{\"runs\": ["
  for i in $(seq 1 "$RUNS"); do
    code=0
    curl -sf "http://127.0.0.1:$((PORT + 1))/metrics" >"$WORK/before$i.txt" || true
    $CLI replay --locomo "$LOCOMO" --limit 1000 --addr "127.0.0.1:$PORT" --json >"$WORK/run$i.json" || code=$?
    [ "$code" = 0 ] && ok=$((ok + 1))
    curl -sf "http://127.0.0.1:$((PORT + 1))/metrics" >"$WORK/after$i.txt" || true
    # Answers sent after D (the event loop ran late) during this run, by path, from the service's histogram.
    node -e '
      const fs = require("fs");
      const r = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
      const late = (file) => {
        const out = {};
        const text = fs.existsSync(file) ? fs.readFileSync(file, "utf8") : "";
        for (const m of text.matchAll(/^ibex_context_late_answer_seconds_count\{path="([a-z_]+)"\} (\d+)$/gm))
          out[m[1]] = Number(m[2]);
        return out;
      };
      const before = late(process.argv[3]);
      const after = late(process.argv[4]);
      const lateAnswers = {};
      for (const [path, n] of Object.entries(after)) lateAnswers[path] = n - (before[path] ?? 0);
      process.stdout.write(JSON.stringify({ exit: Number(process.argv[2]), calls: r.calls, ok: r.ok,
        errors: r.errors, levels: r.levels, invariant_violations: r.invariant_violations,
        late_answers: lateAnswers, latency_ms: r.latency_ms }));
    ' "$WORK/run$i.json" "$code" "$WORK/before$i.txt" "$WORK/after$i.txt"
    [ "$i" -lt "$RUNS" ] && echo ","
  done
  echo "], \"exit_0\": $ok, \"of\": $RUNS, \"busy_loops\": 2, \"cpus\": $(nproc), \"load_average\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}"
} | write_result replay-busy
