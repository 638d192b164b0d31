//! Credentials towards upstreams (SPEC §20): with `[upstream.oauth]`, every flow step is sent
//! with oncerpc's own access token, got from a real authorization server (oidc-provider) by
//! the client-credentials grant, fetched once for all concurrent calls and cached; an upstream
//! that answers `401` makes oncerpc fetch a new one, once, and the step goes through. A client's
//! own credential never reaches an upstream.
//!
//! Outside CI a missing authorization server skips a test with a printed reason; in CI it is a
//! failure.

mod common;

use std::collections::BTreeSet;

use common::oidc::{Provider, RESOURCE};
use common::process::{Gateway, TempDir, unique};
use common::upstream::Upstream;
use serde_json::{Value, json};

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
