// The official MCP TypeScript SDK (@modelcontextprotocol/sdk, session era) as an agent calling a
// tool oncerpc re-exports from an upstream MCP server (tests/mcp_upstreams.rs).
//
// Usage: node mcp_upstream_ts_client.mjs URL KEY   (NODE_PATH: the node_modules holding the SDK)
// Calls `charge` twice with KEY and once with KEY and other arguments; prints one JSON object.
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.NODE_PATH, "noop.js"));
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");

const [url, key] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url));
const client = new Client({ name: "oncerpc-upstream-test", version: "1.0.0" });
await client.connect(transport);

const summary = (r) => ({
  is_error: r.isError ?? false,
  text: r.content?.[0]?.text ?? null,
  structured: r.structuredContent ?? null,
  status: r._meta?.["io.oncerpc/idempotency-status"] ?? null,
});

const args = { amount: 11, card: "visa", idempotency_key: key };
const first = await client.callTool({ name: "charge", arguments: args });
const again = await client.callTool({ name: "charge", arguments: args });
const other = await client.callTool({ name: "charge", arguments: { amount: 12, card: "visa", idempotency_key: key } });
console.log(JSON.stringify({ first: summary(first), again: summary(again), other: summary(other) }));
await transport.terminateSession();
await client.close();
