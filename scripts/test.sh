#!/usr/bin/env bash
# The whole test suite, with everything it needs, on a fresh machine of this kind.
# Usage: ./scripts/test.sh [extra cargo test args]
#
# Installs (when missing): mdBook for the manual (built here), emacs-nox (Debian) for the
# jsonrpc.el client test, a Python venv
# under target/ with jsonrpcclient + requests (and the MCP Python SDK and Schemathesis) and the npm package json-rpc-2.0 under
# target/node-clients for the client-library tests, the OpenAPI tools (Prism, swagger-parser,
# published documents) under target/node-openapi, the MCP clients of eight agent frameworks
# (target/py-frameworks, target/node-frameworks), and Redis and
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

# curl, for the TLS listener test (`curl --cacert`).
if ! command -v curl >/dev/null; then apt_install curl || need "curl"; fi

# Headless Chromium and its WebDriver (Debian's chromium, chromium-driver), for the console's
# real-browser test (crates/gateway/tests/console_browser.rs).
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  echo "== installing chromium and chromium-driver"
  apt_install chromium chromium-driver || need "chromium and chromium-driver"
fi

# promtool (Debian's prometheus package), for `promtool check rules` on deploy/prometheus/alerts.yml.
if ! command -v promtool >/dev/null; then
  echo "== installing prometheus (for promtool)"
  apt_install --no-install-recommends prometheus || need "promtool (prometheus)"
fi

# mdBook, to build the manual (docs/book.toml: the guides and references under docs/) below.
MDBOOK_VERSION=0.5.4
if ! mdbook --version 2>/dev/null | grep -qx "mdbook v$MDBOOK_VERSION"; then
  echo "== installing mdbook $MDBOOK_VERSION"
  cargo install mdbook --locked --version "$MDBOOK_VERSION" --no-default-features --features search \
    || need "mdbook $MDBOOK_VERSION (cargo install mdbook)"
fi

# A Python JSON-RPC client library, for the HTTP-door client test; the webhook providers' own
# signing libraries (standardwebhooks, stripe), for tests/webhooks.rs; the official MCP Python
# SDK (mcp), for tests/mcp_stdio.rs; PyJWT, for the MCP upstream that checks oncerpc's access
# tokens (tests/upstream_oauth.rs); Schemathesis, for tests/openapi_doors.rs (/openapi.json).
PYVENV="target/py-venv"
if ! "$PYVENV/bin/python" -c 'import jsonrpcclient, requests, standardwebhooks, stripe, mcp, jwt, schemathesis' 2>/dev/null; then
  echo "== installing jsonrpcclient, requests, standardwebhooks, stripe, mcp, pyjwt and schemathesis into $PYVENV"
  { python3 -m venv "$PYVENV" && "$PYVENV/bin/pip" install -q 'jsonrpcclient==4.0.3' 'requests>=2.31' \
      'standardwebhooks==1.1.0' 'stripe==16.1.0' 'mcp==1.23.3' 'pyjwt[crypto]>=2.10.1' 'schemathesis==4.32.5'; } \
    || need "python3 with jsonrpcclient, standardwebhooks, stripe, mcp, pyjwt and schemathesis"
fi
export ONCERPC_PYTHON="$PWD/$PYVENV/bin/python"

# The MCP clients of four Python agent frameworks, for tests/mcp_frameworks.rs: fastmcp,
# the OpenAI Agents SDK, Pydantic AI and LangChain's MCP adapters, in a venv of their own (a
# newer MCP SDK than the venv above's), remade when the pins change. fastmcp stays on 3.4: its
# 4.x needs the MCP SDK 2.x, which langchain-mcp-adapters does not take (mcp<2).
FWVENV="target/py-frameworks"
FWPINS="fastmcp==3.4.11 openai-agents==0.24.0 pydantic-ai-slim[mcp]==2.68.0 langchain-mcp-adapters==0.3.2 langchain-core==1.8.3 mcp==1.30.0"
if [ "$(cat "$FWVENV/pins.txt" 2>/dev/null)" != "$FWPINS" ] \
   || ! "$FWVENV/bin/python" -c 'import fastmcp, agents, pydantic_ai.mcp, langchain_mcp_adapters' 2>/dev/null; then
  echo "== installing the agent frameworks' MCP clients ($FWPINS) into $FWVENV"
  # shellcheck disable=SC2086 # each pin is one word
  if python3 -m venv --clear "$FWVENV" && "$FWVENV/bin/pip" install -q $FWPINS; then
    echo "$FWPINS" > "$FWVENV/pins.txt"
  else
    need "python3 with fastmcp, openai-agents, pydantic-ai-slim[mcp] and langchain-mcp-adapters"
  fi
fi
[ -x "$FWVENV/bin/python" ] && export ONCERPC_FRAMEWORKS_PYTHON="$PWD/$FWVENV/bin/python"

# A trace backend that takes OTLP, for tests/telemetry.rs: Arize Phoenix, an open-source trace
# store with an OTLP/HTTP receiver and a REST API to read spans back (Jaeger and the
# OpenTelemetry Collector are Go programs whose modules this machine cannot fetch). In a venv
# of its own: it brings its own pinned web stack.
PHXVENV="target/phoenix-venv"
if [ ! -x "$PHXVENV/bin/phoenix" ]; then
  echo "== installing the trace backend arize-phoenix into $PHXVENV"
  { python3 -m venv "$PHXVENV" && "$PHXVENV/bin/pip" install -q 'arize-phoenix==20.26.1'; } \
    || need "the trace backend arize-phoenix (pip)"
fi
[ -x "$PHXVENV/bin/phoenix" ] && export ONCERPC_PHOENIX="$PWD/$PHXVENV/bin/phoenix"

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

# npm packages pinned by a package-lock.json under crates/gateway/tests, each in a folder of
# its own under target/: pinned SRC DIR MARK WHAT installs SRC's lock into DIR unless it is
# there already (MARK, a path under DIR, exists) and prints DIR's absolute path when it is.
pinned() {
  local src=$1 dir=$2 mark=$3 what=$4
  if ! cmp -s "$src/package-lock.json" "$dir/package-lock.json" || [ ! -e "$dir/$mark" ]; then
    echo "== installing $what into $dir" >&2
    mkdir -p "$dir" && cp "$src/package.json" "$src/package-lock.json" "$dir/"
    (cd "$dir" && npm ci --no-audit --no-fund --silent) >&2 || need "the npm package $what"
  fi
  [ -e "$dir/$mark" ] && echo "$PWD/$dir"
  return 0
}

# The official MCP conformance suite and a Node ≥ 22 to run it (the npm package `node`; the
# system's may be older).
dir=$(pinned crates/gateway/tests/conformance target/node-conformance node_modules/.bin/conformance \
  "@modelcontextprotocol/conformance")
[ -n "$dir" ] && export ONCERPC_CONFORMANCE_DIR="$dir"

# The 0.2 line of the suite, run with --spec-version 2026-07-28 (the stateless revision), and the
# TypeScript SDK v2 client (@modelcontextprotocol/client), which speaks it.
dir=$(pinned crates/gateway/tests/conformance-2026 target/node-conformance-2026 node_modules/.bin/conformance \
  "@modelcontextprotocol/conformance@0.2")
[ -n "$dir" ] && export ONCERPC_CONFORMANCE_2026_DIR="$dir"

# A real authorization server for the access-token tests (tests/auth_tokens.rs, mcp_auth.rs):
# oidc-provider (OpenID-certified) and a Node 22 to run it.
dir=$(pinned crates/gateway/tests/oidc target/node-oidc node_modules/oidc-provider "oidc-provider")
[ -n "$dir" ] && export ONCERPC_OIDC_DIR="$dir"

# The OpenAPI tools of the [[openapi]] tests (tests/openapi_import.rs, openapi_documents.rs):
# Prism (an OpenAPI mock server that validates every request against its document),
# swagger-parser, and published documents to import (Petstore from @readme/oas-examples, GitHub's
# REST API from @octokit/openapi), with the Node ≥ 24 Prism needs (the npm package `node`).
dir=$(pinned crates/gateway/tests/openapi target/node-openapi node_modules/@stoplight/prism-cli/dist/index.js \
  "@stoplight/prism-cli")
[ -n "$dir" ] && export ONCERPC_OPENAPI_DIR="$dir"

# The MCP clients of four TypeScript agent frameworks, for tests/mcp_frameworks.rs: the AI
# SDK's @ai-sdk/mcp, Mastra's @mastra/mcp, LangChain's @langchain/mcp-adapters and the MCP
# inspector's CLI, with the Node ≥ 22 they need (the npm package `node`).
dir=$(pinned crates/gateway/tests/frameworks target/node-frameworks \
  node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js "the agent frameworks' MCP clients")
[ -n "$dir" ] && export ONCERPC_FRAMEWORKS_NODE_DIR="$dir"

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

# A Redis Cluster with replicas (127.0.0.1:7101-7106) for the failover tests
# (tests/store_failover.rs), which stop, kill and restart its nodes.
if command -v redis-server >/dev/null && scripts/ha-stores.sh redis; then
  export ONCERPC_TEST_REDIS_HA_URL="redis://127.0.0.1:7101"
else
  need "a Redis Cluster with replicas on 127.0.0.1:7101-7106"
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
  # A fresh database for every run: replicas resume the pending events of the methods they
  # serve, so an event an earlier run left pending (a test killed mid-flow) would be run again
  # by this run's replicas against their own upstreams.
  psql -h 127.0.0.1 -U postgres -d postgres -qc 'DROP DATABASE IF EXISTS test WITH (FORCE)' >/dev/null
  psql -h 127.0.0.1 -U postgres -d postgres -qc 'CREATE DATABASE test'
  export ONCERPC_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:5432/test"
  # A primary (5433) with a synchronous standby (5434), made fresh by each failover test
  # (scripts/ha-stores.sh postgres), reached by a multi-host URL that follows the primary.
  if ls /usr/lib/postgresql/*/bin/pg_basebackup >/dev/null 2>&1; then
    export ONCERPC_TEST_POSTGRES_HA_URL="postgres://postgres@127.0.0.1:5433,127.0.0.1:5434/test?target_session_attrs=read-write"
  else
    need "PostgreSQL's server binaries (pg_basebackup) for the failover tests"
  fi
else
  need "PostgreSQL on 127.0.0.1:5432 (trust auth)"
fi

# TLS to the stores (SPEC §13): a private test CA and a server certificate for 127.0.0.1 /
# localhost, made once with openssl and kept outside the checkout (PostgreSQL reads them from
# its configuration, which outlives any clone). PostgreSQL gets `ssl = on` with them (a reload,
# not a restart), and a second Redis serves TLS only on :6390 with a password.
TLSDIR="${ONCERPC_TEST_TLS_DIR:-/var/lib/oncerpc-test-tls}"
REDIS_TLS_PORT=6390
REDIS_TLS_PASSWORD="oncerpc-s3cr3t-redis-tls"
tls_certs_ok() {
  [ -s "$TLSDIR/ca.crt" ] && [ -s "$TLSDIR/server.key" ] \
    && openssl x509 -checkend 86400 -noout -in "$TLSDIR/server.crt" >/dev/null 2>&1 \
    && openssl verify -CAfile "$TLSDIR/ca.crt" "$TLSDIR/server.crt" >/dev/null 2>&1
}
if ! command -v openssl >/dev/null; then apt_install openssl || need "openssl"; fi
if command -v openssl >/dev/null && ! tls_certs_ok; then
  echo "== making the test CA and server certificate in $TLSDIR"
  as_root mkdir -p "$TLSDIR"
  as_root sh -ec "cd '$TLSDIR'
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key -out ca.crt \
      -days 3650 -subj '/CN=oncerpc test CA' \
      -addext 'basicConstraints=critical,CA:TRUE' -addext 'keyUsage=critical,keyCertSign,cRLSign' 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout server.key -out server.csr \
      -subj '/CN=localhost' 2>/dev/null
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > server.ext
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 3650 \
      -extfile server.ext 2>/dev/null
    chmod 755 . ; chmod 644 ca.crt server.crt; chmod 600 ca.key; chmod 640 server.key"
  if getent group postgres >/dev/null; then as_root chgrp postgres "$TLSDIR/server.key"; fi
fi
tls_certs_ok && export ONCERPC_TEST_TLS_CA="$TLSDIR/ca.crt" || need "the test TLS certificates in $TLSDIR"

pg_sql() { psql -h 127.0.0.1 -U postgres -d postgres -tAc "$1"; }
pg_tls_ok() {
  psql "host=127.0.0.1 port=5432 user=postgres dbname=test sslmode=verify-full sslrootcert=$TLSDIR/ca.crt" \
    -tAc 'SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()' 2>/dev/null | grep -q '^t$'
}
if [ -n "${ONCERPC_TEST_POSTGRES_URL:-}" ] && [ -n "${ONCERPC_TEST_TLS_CA:-}" ] && ! pg_tls_ok; then
  echo "== turning on TLS in PostgreSQL (ssl = on, certificate from $TLSDIR)"
  pg_sql "ALTER SYSTEM SET ssl_cert_file = '$TLSDIR/server.crt'" >/dev/null
  pg_sql "ALTER SYSTEM SET ssl_key_file = '$TLSDIR/server.key'" >/dev/null
  pg_sql "ALTER SYSTEM SET ssl = on" >/dev/null
  pg_sql "SELECT pg_reload_conf()" >/dev/null
  if ! wait_for "PostgreSQL with TLS" pg_tls_ok; then
    # A server that cannot take ssl on a reload (an old one): restart it.
    for v in $(ls /etc/postgresql 2>/dev/null); do
      as_root pg_ctlcluster --skip-systemctl-redirect "$v" main restart 2>/dev/null || true
    done
    wait_for "PostgreSQL with TLS" pg_tls_ok || true
  fi
fi
if pg_tls_ok; then
  export ONCERPC_TEST_POSTGRES_TLS_URL="postgres://postgres:oncerpc-s3cr3t-pg@127.0.0.1:5432/test?sslmode=verify-full&sslrootcert=$TLSDIR/ca.crt"
else
  need "PostgreSQL with ssl = on on 127.0.0.1:5432"
fi

redis_tls_ping() {
  REDISCLI_AUTH="$REDIS_TLS_PASSWORD" redis-cli --tls --cacert "$TLSDIR/ca.crt" -h 127.0.0.1 -p "$REDIS_TLS_PORT" ping 2>/dev/null | grep -q PONG
}
if command -v redis-server >/dev/null && [ -n "${ONCERPC_TEST_TLS_CA:-}" ] && ! redis_tls_ping; then
  echo "== starting Redis with TLS on 127.0.0.1:$REDIS_TLS_PORT"
  mkdir -p target/redis-tls
  redis-server --daemonize yes --bind 127.0.0.1 --port 0 --tls-port "$REDIS_TLS_PORT" \
    --tls-cert-file "$TLSDIR/server.crt" --tls-key-file "$TLSDIR/server.key" \
    --tls-ca-cert-file "$TLSDIR/ca.crt" --tls-auth-clients no --requirepass "$REDIS_TLS_PASSWORD" \
    --save "" --appendonly no --dir "$PWD/target/redis-tls" --logfile "$PWD/target/redis-tls/redis.log" || true
  wait_for "Redis with TLS" redis_tls_ping || true
fi
if redis_tls_ping; then
  export ONCERPC_TEST_REDIS_TLS_URL="rediss://default:$REDIS_TLS_PASSWORD@127.0.0.1:$REDIS_TLS_PORT/0"
else
  need "Redis with TLS on 127.0.0.1:$REDIS_TLS_PORT (redis-server built with TLS)"
fi

# The manual, as a book: a broken SUMMARY.md or page is an error (its links are checked offline
# by crates/gateway/tests/docs_links.rs, in the test run below).
if command -v mdbook >/dev/null; then
  echo "== mdbook build docs"
  mdbook build docs
else
  need "mdbook"
fi

# One build, one run for the whole workspace: unit, integration and property tests, and the
# benchmarks compiled and run once each in test mode; then the doc tests.
# Every log line of every gateway the tests start is kept here, then searched for the tests'
# secrets: each one (store passwords, API keys) contains the marker "s3cr3t".
export ONCERPC_TEST_LOG_DIR="$PWD/target/test-logs"
rm -rf "$ONCERPC_TEST_LOG_DIR"
cargo test --workspace --all-targets --no-fail-fast "$@"
cargo test --workspace --doc
# The Debian package, built from the dev binary the tests above used (scripts/package.sh builds
# the dist profile by default; its LTO build is too slow for every CI run): installed, served,
# removed. Needs root; skips with a reason elsewhere, fails in CI.
./scripts/package-test.sh
if [ -d "$ONCERPC_TEST_LOG_DIR" ]; then
  kept=$(find "$ONCERPC_TEST_LOG_DIR" -type f | wc -l)
  if grep -rl 's3cr3t' "$ONCERPC_TEST_LOG_DIR"; then
    echo "error: a secret reached the log files above" >&2; exit 1
  fi
  echo "== no secret in the $kept kept gateway logs"
fi
