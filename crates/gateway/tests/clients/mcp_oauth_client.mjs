// The official MCP TypeScript SDK (@modelcontextprotocol/sdk, session era) as an MCP host that
// signs in with OAuth: it starts with no token, gets oncerpc's 401, follows the protected
// resource metadata (RFC 9728) to the authorization server, gets a token by the
// client-credentials grant (ClientCredentialsProvider) for the resource the metadata names, and
// calls a tool. With CLIENT_ID "register:NAME" it has no client yet: the SDK registers one
// named NAME at the authorization server's registration endpoint (dynamic client registration,
// RFC 7591) and uses the client id and secret it is given.
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

// A client-credentials client that registers itself first.
class RegisteringProvider extends ClientCredentialsProvider {
  constructor(name) {
    super({ clientId: "unregistered", clientSecret: "", scope, clientName: name, expectedIssuer: issuer });
    this._clientInfo = undefined;
  }
  get clientMetadata() {
    // No redirect: no authorization-code flow, so no response types; ES256 is the server's key.
    return { ...super.clientMetadata, response_types: [], id_token_signed_response_alg: "ES256" };
  }
}
const authProvider = clientId.startsWith("register:")
  ? new RegisteringProvider(clientId.slice("register:".length))
  : new ClientCredentialsProvider({ clientId, clientSecret, scope, expectedIssuer: issuer });
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
  token_client_id: JSON.parse(Buffer.from(token.split(".")[1], "base64url").toString()).client_id,
  client_id: authProvider.clientInformation()?.client_id,
}));
await transport.close();
