//! Credentials towards upstreams (SPEC §20): with `[upstream.oauth]`, every flow step is sent
//! with oncerpc's own access token, got from a real authorization server (oidc-provider) by
//! the client-credentials grant, fetched once for all concurrent calls and cached; an upstream
//! that answers `401` makes oncerpc fetch a new one, once, and the step goes through. A client's
//! own credential never reaches an upstream. The same for an MCP upstream with its own `oauth`
//! (`[[mcp.upstreams]]`): the official Python SDK's server behind a layer that checks each
//! token's signature against the authorization server's keys and its audience.
//!
//! Outside CI a missing authorization server skips a test with a printed reason; in CI it is a
//! failure.

mod common;

use std::collections::BTreeSet;

use common::mcp_clients;
use common::mcp_upstream::{Executions, HttpUpstream, free_port, wait_up};
use common::oidc::{Provider, RESOURCE};
use common::process::{Gateway, Http, TempDir, unique};
use common::upstream::Upstream;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const SECRET_VAR: &str = "UPSTREAM_CLIENT_SECRET";

fn claims(authorization: &str) -> Value {
    let token = authorization.strip_prefix("Bearer ").expect("a Bearer credential");
    jsonwebtoken::dangerous::insecure_decode_claims::<Value>(token).expect("a JWT")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_step_carries_oncerpcs_own_token_fetched_once_and_again_after_a_401() {
    let dir = TempDir::new("upstream-oauth");
    let Some(mut idp) = Provider::new(&dir.0) else { return };
    idp.keygen("k1");
    idp.serve(&["k1"]).await;
    let up = Upstream::start().await;
    let config = format!(
        r#"
[store]
url = "sqlite://{db}"

[upstream.oauth]
token_url = "{issuer}/token"
client_id = "oncerpc-gateway"
client_secret = "${{{SECRET_VAR}}}"
scope = "orders:read"
audience = "{RESOURCE}"

[[methods]]
name = "orders.create"
kind = "command"
  [[methods.steps]]
  name = "charge"
  url = "{charge}"
  [[methods.steps]]
  name = "ship"
  url = "{ship}"
"#,
        db = dir.file("o.db").display(),
        issuer = idp.issuer(),
        charge = up.url("charge"),
        ship = up.url("ship"),
    );
    let path = dir.file("oncerpc.toml");
    std::fs::write(&path, config).unwrap();
    let gw = Gateway::start_env(
        &["--config", &path.display().to_string()],
        &[(SECRET_VAR, "oncerpc-gateway-s3cr3t-0005")],
    );
    let http = gw.http();
    let call = |n: usize| {
        json!({"jsonrpc":"2.0","id":n,"method":"orders.create",
        "params":{"sku":format!("S-{n}"),"idempotency_key":unique("oauth-up")}})
    };

    // Ten calls at once: twenty step requests, one token between them.
    let calls = (0..10).map(|n| {
        let (http, body) = (http.clone(), call(n).to_string());
        tokio::spawn(async move { http.rpc(body, &[("Authorization", "Bearer a-client-credential")]).await })
    });
    for c in calls {
        let answer = c.await.unwrap();
        assert!(answer.json().get("result").is_some(), "{}", answer.body);
    }
    let seen: BTreeSet<String> =
        up.calls().iter().map(|c| c.authorization.clone().expect("a token")).collect();
    assert_eq!(seen.len(), 1, "fetched once for all: {seen:?}");
    let first = seen.iter().next().unwrap().clone();
    let token = claims(&first);
    assert_eq!(
        (token["aud"].as_str(), token["client_id"].as_str()),
        (Some(RESOURCE), Some("oncerpc-gateway")),
        "{token}"
    );
    assert!(!seen.contains("Bearer a-client-credential"), "the client's credential is never passed through");

    // The upstream refuses the token once: a new one is fetched and the step goes through.
    up.script("charge", &[(401, None)]);
    let before = up.calls().len();
    let answer = http.rpc(call(99).to_string(), &[]).await;
    assert!(answer.json().get("result").is_some(), "{}", answer.body);
    let after: Vec<_> = up.calls()[before..].to_vec();
    let charges: Vec<&common::upstream::Call> = after.iter().filter(|c| c.step == "charge").collect();
    assert_eq!(charges.len(), 2, "refused once, then sent again: {after:?}");
    assert_eq!(charges[0].authorization.as_deref(), Some(first.as_str()));
    assert_ne!(charges[1].authorization, charges[0].authorization, "a new token");
    assert_eq!(charges[0].idempotency_key, charges[1].idempotency_key, "the same step key");
    let ship = after.iter().find(|c| c.step == "ship").unwrap();
    assert_eq!(ship.authorization, charges[1].authorization, "the new token is kept for the next step");
    assert!(!gw.log().join("\n").contains(first.trim_start_matches("Bearer ")), "a token reached the log");
}

/// The MCP upstream's audience at the authorization server (`oidc_provider.mjs`).
const UPSTREAM_RESOURCE: &str = "http://mcp-upstream.test/";

/// `tools/call` of `tool` in the `2026-07-28` revision with `key`, sent with a client's own
/// bearer credential (which must never reach the upstream); its `result`.
async fn call_tool(http: &Http, tool: &str, arguments: Value, key: &str) -> Value {
    let body = common::mcp2026::call(1, tool, arguments, key);
    let answer = common::mcp2026::post(http, &body, &[("Authorization", "Bearer a-client-credential")]).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.json()["result"].clone()
}

/// What the upstream saw: each request's token (its digest) and whether it accepted it.
fn bearers(log: &Executions) -> Vec<(Option<String>, bool)> {
    log.lines()
        .iter()
        .filter(|l| l.get("accepted").is_some())
        .map(|l| (l["bearer"].as_str().map(str::to_owned), l["accepted"] == true))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_upstream_gets_oncerpcs_own_token_fetched_once_and_again_after_a_401() {
    let Some(python) = mcp_clients::python_sdk() else { return };
    let dir = TempDir::new("mcp-upstream-oauth");
    let Some(mut idp) = Provider::new(&dir.0) else { return };
    idp.keygen("k1");
    idp.serve(&["k1"]).await;
    let log = Executions(dir.file("executions.log"));
    let issuer = idp.issuer();
    let env = [("UPSTREAM_ISSUER", issuer.as_str()), ("UPSTREAM_AUDIENCE", UPSTREAM_RESOURCE)];
    let upstream = HttpUpstream::start_env(&python, &log, free_port(), &env).await;
    let config = format!(
        r#"demo = false
[store]
url = "sqlite://{db}"

[[mcp.upstreams]]
name = "pay"
url = "{url}"
tools = ["charge"]
timeout_ms = 10000
oauth = {{ token_url = "{issuer}/token", client_id = "oncerpc-gateway", client_secret = "${{{SECRET_VAR}}}", scope = "orders:read", audience = "{UPSTREAM_RESOURCE}" }}
"#,
        db = dir.file("o.db").display(),
        url = upstream.url,
    );
    let path = dir.file("oncerpc.toml");
    std::fs::write(&path, config).unwrap();
    let gw = Gateway::start_env(
        &["--config", &path.display().to_string()],
        &[(SECRET_VAR, "oncerpc-gateway-s3cr3t-0005")],
    );
    let http = gw.http();
    // Connected and listed: the handshake itself went through the upstream's token check.
    wait_up(&http, "pay").await;

    // Eight calls at once, each with its own key, and each retried: every request carries one
    // token, fetched once, which the upstream verified.
    let keys: Vec<String> = (0..8).map(|_| unique("mcp-oauth")).collect();
    let calls = keys.iter().enumerate().map(|(n, key)| {
        let (http, key) = (http.clone(), key.clone());
        tokio::spawn(async move {
            let args = json!({"amount": n + 1, "card": "4242"});
            let first = call_tool(&http, "charge", args.clone(), &key).await;
            let again = call_tool(&http, "charge", args, &key).await;
            (first, again)
        })
    });
    for c in calls {
        let (first, again) = c.await.unwrap();
        assert_eq!(first["isError"], false, "{first}");
        assert_eq!(first["content"], again["content"], "the stored result: {again}");
    }
    for key in &keys {
        assert_eq!(log.of("charge", Some(key)).len(), 1, "ran once: {key}");
    }
    let seen = bearers(&log);
    assert!(seen.iter().all(|(_, ok)| *ok), "every request carried a token the upstream accepted: {seen:?}");
    let tokens: BTreeSet<_> = seen.iter().map(|(t, _)| t.clone()).collect();
    assert_eq!(tokens.len(), 1, "fetched once for all: {tokens:?}");
    let client_credential = format!("{:x}", Sha256::digest(b"a-client-credential"))[..16].to_owned();
    assert!(!tokens.contains(&Some(client_credential)), "the client's credential is never passed through");

    // The upstream revokes that token: oncerpc fetches a new one, once, and the call goes through.
    std::fs::write(log.0.with_extension("log.refuse"), "").unwrap();
    let before = seen.len();
    let key = unique("mcp-oauth-401");
    let result = call_tool(&http, "charge", json!({"amount": 9, "card": "4242"}), &key).await;
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(log.of("charge", Some(&key)).len(), 1, "ran once");
    let after = bearers(&log)[before..].to_vec();
    assert_eq!(after.first().map(|(_, ok)| *ok), Some(false), "refused once: {after:?}");
    assert!(after[1..].iter().all(|(_, ok)| *ok), "then accepted: {after:?}");
    let fresh: BTreeSet<_> = after[1..].iter().map(|(t, _)| t.clone()).collect();
    assert_eq!(fresh.len(), 1, "one new token: {after:?}");
    assert!(!tokens.contains(fresh.iter().next().unwrap()), "a new token, not the refused one");
    assert!(!gw.log().join("\n").contains("eyJ"), "a token reached the log");
}
