// A real OAuth 2.1 / OpenID Connect authorization server for the access-token tests:
// oidc-provider (OpenID-certified), with the client-credentials grant, resource indicators
// (RFC 8707: JWT access tokens whose audience is oncerpc's resource) and introspection.
//
// Usage (NODE_PATH: the node_modules holding oidc-provider):
//   node oidc_provider.mjs keygen KID OUT_DIR   writes OUT_DIR/KID.jwk.json (a private ES256 JWK)
//                                               and OUT_DIR/KID.pem (the same key, PKCS#8)
//   node oidc_provider.mjs serve PORT RESOURCE KEYS...   serves http://127.0.0.1:PORT, signing
//                                               with the first of the KEYS (JWK files), publishing all
// Clients (client_secret_basic): acme-service (orders:read orders:write), acme-reader
// (orders:read), beta-service (orders:read orders:write), gamma-service (a tenant oncerpc does
// not have), and oncerpc-gateway (oncerpc's own, for introspection). Every access token carries
// org_id: the first part of the client's name (a registered client's client_name, else its id).
// A token for RESOURCE is a JWT, for RESOURCE + "opaque" an opaque one (introspection at
// /token/introspection says what it is), for UPSTREAM_RESOURCE a JWT too: the MCP upstream
// oncerpc itself calls (its audience, not oncerpc's).
// Dynamic client registration (RFC 7591) is open at /reg: an MCP host may register itself.
// With ONCERPC_CONSOLE_REDIRECT set, oncerpc-console (secret oncerpc-console-s3cr3t-0006) signs
// operators in to the console: the authorization code grant with PKCE, redirected to exactly
// that URL. Its login and consent pages are oidc-provider's development ones: any login with
// any password; a login "name@org" gets the claim org_id = "org" in its ID token (scope "org").
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const require = createRequire(path.join(process.env.NODE_PATH, "noop.js"));
const load = async (name) => import(pathToFileURL(require.resolve(name)).href);

const [mode, ...args] = process.argv.slice(2);
if (mode === "keygen") {
  const jose = await load("jose");
  const [kid, out] = args;
  const { privateKey } = await jose.generateKeyPair("ES256", { extractable: true });
  const jwk = { ...(await jose.exportJWK(privateKey)), kid, alg: "ES256", use: "sig" };
  fs.writeFileSync(path.join(out, `${kid}.jwk.json`), JSON.stringify(jwk));
  fs.writeFileSync(path.join(out, `${kid}.pem`), await jose.exportPKCS8(privateKey));
  process.exit(0);
}

const [port, resource, ...keyFiles] = args;
const UPSTREAM_RESOURCE = "http://mcp-upstream.test/";
const { default: Provider, errors } = await load("oidc-provider");
const keys = keyFiles.map((f) => JSON.parse(fs.readFileSync(f, "utf8")));
const client = (client_id, client_secret, scope) => ({
  client_id,
  client_secret,
  scope,
  grant_types: ["client_credentials"],
  id_token_signed_response_alg: "ES256",
  redirect_uris: [],
  response_types: [],
});
const consoleRedirect = process.env.ONCERPC_CONSOLE_REDIRECT;
const consoleClients = consoleRedirect
  ? [{
      client_id: "oncerpc-console",
      client_secret: "oncerpc-console-s3cr3t-0006",
      grant_types: ["authorization_code"],
      response_types: ["code"],
      redirect_uris: [consoleRedirect],
      id_token_signed_response_alg: "ES256",
    }]
  : [];
const provider = new Provider(`http://127.0.0.1:${port}`, {
  jwks: { keys },
  // The console's operators: any login; "name@org" belongs to org.
  findAccount: (_ctx, sub) => ({
    accountId: sub,
    claims: () => ({ sub, org_id: sub.includes("@") ? sub.split("@").pop() : undefined }),
  }),
  claims: { openid: ["sub"], org: ["org_id"] },
  // The granted scopes' claims in the ID token itself (not only at userinfo).
  conformIdTokenClaims: false,
  pkce: { required: () => true },
  clients: [
    ...consoleClients,
    client("acme-service", "acme-client-s3cr3t-0001", "orders:read orders:write"),
    client("acme-reader", "acme-reader-s3cr3t-0002", "orders:read"),
    client("beta-service", "beta-client-s3cr3t-0003", "orders:read orders:write"),
    client("gamma-service", "gamma-client-s3cr3t-0004", "orders:read orders:write"),
    // oncerpc's own client, for introspection.
    client("oncerpc-gateway", "oncerpc-gateway-s3cr3t-0005", "orders:read"),
  ],
  scopes: ["orders:read", "orders:write"],
  features: {
    clientCredentials: { enabled: true },
    introspection: { enabled: true },
    // The development login and consent pages, for the console's sign-in.
    devInteractions: { enabled: Boolean(consoleRedirect) },
    registration: { enabled: true },
    resourceIndicators: {
      enabled: true,
      // The console's sign-in asks for no resource: its access token is for userinfo only.
      defaultResource: (_ctx, client) => (client?.clientId === "oncerpc-console" ? undefined : resource),
      useGrantedResource: () => true,
      // RESOURCE gets JWT access tokens; RESOURCE + "opaque" opaque ones (introspected).
      getResourceServerInfo: (_ctx, indicator) => {
        if (indicator === `${resource}opaque`) {
          return { scope: "orders:read orders:write", audience: indicator, accessTokenTTL: 600, accessTokenFormat: "opaque" };
        }
        if (indicator === UPSTREAM_RESOURCE) {
          return { scope: "orders:read", audience: indicator, accessTokenTTL: 600, accessTokenFormat: "jwt", jwt: { sign: { alg: "ES256" } } };
        }
        if (indicator !== resource) throw new errors.InvalidTarget();
        return {
          scope: "orders:read orders:write",
          audience: resource,
          accessTokenTTL: 600,
          accessTokenFormat: "jwt",
          jwt: { sign: { alg: "ES256" } },
        };
      },
    },
  },
  extraTokenClaims: (ctx, token) => ({
    org_id: (ctx.oidc.client?.clientName ?? token.clientId).split("-")[0],
  }),
});
provider.listen(Number(port), "127.0.0.1", () => console.log(`listening on ${port}`));
