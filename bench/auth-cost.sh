#!/usr/bin/env bash
# Access tokens against API keys (issue 50): instructions per `/rpc` `sum` query of the release
# binary under callgrind, with an API key, with a cached JWT access token, and for a token seen
# for the first time (its ES256 signature checked). Default configuration otherwise.
#
#   bench/auth-cost.sh [CALLS]     (after: cargo build --release -p oncerpc; ./scripts/test.sh
#                                   once, for target/node-oidc and target/py-venv)
#
# An oidc-provider (tests/clients/oidc_provider.mjs) issues the tokens; the gateway runs under
# valgrind --tool=callgrind, its counters zeroed after 200 warm-up calls, then CALLS calls on
# one keep-alive connection (Python requests); the figure is the dump's total / CALLS.
set -euo pipefail
N=${1:-2000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=target/py-venv/bin/python
NODE=target/node-oidc/node_modules/.bin/node
export NODE_PATH=$ROOT/target/node-oidc/node_modules
WORK=$(mktemp -d)
P=18777; G=18778; R="http://127.0.0.1:$G/"
KEY=acme-bench-key-0123456789
$NODE crates/gateway/tests/clients/oidc_provider.mjs keygen k1 "$WORK"
$NODE crates/gateway/tests/clients/oidc_provider.mjs serve $P "$R" "$WORK/k1.jwk.json" > "$WORK/idp.log" 2>&1 &
IDP=$!
trap 'kill $IDP 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$P/.well-known/openid-configuration" >/dev/null && break; sleep 0.1; done
token() {
  curl -s -u acme-service:acme-client-s3cr3t-0001 \
    -d "grant_type=client_credentials&scope=orders:read&resource=$(printf '%s' "$R" | sed 's/:/%3A/g; s|/|%2F|g')" \
    "http://127.0.0.1:$P/token" | $PY -c 'import json,sys; print(json.load(sys.stdin)["access_token"])'
}
TOKEN=$(token)
for _ in $(seq 1 100); do token; done > "$WORK/tokens.txt"
cat > "$WORK/c.toml" <<TOML
listen = "127.0.0.1:$G"
[store]
url = "memory://"
[[auth.issuers]]
issuer = "http://127.0.0.1:$P"
audience = "$R"
tenant = "acme"
[[tenants]]
name = "acme"
api_keys = ["$KEY"]
TOML
cat > "$WORK/client.py" <<'PYTHON'
import json, sys, requests
url, header, prefix, values, n = sys.argv[1], sys.argv[2], sys.argv[3], open(sys.argv[4]).read().split(), int(sys.argv[5])
s = requests.Session()
body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "sum", "params": [1, 2, 3]})
for i in range(n):
    r = s.post(url, data=body, headers={header: prefix + values[i % len(values)], "Content-Type": "application/json"})
    assert r.status_code == 200 and '"result":6' in r.text, r.text
PYTHON
# measure NAME HEADER PREFIX FILE CALLS: instructions per call (the header's value: PREFIX and
# the next word of FILE, in turn)
measure() {
  valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.$1.%p" target/release/oncerpc serve --config "$WORK/c.toml" \
    > "$WORK/$1.log" 2>&1 &
  local vg=$!
  for _ in $(seq 1 300); do curl -s "127.0.0.1:$G/healthz" >/dev/null && break; sleep 0.2; done
  # Warm up with the same credential (a cached token is cached then), or, for the first
  # verifications, with the API key (the tokens stay unseen).
  if [ "$1" = first_jwt ]; then
    $PY "$WORK/client.py" "http://127.0.0.1:$G/rpc" X-API-Key "" "$WORK/key.txt" 200
  else
    $PY "$WORK/client.py" "http://127.0.0.1:$G/rpc" "$2" "$3" "$4" 200
  fi
  callgrind_control -z $vg >/dev/null
  $PY "$WORK/client.py" "http://127.0.0.1:$G/rpc" "$2" "$3" "$4" "$5"
  callgrind_control -d $vg >/dev/null
  sleep 1
  kill $vg; wait $vg 2>/dev/null || true
  local total
  total=$(grep -h '^summary:' "$WORK"/cg."$1".* | awk '{print $2}' | sort -n | tail -1)
  echo "$1 $((total / $5))"
}
echo "$KEY" > "$WORK/key.txt"
echo "$TOKEN" > "$WORK/token.txt"
measure api_key X-API-Key "" "$WORK/key.txt" "$N"
measure cached_jwt Authorization "Bearer " "$WORK/token.txt" "$N"
measure first_jwt Authorization "Bearer " "$WORK/tokens.txt" 100
