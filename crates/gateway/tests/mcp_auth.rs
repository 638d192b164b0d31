//! The MCP authorization spec, resource-server side (SPEC §20), against a real authorization
//! server (oidc-provider) and the official TypeScript SDK's OAuth client: a host that starts
//! with no token follows oncerpc's `401` to its protected resource metadata (RFC 9728), gets a
//! token from the authorization server for the resource the metadata names, and calls a tool
//! once per key; a host without a client registers one first (dynamic client registration).
//! `tools/list` shows a caller only what it may call, a tool it may not call is a
//! `403` step-up challenge, and a session opened by one subject is unknown to another.
//!
//! Outside CI a missing authorization server or SDK skips a test with a printed reason; in CI
//! it is a failure.

mod common;

use common::mcp_clients;
use common::oidc::Provider;
use common::process::{Gateway, Http, TempDir, unique};
use common::upstream::Upstream;
use serde_json::{Value, json};

/// A gateway on a port chosen first (the resource its metadata names is its own URL, and the
/// authorization server issues tokens for that resource), with the issuer, tenant acme, and
/// `orders.create` (needs `orders:write`) and `orders.read` (needs `orders:read`).
fn config(dir: &TempDir, port: u16, issuer: &str, up: &Upstream) -> String {
    format!(
        r#"
listen = "127.0.0.1:{port}"
[store]
url = "sqlite://{db}"

[[auth.issuers]]
issuer = "{issuer}"
audience = "http://127.0.0.1:{port}/mcp"
tenant_claim = "org_id"

[[tenants]]
name = "acme"
{methods}"#,
        db = dir.file("o.db").display(),
        methods = common::oidc::scoped_methods(up),
    )
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// POST one message to `/mcp` with `bearer` and `extra` headers.
async fn mcp(http: &Http, bearer: &str, body: &Value, extra: &[(&str, &str)]) -> common::Answer {
    let auth = format!("Bearer {bearer}");
    let mut headers = vec![
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    headers.extend_from_slice(extra);
    http.post("/mcp", body.to_string(), &headers).await
}

fn stateless(id: u64, method: &str, params: Value) -> Value {
    let mut params = params;
    params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}});
    json!({"jsonrpc":"2.0","id":id,"method":method,"params":params})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_host_signs_in_from_a_bare_401_and_calls_a_tool_once() {
    let dir = TempDir::new("mcp-auth");
    let Some(mut idp) = Provider::new(&dir.0) else { return };
    let port = free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    idp.keygen("k1");
    idp.serve_for(&["k1"], &resource).await;
    let up = Upstream::start().await;
    let path = dir.file("oncerpc.toml");
    std::fs::write(&path, config(&dir, port, &idp.issuer(), &up)).unwrap();
    let gw = Gateway::start_as(&["--config", &path.display().to_string()], &[]);
    let http = gw.http();

    // The metadata: this resource, its authorization server, the scopes its methods use.
    let meta = http.get("/.well-known/oauth-protected-resource/mcp", &[]).await;
    assert_eq!(meta.status, 200, "{}", meta.body);
    assert_eq!(
        meta.json(),
        json!({"resource": resource, "authorization_servers": [idp.issuer()],
            "scopes_supported": ["orders:read", "orders:write"], "bearer_methods_supported": ["header"],
            "resource_name": "oncerpc"})
    );
    assert_eq!(http.get("/.well-known/oauth-protected-resource", &[]).await.json(), meta.json());
    // A bare request: 401 naming the metadata.
    let bare = http
        .post(
            "/mcp",
            stateless(1, "tools/list", json!({})).to_string(),
            &[("Content-Type", "application/json")],
        )
        .await;
    assert_eq!(bare.status, 401);
    let metadata_url = format!("http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp");
    assert_eq!(
        bare.header("www-authenticate"),
        Some(format!(r#"Bearer resource_metadata="{metadata_url}""#).as_str())
    );

    // The SDK's OAuth client, from that 401 to a tool called once.
    let key = unique("oauth");
    let args = [
        &resource,
        &idp.issuer(),
        "acme-service",
        "acme-client-s3cr3t-0001",
        "orders:read orders:write",
        &key,
    ];
    let Some(client) = mcp_clients::typescript_script("mcp_oauth_client.mjs", &args) else { return };
    let seen = mcp_clients::summary(client).await;
    assert_eq!(seen["tools"], json!(["orders_create", "orders_read"]), "{seen}");
    assert_eq!(
        (seen["first"]["status"].as_str(), seen["again"]["status"].as_str()),
        (Some("new"), Some("duplicate")),
        "{seen}"
    );
    assert_eq!(seen["token_aud"], resource.as_str(), "a token bound to this resource: {seen}");
    assert_eq!(up.count("charge"), 1, "the tool ran once");
    // A host with no client at the authorization server registers one (dynamic client
    // registration, RFC 7591), then signs in with it the same way.
    let dcr_key = unique("oauth-dcr");
    let dcr_args =
        [&resource, &idp.issuer(), "register:acme-agent", "", "orders:read orders:write", &dcr_key];
    let client = mcp_clients::typescript_script("mcp_oauth_client.mjs", &dcr_args).expect("the SDK is there");
    let seen = mcp_clients::summary(client).await;
    let registered = seen["client_id"].as_str().unwrap_or_default().to_owned();
    assert!(!registered.is_empty() && registered != "acme-service", "a client of its own: {seen}");
    assert_eq!(seen["token_client_id"], registered.as_str(), "its token is its own: {seen}");
    assert_eq!(seen["tools"], json!(["orders_create", "orders_read"]), "{seen}");
    assert_eq!(
        (seen["first"]["status"].as_str(), seen["again"]["status"].as_str()),
        (Some("new"), Some("duplicate")),
        "{seen}"
    );
    assert_eq!(up.count("charge"), 2, "its tool ran once more");
    // The Python SDK's OAuth client, the same way.
    let py_key = unique("oauth-py");
    let py_args = [&resource, "acme-service", "acme-client-s3cr3t-0001", "orders:read orders:write", &py_key];
    if let Some(client) = mcp_clients::python_script("mcp_oauth_client.py", &py_args) {
        let seen = mcp_clients::summary(client).await;
        assert_eq!(seen["tools"], json!(["orders_create", "orders_read"]), "{seen}");
        assert_eq!(
            (seen["first"]["status"].as_str(), seen["again"]["status"].as_str()),
            (Some("new"), Some("duplicate")),
            "{seen}"
        );
        assert_eq!(seen["had_token"], true, "{seen}");
        assert_eq!(up.count("charge"), 3, "its tool ran once more");
    }

    let charges = up.count("charge");
    // A reader: its list has only what it may call; the other tool is a 403 step-up.
    let reader = idp.token_for("acme-reader", "acme-reader-s3cr3t-0002", "orders:read", &resource).await;
    let list = mcp(
        &http,
        &reader,
        &stateless(2, "tools/list", json!({})),
        &[("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/list")],
    )
    .await;
    let result = &list.json()["result"];
    let names: Vec<&str> =
        result["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["orders_read"], "{}", list.body);
    assert_eq!(result["cacheScope"], "private", "the list depends on the caller");
    let call = stateless(
        3,
        "tools/call",
        json!({"name":"orders_create","arguments":{"sku":"O-2","idempotency_key":unique("oauth")}}),
    );
    let refused = mcp(
        &http,
        &reader,
        &call,
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "orders_create"),
        ],
    )
    .await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert_eq!(
        refused.header("www-authenticate"),
        Some(r#"Bearer error="insufficient_scope", scope="orders:write""#)
    );
    assert_eq!(up.count("charge"), charges, "nothing ran");

    // A session opened by one subject is unknown to another of the same tenant.
    let writer =
        idp.token_for("acme-service", "acme-client-s3cr3t-0001", "orders:read orders:write", &resource).await;
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}});
    let opened = mcp(&http, &writer, &init, &[]).await;
    let session = opened.header("mcp-session-id").expect("a session").to_owned();
    let ping = json!({"jsonrpc":"2.0","id":1,"method":"ping"});
    let with = [("Mcp-Session-Id", session.as_str()), ("MCP-Protocol-Version", "2025-11-25")];
    assert_eq!(mcp(&http, &writer, &ping, &with).await.status, 200, "its own subject");
    assert_eq!(mcp(&http, &reader, &ping, &with).await.status, 404, "another subject's session is unknown");
}
