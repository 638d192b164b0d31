// Drive oncerpc's HTTP door with the npm package json-rpc-2.0 (its JSONRPCClient resolves a
// batch only when every id it sent comes back: a lone error object would leave it waiting
// forever). Usage: node node_client.cjs http://127.0.0.1:PORT/rpc
// Prints ONCERPC-NODE-OK and exits 0 when every check passes.
const { JSONRPCClient } = require("json-rpc-2.0");

const url = process.argv[2];
const client = new JSONRPCClient(async (payload) => {
  const resp = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(payload),
  });
  if (resp.status === 200) {
    client.receive(await resp.json());
  } else if (resp.status !== 204) {
    throw new Error(`HTTP ${resp.status}`);
  }
});

function check(what, cond, detail) {
  if (!cond) {
    console.error(`FAILED: ${what} ${detail === undefined ? "" : JSON.stringify(detail)}`);
    process.exit(1);
  }
  console.log(`ok: ${what}`);
}

async function main() {
  const deadline = setTimeout(() => {
    console.error("FAILED: a call never resolved (waiting for ids that never came)");
    process.exit(1);
  }, 15000);

  check("single call", (await client.request("sum", [1, 2])) === 3);

  const small = await client.requestAdvanced([
    { jsonrpc: "2.0", id: 1, method: "sum", params: [1, 2] },
    { jsonrpc: "2.0", id: 2, method: "sum", params: [3, 4] },
  ]);
  check("a batch within the limit", small.length === 2 && small[0].result === 3 && small[1].result === 7, small);

  // 51 entries, one over the default batch.max_size (50): every call resolves with -32600.
  const ids = Array.from({ length: 51 }, (_, i) => `n-${i}`);
  const big = await client.requestAdvanced(
    ids.map((id) => ({ jsonrpc: "2.0", id, method: "counter.increment", params: { by: 1 } })),
  );
  check("every call of an oversized batch resolves", big.length === 51, big.length);
  check(
    "each with -32600 and its own id",
    big.every((r, i) => r.error && r.error.code === -32600 && r.id === ids[i] && r.result === undefined),
    big.find((r, i) => !(r.error && r.error.code === -32600 && r.id === ids[i])),
  );
  check("nothing ran", (await client.request("counter.get", {})).total === 0);

  clearTimeout(deadline);
  console.log("ONCERPC-NODE-OK");
}

main().catch((e) => {
  console.error(`FAILED: ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
