// The official MCP TypeScript SDK (@modelcontextprotocol/sdk, session era) drives oncerpc's
// MCP door over Streamable HTTP.
//
// Usage: node mcp_ts_client.mjs URL API_KEY KEY   (NODE_PATH: the node_modules holding the SDK)
// Lists the tools, calls the `orders_create` tool twice with the same key and once with the
// same key but other arguments, calls the `subtract` query, and prints one JSON object with
// what it saw (the Rust test asserts on it and on the upstream's count of calls).
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.NODE_PATH, "noop.js"));
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");

const [url, apiKey, key] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${apiKey}` } },
});
const client = new Client({ name: "oncerpc-test", version: "1.0.0" });
await client.connect(transport);

const summary = (r) => ({
  is_error: r.isError ?? false,
  text: r.content?.[0]?.text ?? null,
  structured: r.structuredContent ?? null,
  status: r._meta?.["io.oncerpc/idempotency-status"] ?? null,
  key: r._meta?.["io.oncerpc/idempotency-key"] ?? null,
});

const tools = await client.listTools();
const args = { sku: "A-1", idempotency_key: key };
const first = await client.callTool({ name: "orders_create", arguments: args });
const again = await client.callTool({ name: "orders_create", arguments: args });
const other = await client.callTool({ name: "orders_create", arguments: { sku: "B-2", idempotency_key: key } });
const query = await client.callTool({ name: "subtract", arguments: { minuend: 7, subtrahend: 2 } });
console.log(JSON.stringify({
  protocol: transport.protocolVersion ?? null,
  server: client.getServerVersion()?.name,
  tools: tools.tools.map((t) => t.name).sort(),
  first: summary(first),
  again: summary(again),
  other: summary(other),
  query: summary(query),
}));
await transport.terminateSession();
await client.close();
