// The official MCP TypeScript SDK v2 client (@modelcontextprotocol/client), pinned to the
// stateless revision 2026-07-28, drives oncerpc's MCP door over Streamable HTTP.
//
// Usage: node mcp_client_2026.mjs URL_A URL_B API_KEY KEY   (NODE_PATH: the node_modules holding it)
// Connects one client to each URL (two replicas, or the same URL twice), lists the tools on A,
// calls the `orders_create` tool on A, retries it with the same key on B, calls it with the
// same key but other arguments on A, calls the `subtract` query on B, and prints one JSON
// object with what it saw (the Rust test asserts on it and on the upstream's count of calls).
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.NODE_PATH, "noop.js"));
const { Client, StreamableHTTPClientTransport } = require("@modelcontextprotocol/client");

const [urlA, urlB, apiKey, key] = process.argv.slice(2);

// A pins 2026-07-28; B negotiates ("auto": asks server/discover, falls back to initialize
// only when the server is not modern), so both must end up in the modern era.
async function connect(url, mode) {
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${apiKey}` } },
  });
  const client = new Client({ name: "oncerpc-test-2026", version: "1.0.0" }, { versionNegotiation: { mode } });
  await client.connect(transport);
  return client;
}

const summary = (r) => ({
  is_error: r.isError ?? false,
  text: r.content?.[0]?.text ?? null,
  structured: r.structuredContent ?? null,
  status: r._meta?.["io.oncerpc/idempotency-status"] ?? null,
  key: r._meta?.["io.oncerpc/idempotency-key"] ?? null,
});

const a = await connect(urlA, { pin: "2026-07-28" });
const b = await connect(urlB, "auto");
const tools = await a.listTools();
const args = { sku: "A-1", idempotency_key: key };
const first = await a.callTool({ name: "orders_create", arguments: args });
const again = await b.callTool({ name: "orders_create", arguments: args });
const other = await a.callTool({ name: "orders_create", arguments: { sku: "B-2", idempotency_key: key } });
const query = await b.callTool({ name: "subtract", arguments: { minuend: 7, subtrahend: 2 } });
const discover = a.getDiscoverResult();
console.log(JSON.stringify({
  era: [a.getProtocolEra() ?? null, b.getProtocolEra() ?? null],
  versions: discover?.supportedVersions ?? null,
  server: discover?._meta?.["io.modelcontextprotocol/serverInfo"]?.name ?? a.getServerVersion()?.name ?? null,
  tools: tools.tools.map((t) => t.name).sort(),
  tools_ttl_ms: tools.ttlMs ?? null,
  first: summary(first),
  again: summary(again),
  other: summary(other),
  query: summary(query),
}));
await a.close();
await b.close();
