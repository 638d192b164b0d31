#!/usr/bin/env bash
# The step journal's cost (issue 14): a sync flow of three steps against the same flow of one
# step, new key per request, on each store, with the defaults otherwise.
#
#   bench/journal-cost.sh [REPS] [SECONDS]      (after: cargo build --release -p oncerpc -p oncerpc-bench --bins)
#
# Each store gets one `oncerpc serve` with two methods, `flow1` (step `a`) and `flow3` (steps
# `a`, `b`, `c`), every step `POST`ed to one `bench-upstream`. wrk -t2 -c64, a new
# `X-Idempotency-Key` per request; the two methods alternate within each repetition. A
# three-step execution makes two journal writes (steps a and b; c's output is the completion)
# and three upstream calls where the one-step flow makes none and one. Prints req/s per run
# and the median ratio flow3 / flow1 per store.
set -euo pipefail
REPS=${1:-3}
SECS=${2:-10}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/target/release
REDIS_URL=${ONCERPC_BENCH_REDIS_URL:-redis://127.0.0.1:6379}
PG_URL=${ONCERPC_BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
command -v wrk >/dev/null || { echo "wrk is needed (apt-get install wrk)" >&2; exit 1; }

UP_PORT=19071
"$BIN/bench-upstream" --listen 127.0.0.1:$UP_PORT >/dev/null 2>&1 &
sleep 0.5
RUN=$(date +%s)

cat > "$WORK/new-key.lua" <<'EOF'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"sku":"A-1","qty":1}'
local n = 0
local prefix = ""
local counter = 0
function setup(thread) counter = counter + 1; thread:set("tid", counter) end
function init(args) prefix = args[1] .. "-" .. tid .. "-" end
function request()
  n = n + 1
  wrk.headers["X-Idempotency-Key"] = prefix .. n
  return wrk.format()
end
EOF

step() { printf '  [[methods.steps]]\n  name = "%s"\n  url = "http://127.0.0.1:%s/step"\n\n' "$1" "$UP_PORT"; }

printf '| store | flow1 req/s | flow3 req/s | flow3 / flow1 |\n|---|---|---|--:|\n'
port=19100
for store in memory sqlite redis postgres; do
  case $store in
    memory) url="memory://?capacity=5000000" ;;
    sqlite) url="sqlite://$WORK/$store.db" ;;
    redis) url="$REDIS_URL" ;;
    postgres) url="$PG_URL" ;;
  esac
  cfg="$WORK/$store.toml"
  {
    printf 'demo = false\n\n[store]\nurl = "%s"\nredis_prefix = "journal-cost-%s"\n\n' "$url" "$RUN"
    printf '[[methods]]\nname = "flow1"\nkind = "command"\n\n'; step a
    printf '[[methods]]\nname = "flow3"\nkind = "command"\n\n'; step a; step b; step c
  } > "$cfg"
  port=$((port + 1))
  (cd "$WORK" && exec "$BIN/oncerpc" serve --config "$cfg" --listen 127.0.0.1:$port >"$WORK/$store.log" 2>&1) &
  pid=$!
  for _ in $(seq 50); do curl -s "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
  if [ "$store" = postgres ]; then psql "$PG_URL" -qc "VACUUM (ANALYZE) oncerpc_records" >/dev/null 2>&1 || true; fi
  one=(); three=()
  for rep in $(seq "$REPS"); do
    for m in flow1 flow3; do
      wrk -t2 -c64 -d1s -s "$WORK/new-key.lua" "http://127.0.0.1:$port/v2/flows/$m?sync=true" -- "w$RUN-$store-$m-$rep" >/dev/null
      rps=$(wrk -t2 -c64 -d"${SECS}s" -s "$WORK/new-key.lua" "http://127.0.0.1:$port/v2/flows/$m?sync=true" -- "$RUN-$store-$m-$rep" \
        | awk '/Requests\/sec/ {print int($2)}')
      if [ "$m" = flow1 ]; then one+=("$rps"); else three+=("$rps"); fi
    done
  done
  kill "$pid"; wait "$pid" 2>/dev/null || true
  median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
  m1=$(median "${one[@]}"); m3=$(median "${three[@]}")
  printf '| %s | %s (%s) | %s (%s) | %s |\n' "$store" "$m1" "${one[*]}" "$m3" "${three[*]}" \
    "$(awk -v a="$m3" -v b="$m1" 'BEGIN {printf "%.2f", a / b}')"
done
