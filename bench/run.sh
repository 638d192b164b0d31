#!/usr/bin/env bash
# The load benchmark in one command (docs/BENCHMARKS.md):
#
#   bench/run.sh                          # full run: 3 repetitions × 10 s per (server, scenario)
#   bench/run.sh --duration 3 --reps 1    # quick look
#   bench/run.sh --help                   # every flag
#
# Pins every server to CPU 0 and wrk to CPU 1 on a machine with 2 CPUs or more (--pin
# auto|on|off), and repeats the shared scenarios unpinned as a second table.
#
# Installs what it needs when missing (wrk, and DejaVu fonts for the chart's text; Debian
# packages, as root or with sudo), builds the release binaries (oncerpc, and the benchmark's
# jsonrpsee / floor / upstream servers), then runs target/release/oncerpc-bench with the given
# flags. Redis (127.0.0.1:6379) and PostgreSQL (127.0.0.1:5432, database "test") are used when
# reachable (./scripts/test.sh installs and starts both) and skipped, with the reason in the
# report, when not.
#
# Writes target/bench/latest.md, target/bench/latest.json, target/bench/latest.png, and for a
# full run docs/benchmarks.png. Exit status 2: some answer was wrong or some check failed.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo -n "$@"; else return 1; fi
}
APT_UPDATED=
apt_install() {
  command -v apt-get >/dev/null || return 1
  if [ -z "$APT_UPDATED" ]; then as_root apt-get update -qq || true; APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >/dev/null
}

if ! command -v wrk >/dev/null; then
  echo "== installing wrk"
  apt_install wrk || { echo "wrk is required: install it (Debian: apt-get install -y wrk)" >&2; exit 1; }
fi
if [ ! -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ]; then
  echo "== installing fonts-dejavu-core (the chart's text)"
  apt_install fonts-dejavu-core || echo "warning: no DejaVu font: the chart will have no text" >&2
fi

echo "== cargo build --release -p oncerpc -p oncerpc-bench --bins"
cargo build --release -p oncerpc -p oncerpc-bench --bins

export ONCERPC_BENCH_COMMAND="bench/run.sh${*:+ $*}"
exec "${CARGO_TARGET_DIR:-target}/release/oncerpc-bench" --no-build "$@"
