//! `[[openapi]] oauth` (SPEC §20, §21): every operation of a document is sent with oncerpc's
//! own access token, got from a real authorization server (oidc-provider) by the
//! client-credentials grant — one token for all the document's operations, fetched once for
//! every call that needs it at that moment, and never a client's own credential.
//!
//! Outside CI a missing authorization server skips the test with a printed reason; in CI it is
//! a failure.

mod common;

use std::collections::BTreeSet;

use common::oidc::{Provider, RESOURCE};
use common::process::{Gateway, TempDir, unique};
use common::upstream::Upstream;
use serde_json::{Value, json};

const SECRET_VAR: &str = "PAY_CLIENT_SECRET";

/// Three commands of one API, each its own path (the tests' upstream names a call by it).
const DOCUMENT: &str = r#"
openapi: 3.0.3
info: { title: pay, version: "1" }
servers: [{ url: "https://pay.example.com" }]
paths:
  /charges:
    post:
      operationId: createCharge
      requestBody: { required: true, content: { application/json: { schema: { type: object } } } }
      responses: { "200": { description: the charge } }
  /refunds:
    post:
      operationId: createRefund
      requestBody: { required: true, content: { application/json: { schema: { type: object } } } }
      responses: { "200": { description: the refund } }
  /payouts:
    post:
      operationId: createPayout
      requestBody: { required: true, content: { application/json: { schema: { type: object } } } }
      responses: { "200": { description: the payout } }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_operation_of_a_document_carries_one_token_fetched_once() {
    let dir = TempDir::new("openapi-oauth");
    let Some(mut idp) = Provider::new(&dir.0) else { return };
    idp.keygen("k1");
    idp.serve(&["k1"]).await;
    let up = Upstream::start().await;
    let spec = dir.file("pay.yaml");
    std::fs::write(&spec, DOCUMENT).unwrap();
    let config = format!(
        r#"
[store]
url = "sqlite://{db}"

[[openapi]]
name = "pay"
spec = "{spec}"
base_url = "http://{upstream}"
oauth = {{ token_url = "{issuer}/token", client_id = "oncerpc-gateway", client_secret = "${{{SECRET_VAR}}}", scope = "orders:read", audience = "{RESOURCE}" }}
"#,
        db = dir.file("o.db").display(),
        spec = spec.display(),
        upstream = up.addr,
        issuer = idp.issuer(),
    );
    let path = dir.file("oncerpc.toml");
    std::fs::write(&path, config).unwrap();
    let gw = Gateway::start_env(
        &["--config", &path.display().to_string()],
        &[(SECRET_VAR, "oncerpc-gateway-s3cr3t-0005")],
    );
    let http = gw.http();
    let operations = ["pay.createCharge", "pay.createRefund", "pay.createPayout"];

    // Twelve calls at once, four of each operation: one token between them all.
    let calls = (0..12).map(|n| {
        let method = operations[n % 3];
        let body = json!({"jsonrpc":"2.0","id":n,"method":method,
            "params":{"idempotency_key":unique("pay"),"body":{"amount":100 + n}}});
        let http = http.clone();
        tokio::spawn(async move {
            http.rpc(body.to_string(), &[("Authorization", "Bearer a-client-credential")]).await
        })
    });
    for c in calls {
        let answer = c.await.unwrap();
        assert!(answer.json().get("result").is_some(), "{}", answer.body);
    }
    let seen = up.calls();
    let paths: BTreeSet<&str> = seen.iter().map(|c| c.step.as_str()).collect();
    assert_eq!(paths, BTreeSet::from(["charges", "payouts", "refunds"]), "every operation was called");
    assert_eq!(seen.len(), 12, "each call once: {seen:?}");
    let tokens: BTreeSet<String> = seen.iter().map(|c| c.authorization.clone().expect("a token")).collect();
    assert_eq!(tokens.len(), 1, "one token for the whole document: {tokens:?}");
    let token = tokens.iter().next().unwrap();
    assert!(
        !tokens.contains("Bearer a-client-credential"),
        "the client's credential is never passed through"
    );
    let claims: Value =
        jsonwebtoken::dangerous::insecure_decode_claims(token.strip_prefix("Bearer ").unwrap())
            .expect("a JWT from the authorization server");
    assert_eq!(
        (claims["aud"].as_str(), claims["client_id"].as_str(), claims["scope"].as_str()),
        (Some(RESOURCE), Some("oncerpc-gateway"), Some("orders:read")),
        "{claims}"
    );
    assert!(!gw.log().join("\n").contains(token.trim_start_matches("Bearer ")), "a token reached the log");
}
