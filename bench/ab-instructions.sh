#!/usr/bin/env bash
# Instructions per request of two oncerpc binaries, alternated (an A/B of a change to the hot
# path, such as issue 48's move of the flow engine into its own crate): under valgrind's
# callgrind, counters zeroed after 200 warm-up calls, then CALLS calls on one keep-alive
# connection (Python requests), the dump's total / CALLS. Two requests, default configuration,
# memory store:
#   sum    the `/rpc` `sum` query (a demo method: no store, no upstream);
#   flow   a keyed one-step flow command on `/rpc`, a new key each call, its step `POST`ed to a
#          local upstream (Python's http.server; its CPU is not counted).
#
#   bench/ab-instructions.sh A_BINARY B_BINARY [CALLS] [ROUNDS]
#   (./scripts/test.sh once, for target/py-venv's requests)
set -euo pipefail
A=$1
B=$2
N=${3:-2000}
ROUNDS=${4:-2}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=$ROOT/target/py-venv/bin/python
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
G=18801
UP=18802

cat > "$WORK/upstream.py" <<'PYTHON'
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = b'{"ok":true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PYTHON
$PY "$WORK/upstream.py" $UP &

cat > "$WORK/c.toml" <<TOML
listen = "127.0.0.1:$G"
demo = true
[store]
url = "memory://"
[[methods]]
name = "orders.create"
kind = "command"
  [[methods.steps]]
  name = "charge"
  url = "http://127.0.0.1:$UP/charge"
TOML

cat > "$WORK/client.py" <<'PYTHON'
import json, sys, uuid, requests
url, what, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = requests.Session()
run = uuid.uuid4().hex
for i in range(n):
    if what == "sum":
        body = {"jsonrpc": "2.0", "id": 1, "method": "sum", "params": [1, 2, 3]}
        want = '"result":6'
    else:
        body = {"jsonrpc": "2.0", "id": 1, "method": "orders.create",
                "params": {"sku": "A-1", "idempotency_key": f"{run}-{i}"}}
        want = '"result":{"ok":true}'
    r = s.post(url, data=json.dumps(body), headers={"Content-Type": "application/json"})
    assert r.status_code == 200 and want in r.text, r.text
PYTHON

# measure BINARY WHAT: instructions per call.
measure() {
  rm -f "$WORK"/cg.*
  valgrind --tool=callgrind --callgrind-out-file="$WORK/cg.%p" "$1" serve --config "$WORK/c.toml" \
    > "$WORK/gw.log" 2>&1 &
  local vg=$!
  for _ in $(seq 1 300); do curl -s "127.0.0.1:$G/healthz" >/dev/null && break; sleep 0.2; done
  $PY "$WORK/client.py" "http://127.0.0.1:$G/rpc" "$2" 200
  callgrind_control -z $vg >/dev/null 2>&1
  $PY "$WORK/client.py" "http://127.0.0.1:$G/rpc" "$2" "$N"
  callgrind_control -d $vg >/dev/null 2>&1
  sleep 1
  kill $vg; wait $vg 2>/dev/null || true
  local total
  total=$(grep -h '^summary:' "$WORK"/cg.* | awk '{print $2}' | sort -n | tail -1)
  echo $((total / N))
}

for round in $(seq 1 "$ROUNDS"); do
  for what in sum flow; do
    a=$(measure "$A" $what)
    b=$(measure "$B" $what)
    echo "round $round $what A=$a B=$b B/A=$(awk "BEGIN{printf \"%.3f\", $b / $a}")"
  done
done
