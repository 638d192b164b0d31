// The official MCP TypeScript SDK (@modelcontextprotocol/sdk, session era) as an MCP host that
// signs in with OAuth: it starts with no token, gets oncerpc's 401, follows the protected
// resource metadata (RFC 9728) to the authorization server, gets a token by the
// client-credentials grant (ClientCredentialsProvider) for the resource the metadata names, and
// calls a tool.
//
// Usage: node mcp_oauth_client.mjs URL ISSUER CLIENT_ID CLIENT_SECRET SCOPE KEY
//        (NODE_PATH: the node_modules holding the SDK)
// Lists the tools, calls `orders_create` twice with the same key, and prints one JSON object
// with what it saw.
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.env.NODE_PATH, "noop.js"));
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");
const { ClientCredentialsProvider } = require("@modelcontextprotocol/sdk/client/auth-extensions.js");

const [url, issuer, clientId, clientSecret, scope, key] = process.argv.slice(2);
const authProvider = new ClientCredentialsProvider({ clientId, clientSecret, scope, expectedIssuer: issuer });
const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider });
const client = new Client({ name: "oncerpc-oauth-test", version: "1.0.0" });
await client.connect(transport);
const tools = (await client.listTools()).tools.map((t) => t.name).sort();
const args = { sku: "O-1", idempotency_key: key };
const status = (r) => r._meta?.["io.oncerpc/idempotency-status"];
const first = await client.callTool({ name: "orders_create", arguments: args });
const again = await client.callTool({ name: "orders_create", arguments: args });
const token = authProvider.tokens()?.access_token ?? "";
console.log(JSON.stringify({
  tools,
  first: { status: status(first), is_error: first.isError ?? false },
  again: { status: status(again), is_error: again.isError ?? false },
  token_kid: JSON.parse(Buffer.from(token.split(".")[0], "base64url").toString()).kid,
  token_aud: JSON.parse(Buffer.from(token.split(".")[1], "base64url").toString()).aud,
}));
await transport.close();
