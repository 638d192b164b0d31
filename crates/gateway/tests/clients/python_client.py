"""Drive oncerpc's HTTP door with a maintained Python JSON-RPC client library (jsonrpcclient)
over `requests`. Usage: python python_client.py http://127.0.0.1:PORT/rpc
Prints ONCERPC-PYTHON-OK and exits 0 when every check passes."""
import sys

import requests
from jsonrpcclient import Error, Ok, notification, parse, request

url = sys.argv[1]


def call(method, params=None):
    resp = requests.post(url, json=request(method, params=params), timeout=10)
    assert resp.status_code == 200, resp.status_code
    return parse(resp.json()), resp


def check(what, cond, detail=""):
    if not cond:
        raise SystemExit(f"FAILED: {what} {detail}")
    print(f"ok: {what}")


# A request with a result.
res, _ = call("subtract", [42, 23])
check("subtract", isinstance(res, Ok) and res.result == 19, res)

# A notification: HTTP 204, nothing to parse.
resp = requests.post(url, json=notification("update", params=[1, 2, 3]), timeout=10)
check("notification is 204 with no body", resp.status_code == 204 and resp.content == b"", resp.status_code)

# An error.
res, _ = call("no.such.method")
check("unknown method is an Error -32601", isinstance(res, Error) and res.code == -32601, res)

# A retried command is counted once.
params = {"by": 5, "idempotency_key": "python-retry-1"}
first, r1 = call("counter.increment", params)
again, r2 = call("counter.increment", params)
check("first increment", isinstance(first, Ok) and first.result == {"total": 5}, first)
check("status new then duplicate",
      r1.headers.get("X-Idempotency-Status") == "new" and r2.headers.get("X-Idempotency-Status") == "duplicate")
check("the retry gets the same outcome", isinstance(again, Ok) and again.result == first.result, again)
total, _ = call("counter.get")
check("counted once", total.result == {"total": 5}, total)

# A batch one over the default batch.max_size (50): every call gets its own -32600 answer.
batch = [request("counter.increment", params={"by": 1}) for _ in range(51)]
resp = requests.post(url, json=batch, timeout=10)
parsed = parse(resp.json())
check("an oversized batch is answered per call, not with one error", not isinstance(parsed, (Ok, Error)), parsed)
answers = list(parsed)
check("51 answers", len(answers) == 51, len(answers))
by_id = {a.id: a for a in answers}
check("every id answered with -32600",
      all(isinstance(by_id.get(r["id"]), Error) and by_id[r["id"]].code == -32600 for r in batch), answers[:2])
total, _ = call("counter.get")
check("nothing in it ran", total.result == {"total": 5}, total)
print("ONCERPC-PYTHON-OK")
