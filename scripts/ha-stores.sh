#!/usr/bin/env bash
# Highly available stores for the failover tests (crates/gateway/tests/store_failover.rs), on
# ports of their own, with their data under target/:
#
#   ha-stores.sh redis             a Redis Cluster of three primaries and three replicas on
#                                  127.0.0.1:7101-7106 (cluster-node-timeout 2 s); nodes that
#                                  are down are started again, a broken cluster is made anew
#   ha-stores.sh redis-node PORT   start node PORT again (after a test killed it); it rejoins
#   ha-stores.sh postgres          a fresh PostgreSQL primary on 127.0.0.1:5433 with a
#                                  synchronous standby on 127.0.0.1:5434 (trust auth, database
#                                  test); whatever ran there before is stopped and removed
#   ha-stores.sh pg-ctl NAME ARGS  pg_ctl on instance NAME (primary|standby), as postgres
#
# Prints nothing on success but what it starts; exits non-zero if a store does not come up.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD/target/ha-stores"
REDIS_PORTS="7101 7102 7103 7104 7105 7106"

wait_for() { # wait_for WHAT CMD...: up to 20 s
  for _ in $(seq 1 100); do "${@:2}" >/dev/null 2>&1 && return 0; sleep 0.2; done
  echo "error: $1 did not come up" >&2
  return 1
}

redis_node() {
  local p="$1" dir="$ROOT/redis/$1"
  redis-cli -h 127.0.0.1 -p "$p" ping >/dev/null 2>&1 && return 0
  mkdir -p "$dir"
  redis-server --port "$p" --cluster-enabled yes --cluster-config-file "nodes-$p.conf" \
    --cluster-node-timeout 2000 --dir "$dir" --daemonize yes --save "" --appendonly no \
    --bind 127.0.0.1 --logfile "$dir/redis.log" --pidfile "$dir/redis.pid"
  wait_for "Redis on :$p" redis-cli -h 127.0.0.1 -p "$p" ping
}

redis_ok() { # every node up, all slots served, three primaries with a replica each
  for p in $REDIS_PORTS; do
    redis-cli -h 127.0.0.1 -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || return 1
    redis-cli -h 127.0.0.1 -p "$p" cluster info 2>/dev/null | grep -q '^cluster_known_nodes:6' || return 1
  done
  local nodes
  nodes=$(redis-cli -h 127.0.0.1 -p 7101 cluster nodes)
  [ "$(grep -c ' master ' <<<"$(sed 's/,/ /g' <<<"$nodes")" | tr -d ' ')" = 3 ] || return 1
  [ "$(grep -v 'fail' <<<"$nodes" | grep -c 'slave')" = 3 ] || return 1
}

redis_cluster() {
  for p in $REDIS_PORTS; do redis_node "$p"; done
  # A slot a test left half moved (importing/migrating) is settled first.
  for p in $REDIS_PORTS; do
    if redis-cli -h 127.0.0.1 -p "$p" cluster nodes 2>/dev/null | grep myself | grep -q '\['; then
      redis-cli --cluster fix "127.0.0.1:$p" --cluster-yes >/dev/null 2>&1 || true
    fi
  done
  # Nodes that know each other only need a moment to agree; a cluster that does not come
  # right is made anew.
  if ! wait_for "the Redis Cluster on :7101-7106" redis_ok 2>/dev/null; then
    echo "== making the Redis Cluster on 127.0.0.1:7101-7106 anew"
    for p in $REDIS_PORTS; do
      redis-cli -h 127.0.0.1 -p "$p" flushall >/dev/null 2>&1 || true
      redis-cli -h 127.0.0.1 -p "$p" cluster reset hard >/dev/null 2>&1 || true
    done
    redis-cli --cluster create $(for p in $REDIS_PORTS; do printf '127.0.0.1:%s ' "$p"; done) \
      --cluster-replicas 1 --cluster-yes >/dev/null
    wait_for "the Redis Cluster on :7101-7106" redis_ok
  fi
}

PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
pg_ctl_of() { local name="$1"; shift; as_pg "$PGBIN/pg_ctl" -D "$ROOT/pg/$name" -l "$ROOT/pg/$name.log" "$@"; }

postgres_pair() {
  [ -n "$PGBIN" ] || { echo "error: PostgreSQL's binaries are not installed" >&2; return 1; }
  for name in primary standby; do
    [ -d "$ROOT/pg/$name" ] && pg_ctl_of "$name" stop -m immediate >/dev/null 2>&1 || true
  done
  rm -rf "$ROOT/pg"
  mkdir -p "$ROOT/pg"
  [ "$(id -u)" = 0 ] && chown postgres "$ROOT/pg"
  as_pg "$PGBIN/initdb" -D "$ROOT/pg/primary" -U postgres -A trust >/dev/null
  printf "%s\n" "port = 5433" "listen_addresses = '127.0.0.1'" "unix_socket_directories = '$ROOT/pg'" \
    "wal_level = replica" "max_wal_senders = 4" >>"$ROOT/pg/primary/postgresql.conf"
  echo "host replication all 127.0.0.1/32 trust" >>"$ROOT/pg/primary/pg_hba.conf"
  pg_ctl_of primary start -w >/dev/null
  as_pg psql -h 127.0.0.1 -p 5433 -U postgres -d postgres -qc 'CREATE DATABASE test'
  as_pg "$PGBIN/pg_basebackup" -d "host=127.0.0.1 port=5433 user=postgres application_name=standby" \
    -D "$ROOT/pg/standby" -R -X stream -c fast
  # The standby keeps the primary's synchronous_standby_names, as a copy of a configured
  # primary does: promoted, it still waits for a synchronous standby that does not exist.
  printf "%s\n" "port = 5434" "synchronous_standby_names = 'standby'" >>"$ROOT/pg/standby/postgresql.conf"
  pg_ctl_of standby start -w >/dev/null
  # Once the standby is there, the primary's commits wait for it.
  as_pg psql -h 127.0.0.1 -p 5433 -U postgres -d postgres -qc "ALTER SYSTEM SET synchronous_standby_names = 'standby'"
  as_pg psql -h 127.0.0.1 -p 5433 -U postgres -d postgres -qAtc 'SELECT pg_reload_conf()' >/dev/null
  wait_for "the synchronous standby" sh -c "psql -h 127.0.0.1 -p 5433 -U postgres -d postgres -tAc \
    \"SELECT 1 FROM pg_stat_replication WHERE application_name = 'standby' AND sync_state = 'sync'\" | grep -q 1"
}

case "${1:-}" in
  redis) redis_cluster ;;
  redis-node) redis_node "$2" ;;
  postgres) postgres_pair ;;
  pg-ctl) shift; pg_ctl_of "$@" ;;
  *) echo "usage: $0 redis | redis-node PORT | postgres | pg-ctl primary|standby ARGS" >&2; exit 2 ;;
esac
