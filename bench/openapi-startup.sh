#!/usr/bin/env bash
# What importing a large OpenAPI document costs at start (issue 46): the release binary's
# `check-config` and `serve` on GitHub's REST API description (from the npm package
# @octokit/openapi that ./scripts/test.sh installs under target/node-openapi), against the same
# binary with no document. Prints, for each, the wall time and the peak resident memory
# (VmHWM, from GNU time's "Maximum resident set size"), the best of RUNS runs.
#
#   bench/openapi-startup.sh [RUNS]     (after: cargo build --release -p oncerpc; ./scripts/test.sh once)
set -euo pipefail
RUNS=${1:-3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
BIN=target/release/oncerpc
DOC=target/node-openapi/node_modules/@octokit/openapi/generated/api.github.com.json
[ -x "$BIN" ] || { echo "build it first: cargo build --release -p oncerpc" >&2; exit 2; }
[ -f "$DOC" ] || { echo "no $DOC: run ./scripts/test.sh once" >&2; exit 2; }
command -v /usr/bin/time >/dev/null || { echo "needs GNU time (apt-get install time)" >&2; exit 2; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
PORT=18791
printf 'listen = "127.0.0.1:%s"\n[store]\nurl = "memory://"\n' "$PORT" > "$WORK/none.toml"
cp "$WORK/none.toml" "$WORK/github.toml"
printf '[[openapi]]\nname = "github"\nspec = "%s"\n' "$ROOT/$DOC" >> "$WORK/github.toml"

# check NAME: the best wall time (s) and peak memory (KB) of `check-config` over RUNS runs.
check() {
  local best_s="" best_kb=""
  for _ in $(seq 1 "$RUNS"); do
    /usr/bin/time -f '%e %M' -o "$WORK/t" "$BIN" check-config "$WORK/$1.toml" > "$WORK/$1.out"
    read -r s kb < "$WORK/t"
    if [ -z "$best_s" ] || awk "BEGIN{exit !($s < $best_s)}"; then best_s=$s; fi
    if [ -z "$best_kb" ] || [ "$kb" -lt "$best_kb" ]; then best_kb=$kb; fi
  done
  echo "check-config $1: ${best_s} s, peak ${best_kb} KB, $(grep -c '^  [a-z]' "$WORK/$1.out" || true) method lines"
}

# serve NAME: the best time (s) from exec to a 200 on /healthz, and the peak memory once serving.
serve() {
  local best_s="" best_kb=""
  for _ in $(seq 1 "$RUNS"); do
    local start end
    start=$(date +%s.%N)
    "$BIN" serve --config "$WORK/$1.toml" > "$WORK/serve.log" 2>&1 &
    local pid=$!
    until curl -sf "127.0.0.1:$PORT/healthz" >/dev/null; do sleep 0.01; done
    end=$(date +%s.%N)
    local kb
    kb=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
    kill "$pid"; wait "$pid" 2>/dev/null || true
    local s
    s=$(awk "BEGIN{printf \"%.3f\", $end - $start}")
    if [ -z "$best_s" ] || awk "BEGIN{exit !($s < $best_s)}"; then best_s=$s; fi
    if [ -z "$best_kb" ] || [ "$kb" -lt "$best_kb" ]; then best_kb=$kb; fi
  done
  echo "serve $1: ready in ${best_s} s, peak ${best_kb} KB"
}

check none
check github
serve none
serve github
