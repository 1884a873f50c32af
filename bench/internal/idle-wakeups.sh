#!/bin/bash
# Usage: bench/internal/idle-wakeups.sh <port-base>  — starts `serve` idle, samples /proc over 10 s, prints CPU ms and ctx switches/s.
cd "$(dirname "$0")/../.."
D=$(mktemp -d)
IBEX_CONTEXT_GRPC_ADDR=127.0.0.1:$1 IBEX_CONTEXT_ADMIN_ADDR=127.0.0.1:$(( $1 + 1 )) IBEX_CONTEXT_EMBEDDED_DB=$D/s.db IBEX_CONTEXT_LOG_LEVEL=silent node dist/src/tools/cli/main.js serve & P=$!
sleep 4
tck=$(getconf CLK_TCK)
read_cpu(){ awk '{print $14+$15}' /proc/$P/stat; }
read_sw(){ local s=0; for t in /proc/$P/task/*; do v=$(awk '/^voluntary_ctxt_switches|^nonvoluntary_ctxt_switches/{s+=$2} END{print s}' $t/status); s=$((s+v)); done; echo $s; }
c0=$(read_cpu); w0=$(read_sw); sleep 10; c1=$(read_cpu); w1=$(read_sw)
echo "idle 10 s: cpu_ms=$(( (c1-c0)*1000/tck )) ctx_switches_per_s=$(( (w1-w0)/10 )) threads=$(ls /proc/$P/task | wc -l)"
kill $P; wait $P 2>/dev/null; rm -rf $D
