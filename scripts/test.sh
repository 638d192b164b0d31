#!/usr/bin/env bash
# The whole test suite, with everything it needs, on a fresh machine of this kind.
# Usage: ./scripts/test.sh [extra cargo test args]
#
# Installs (when missing): emacs-nox (Debian) for the jsonrpc.el client test, a Python venv
# under target/ with jsonrpcclient + requests and the npm package json-rpc-2.0 under
# target/node-clients for the client-library tests, and Redis and
# PostgreSQL (started when down) for the multi-replica stores. In CI (CI=true) anything that
# cannot be installed or reached is a failure; elsewhere the tests that need it skip with a
# printed reason.
set -euo pipefail
cd "$(dirname "$0")/.."

ci() { [[ "${CI:-}" == "true" || "${CI:-}" == "1" ]]; }
need() { # need WHAT: fail in CI, warn elsewhere
  if ci; then echo "error: $1 is required in CI and could not be installed" >&2; exit 1; fi
  echo "warning: $1 is not available: the tests that need it will skip" >&2
}
as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo -n "$@"; else return 1; fi
}
APT_UPDATED=
apt_install() {
  command -v apt-get >/dev/null || return 1
  if [ -z "$APT_UPDATED" ]; then as_root apt-get update -qq || true; APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >/dev/null
}

command -v cargo >/dev/null || { echo "cargo not found: install Rust (https://rustup.rs)" >&2; exit 1; }

# Emacs, for the jsonrpc.el end-to-end test of `oncerpc stdio`.
if ! command -v emacs >/dev/null; then
  echo "== installing emacs-nox"
  apt_install emacs-nox || need "emacs (emacs-nox)"
fi

# A Python JSON-RPC client library, for the HTTP-door client test.
PYVENV="target/py-venv"
if ! "$PYVENV/bin/python" -c 'import jsonrpcclient, requests' 2>/dev/null; then
  echo "== installing jsonrpcclient and requests into $PYVENV"
  { python3 -m venv "$PYVENV" && "$PYVENV/bin/pip" install -q 'jsonrpcclient==4.0.3' 'requests>=2.31'; } \
    || need "python3 with jsonrpcclient"
fi
export ONCERPC_PYTHON="$PWD/$PYVENV/bin/python"

# A Node JSON-RPC client library from npm (json-rpc-2.0), for the oversized-batch client test.
NODEDIR="target/node-clients"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "== installing nodejs and npm"
  apt_install nodejs npm || need "node and npm"
fi
if [ ! -d "$NODEDIR/node_modules/json-rpc-2.0" ]; then
  echo "== installing json-rpc-2.0 into $NODEDIR"
  mkdir -p "$NODEDIR"
  npm install --prefix "$NODEDIR" --no-audit --no-fund --silent 'json-rpc-2.0@1.8.1' || need "npm package json-rpc-2.0"
fi
export ONCERPC_NODE_PATH="$PWD/$NODEDIR/node_modules"

# Redis and PostgreSQL, for the multi-replica stores (127.0.0.1:6379 and :5432, trust auth,
# database "test"). Started when down, installed when missing.
wait_for() { # wait_for WHAT COMMAND...
  local what=$1; shift
  for _ in $(seq 1 60); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done
  echo "warning: $what did not come up" >&2; return 1
}
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  echo "== starting Redis"
  command -v redis-server >/dev/null || apt_install redis-server || true
  if command -v redis-server >/dev/null; then
    mkdir -p target/redis
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
      --dir "$PWD/target/redis" --logfile "$PWD/target/redis/redis.log" || true
    wait_for Redis redis-cli -h 127.0.0.1 -p 6379 ping || true
  fi
fi
if redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  export ONCERPC_TEST_REDIS_URL="redis://127.0.0.1:6379"
else
  need "Redis on 127.0.0.1:6379"
fi

# A three-primary Redis Cluster (127.0.0.1:7001-7003), for the Redis store in cluster mode.
# These nodes are the tests' own: a broken cluster of them is reset and created again.
CLUSTER_PORTS="7001 7002 7003"
cluster_ok() { # every node up and agreeing that all slots are served
  for p in $CLUSTER_PORTS; do
    redis-cli -h 127.0.0.1 -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
  done
}
cluster_joined() { # every node knows all three
  for p in $CLUSTER_PORTS; do
    redis-cli -h 127.0.0.1 -p "$p" cluster info 2>/dev/null | grep -q '^cluster_known_nodes:3' || return 1
  done
}
if command -v redis-server >/dev/null && ! cluster_ok; then
  echo "== starting a Redis Cluster on 127.0.0.1:7001-7003"
  for p in $CLUSTER_PORTS; do
    if ! redis-cli -h 127.0.0.1 -p "$p" ping >/dev/null 2>&1; then
      mkdir -p "target/redis-cluster/$p"
      redis-server --port "$p" --cluster-enabled yes --cluster-config-file "nodes-$p.conf" \
        --dir "$PWD/target/redis-cluster/$p" --daemonize yes --save "" --appendonly no \
        --bind 127.0.0.1 --logfile "$PWD/target/redis-cluster/$p/redis.log" || true
    fi
  done
  for p in $CLUSTER_PORTS; do wait_for "Redis on :$p" redis-cli -h 127.0.0.1 -p "$p" ping || true; done
  # Restarted nodes that know each other (nodes-P.conf) only need a moment to agree; fresh
  # (or half-made) ones are reset and joined into one cluster.
  if ! cluster_joined || ! wait_for "Redis Cluster state" cluster_ok; then
    for p in $CLUSTER_PORTS; do
      redis-cli -h 127.0.0.1 -p "$p" flushall >/dev/null 2>&1 || true
      redis-cli -h 127.0.0.1 -p "$p" cluster reset hard >/dev/null 2>&1 || true
    done
    redis-cli --cluster create $(for p in $CLUSTER_PORTS; do printf '127.0.0.1:%s ' "$p"; done) \
      --cluster-replicas 0 --cluster-yes >/dev/null || true
    wait_for "Redis Cluster state" cluster_ok || true
  fi
fi
if cluster_ok; then
  export ONCERPC_TEST_REDIS_CLUSTER_URL="redis://127.0.0.1:7001"
else
  need "a Redis Cluster on 127.0.0.1:7001-7003"
fi

pg_ready() { pg_isready -h 127.0.0.1 -p 5432 -q; }
if ! command -v pg_isready >/dev/null || ! pg_ready; then
  echo "== starting PostgreSQL"
  if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
    apt_install postgresql || true
    # A fresh cluster: trust local TCP connections, as on this machine kind.
    for hba in /etc/postgresql/*/main/pg_hba.conf; do
      [ -f "$hba" ] && as_root sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
    done
  fi
  for v in $(ls /etc/postgresql 2>/dev/null); do
    as_root pg_ctlcluster --skip-systemctl-redirect "$v" main start 2>/dev/null || true
  done
  command -v pg_isready >/dev/null && wait_for PostgreSQL pg_ready || true
fi
if command -v psql >/dev/null && pg_ready \
   && psql -h 127.0.0.1 -U postgres -d postgres -tAc 'SELECT 1' >/dev/null 2>&1; then
  psql -h 127.0.0.1 -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1 \
    || psql -h 127.0.0.1 -U postgres -d postgres -qc 'CREATE DATABASE test'
  export ONCERPC_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:5432/test"
else
  need "PostgreSQL on 127.0.0.1:5432 (trust auth)"
fi

# One build, one run for the whole workspace: unit, integration and property tests, and the
# benchmarks compiled and run once each in test mode; then the doc tests.
cargo test --workspace --all-targets --no-fail-fast "$@"
cargo test --workspace --doc
