# Shared by the shell benches that replay LoCoMo against a service (bench/exact-tokens.sh, bench/first-traffic.sh,
# bench/replay-busy.sh). Source it from the project root after `set -euo pipefail`.

# The service's start command as `npm start` gives it: node with SERVICE_NODE_FLAGS (src/config/node-flags.ts,
# read from the build, so the flags live in one place), then `serve`'s script. Needs `npm run build`.
read -ra SERVICE_NODE < <(node --input-type=module -e \
  "import { SERVICE_NODE_FLAGS } from './dist/src/config/node-flags.js'; console.log(['node', ...SERVICE_NODE_FLAGS].join(' '))")
[ "${SERVICE_NODE[0]:-}" = node ] || { echo "cannot read SERVICE_NODE_FLAGS from dist/: run npm run build" >&2; exit 1; }
SERVICE_NODE+=(dist/src/tools/cli/main.js)

# bench_store <locomo dir>: a temporary work folder ($WORK, removed by the caller's EXIT trap), the service
# command line ($CLI) and an embedded store ($DB) holding the LoCoMo conversations of $LOCOMO (<locomo dir>).
bench_store() {
  LOCOMO=$1
  WORK=$(mktemp -d)
  DB="$WORK/store.db"
  CLI="node dist/src/tools/cli/main.js"
  IBEX_CONTEXT_EMBEDDED_DB="$DB" $CLI ingest --locomo "$LOCOMO" >"$WORK/ingest.json"
}

# wait_ready <admin port> <tries>: polls /readyz every 0.2 s, at most <tries> times (no error if never ready:
# the replay that follows reports the failures).
wait_ready() {
  for _ in $(seq 1 "$2"); do
    curl -sf "http://127.0.0.1:$1/readyz" >/dev/null 2>&1 && break
    sleep 0.2
  done
}

# write_result <name>: copies the JSON object on stdin to stdout and to bench/results/<name>.json, with a
# `run` field (the short git commit, `-dirty` when the tree has uncommitted changes, and the ISO time).
write_result() {
  mkdir -p bench/results
  local commit
  commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  if [ "$commit" != unknown ] && [ -n "$(git status --porcelain 2>/dev/null)" ]; then commit="$commit-dirty"; fi
  node -e '
    const text = require("fs").readFileSync(0, "utf8");
    const r = { ...JSON.parse(text), run: { commit: process.argv[1], date: new Date().toISOString() } };
    process.stdout.write(`${JSON.stringify(r, null, 2)}\n`);
  ' "$commit" | tee "bench/results/$1.json"
}
