//! Access tokens on every HTTP door (SPEC §20), against a real authorization server:
//! oidc-provider (npm, OpenID-certified) issuing client-credentials JWT access tokens for
//! oncerpc's resource (`tests/clients/oidc_provider.mjs`). A token calls what its scopes
//! allow and nothing else; every bad token is `401` with a JSON body, counted, and runs
//! nothing; rotated keys are fetched when a token names one; a provider that is down or hangs
//! is `503` `-32011` within a bound while API keys keep working.
//!
//! Outside CI a missing authorization server skips a test with a printed reason; in CI it is a
//! failure.

mod common;

use std::time::Duration;

use common::oidc::{Provider, RESOURCE};
use common::process::{Gateway, Http, TempDir, unique};
use common::upstream::Upstream;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

const ACME_KEY: &str = "acme-token-tests-s3cr3t-01";

/// Tenants acme (an API key) and beta; the issuer; `orders.create` (a command needing
/// `orders:write`) and `orders.read` (a query needing `orders:read`), each one step on `up`.
fn config(dir: &TempDir, issuer: &str, up: &Upstream) -> String {
    format!(
        r#"
[store]
url = "sqlite://{db}"

[[auth.issuers]]
issuer = "{issuer}"
audience = "{RESOURCE}"
tenant_claim = "org_id"

[[tenants]]
name = "acme"
api_keys = ["{ACME_KEY}"]
[[tenants]]
name = "beta"
{methods}"#,
        db = dir.file("o.db").display(),
        methods = common::oidc::scoped_methods(up),
    )
}

fn call(id: u64, method: &str, params: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":method,"params":params})
}

async fn rpc(http: &Http, bearer: &str, body: &Value) -> common::Answer {
    http.rpc(body.to_string(), &[("Authorization", &format!("Bearer {bearer}"))]).await
}

/// `oncerpc_auth_refusals_total{reason}` now.
async fn refusals(http: &Http, reason: &str) -> u64 {
    let metrics = http.get("/metrics", &[]).await.body;
    let line = format!("oncerpc_auth_refusals_total{{reason=\"{reason}\"}} ");
    metrics.lines().find_map(|l| l.strip_prefix(&line)).map_or(0, |n| n.parse().unwrap())
}

/// Wait until the gateway accepts `token` (its keys fetched): the first answer that is not 503.
async fn accepted(http: &Http, token: &str) -> common::Answer {
    for _ in 0..400 {
        let a = rpc(http, token, &call(0, "orders.read", json!({}))).await;
        if a.status != 503 {
            return a;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the gateway never fetched the issuer's keys");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_calls_what_its_scopes_allow_on_every_door() {
    let dir = TempDir::new("auth-scopes");
    let Some(mut idp) = Provider::new(&dir.0) else { return };
    idp.keygen("k1");
    idp.serve(&["k1"]).await;
    let up = Upstream::start().await;
    let gw = Gateway::with_config(&dir, &config(&dir, &idp.issuer(), &up));
    let http = gw.http();
    let writer = idp.token("acme-service", "acme-client-s3cr3t-0001", "orders:read orders:write").await;
    let reader = idp.token("acme-reader", "acme-reader-s3cr3t-0002", "orders:read").await;
    assert_eq!(accepted(&http, &reader).await.status, 200);

    // The writer's command runs once per key, as with an API key.
    let key = unique("tok");
    let create = call(1, "orders.create", json!({"sku": "T-1", "idempotency_key": key}));
    let first = rpc(&http, &writer, &create).await;
    let again = rpc(&http, &writer, &create).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(
        (first.header("x-idempotency-status"), again.header("x-idempotency-status")),
        (Some("new"), Some("duplicate"))
    );
    assert_eq!(up.count("charge"), 1);

    // The reader lacks orders:write: 403, the challenge names the scope, nothing runs.
    let before = refusals(&http, "insufficient_scope").await;
    let create = call(2, "orders.create", json!({"sku": "T-2", "idempotency_key": unique("tok")}));
    let refused = rpc(&http, &reader, &create).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert_eq!(
        refused.header("www-authenticate"),
        Some(r#"Bearer error="insufficient_scope", scope="orders:write""#)
    );
    let error = &refused.json()["error"];
    assert_eq!((error["code"].as_i64(), &error["data"]["scopes"]), (Some(-32010), &json!(["orders:write"])));
    assert!(error["message"].as_str().unwrap().contains("\"orders:write\""), "{error}");
    assert_eq!(refusals(&http, "insufficient_scope").await, before + 1);
    // In a batch: that entry refused, the next one answered.
    let batch = json!([create, call(3, "orders.read", json!({}))]);
    let answer = rpc(&http, &reader, &batch).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let entries = answer.json();
    assert_eq!(entries[0]["error"]["code"], -32010, "{entries}");
    assert!(entries[1]["result"].is_object(), "{entries}");
    // The flows door and MCP alike.
    let flow = http
        .post(
            "/v2/flows/orders.create?sync=true",
            r#"{"sku":"T-3"}"#,
            &[("Authorization", &format!("Bearer {reader}")), ("Idempotency-Key", &unique("tok"))],
        )
        .await;
    assert_eq!(flow.status, 403, "{}", flow.body);
    assert!(flow.header("www-authenticate").unwrap().contains("insufficient_scope"));
    assert_eq!(refusals(&http, "insufficient_scope").await, before + 2, "the flows door's counted too");
    let mcp = json!({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"orders_create",
        "arguments":{"sku":"T-4","idempotency_key":unique("tok")},
        "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}});
    let mcp = http
        .post(
            "/mcp",
            mcp.to_string(),
            &[
                ("Authorization", &format!("Bearer {reader}")),
                ("Content-Type", "application/json"),
                ("Accept", "application/json, text/event-stream"),
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", "tools/call"),
                ("Mcp-Name", "orders_create"),
            ],
        )
        .await;
    let result = &mcp.json()["result"];
    assert_eq!(
        (result["isError"].as_bool(), result["structuredContent"]["code"].as_i64()),
        (Some(true), Some(-32010))
    );
    assert_eq!(mcp.status, 403, "the MCP step-up: {}", mcp.body);
    assert_eq!(refusals(&http, "insufficient_scope").await, before + 3, "and the MCP door's");
    assert_eq!(up.count("charge"), 1, "no refused call ran");

    // Tenants from the token: beta's token never sees acme's records.
    let beta = idp.token("beta-service", "beta-client-s3cr3t-0003", "orders:read orders:write").await;
    let acme_event = http
        .post(
            "/v2/flows/orders.create",
            r#"{"sku":"T-5"}"#,
            &[("Authorization", &format!("Bearer {writer}")), ("Idempotency-Key", &unique("tok"))],
        )
        .await
        .json()["event_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/v2/events/{acme_event}");
    assert_eq!(http.get(&path, &[("Authorization", &format!("Bearer {writer}"))]).await.status, 200);
    assert_eq!(http.get(&path, &[("Authorization", &format!("Bearer {beta}"))]).await.status, 404);
    // The API key still works, with every scope of its tenant.
    let by_key = http.rpc(call(5, "orders.read", json!({})).to_string(), &[("X-API-Key", ACME_KEY)]).await;
    assert_eq!(by_key.status, 200, "{}", by_key.body);
    // Who did it: the token's subject on each access line, never the token.
    let line = gw
        .wait_log(Duration::from_secs(5), |l| {
            l.contains("method=orders.create") && l.contains("subject=acme-service")
        })
        .await;
    assert!(line.is_some_and(|l| l.contains("tenant=acme")), "the access line names the caller");
    let logged = gw.log().join("\n");
    assert!(!logged.contains(&writer) && !logged.contains(&reader), "a token reached the log");

    // Key rotation: the provider signs with a new key; a token naming it makes the gateway
    // fetch the keys again (once per 30 s at most), and it is accepted.
    idp.keygen("k2");
    idp.serve(&["k2", "k1"]).await;
    let rotated = idp.token("acme-reader", "acme-reader-s3cr3t-0002", "orders:read").await;
    let kid = jsonwebtoken::decode_header(&rotated).unwrap().kid;
    assert_eq!(kid.as_deref(), Some("k2"), "signed with the new key");
    let answer = rpc(&http, &rotated, &call(6, "orders.read", json!({}))).await;
    assert_eq!(answer.status, 200, "the rotated key was fetched: {}", answer.body);
}

/// A token an attacker makes with the authorization server's own key, or none at all.
fn crafted(pem: &[u8], kid: &str, claims: Value) -> String {
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(kid.to_owned());
    jsonwebtoken::encode(&header, &claims, &EncodingKey::from_ec_pem(pem).unwrap()).unwrap()
}

fn b64(v: &Value) -> String {
    b64_raw(&v.to_string())
}

fn b64_raw(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_token_is_a_401_counted_and_runs_nothing() {
    let dir = TempDir::new("auth-bad");
    let Some(mut idp) = Provider::new(&dir.0) else { return };
    idp.keygen("k1");
    idp.keygen("stranger");
    idp.serve(&["k1"]).await;
    let up = Upstream::start().await;
    let gw = Gateway::with_config(&dir, &config(&dir, &idp.issuer(), &up));
    let http = gw.http();
    let good = idp.token("acme-service", "acme-client-s3cr3t-0001", "orders:read orders:write").await;
    let first = accepted(&http, &good).await;
    assert_eq!(first.status, 200, "{}\n{}", first.body, gw.log().join("\n"));
    let looks = up.count("look");

    let now = jsonwebtoken::get_current_timestamp();
    let iss = idp.issuer();
    let claims = |more: Value| {
        let mut c = json!({"iss": iss, "aud": RESOURCE, "sub": "mallory", "exp": now + 600, "iat": now,
            "scope": "orders:read orders:write", "org_id": "acme"});
        c.as_object_mut().unwrap().extend(more.as_object().unwrap().clone());
        c
    };
    let pem = idp.pem("k1");
    let sign = |more: Value| crafted(&pem, "k1", claims(more));
    let header = |h: Value| b64(&h);
    let body = b64(&claims(json!({})));
    let signature = good.rsplit('.').next().unwrap();
    // HS256 "signed" with the issuer's public key: the algorithm-confusion attack.
    let public = std::fs::read_to_string(dir.file("k1.jwk.json")).unwrap();
    let confused = jsonwebtoken::encode(
        &Header { kid: Some("k1".into()), ..Header::new(Algorithm::HS256) },
        &claims(json!({})),
        &EncodingKey::from_secret(public.as_bytes()).unwrap(),
    )
    .unwrap();
    let mut tampered = good.clone();
    tampered.replace_range(tampered.len() - 6.., "AAAAAA");
    let cases: Vec<(&str, String, &str)> = vec![
        ("alg none", format!("{}.{body}.", header(json!({"alg":"none","kid":"k1"}))), "malformed_token"),
        ("HS256 with the public key", confused, "algorithm"),
        ("wrong iss", sign(json!({"iss": "http://127.0.0.1:1/"})), "issuer"),
        ("wrong aud", sign(json!({"aud": "http://another.resource/"})), "audience"),
        ("expired", sign(json!({"exp": now - 3600})), "expired"),
        ("nbf in the future", sign(json!({"nbf": now + 3600})), "not_yet_valid"),
        ("tampered signature", tampered, "signature"),
        ("unknown kid", crafted(&idp.pem("stranger"), "stranger", claims(json!({}))), "unknown_key"),
        ("over 8 KiB", sign(json!({"pad": "x".repeat(9000)})), "token_too_large"),
        ("bad base64", format!("eyJ!!!.{body}.{signature}"), "malformed_token"),
        (
            "bad JSON",
            format!("{}.{}.{signature}", good.split('.').next().unwrap(), b64_raw("{not json")),
            "malformed_token",
        ),
        ("a tenant oncerpc does not have", sign(json!({"org_id": "gamma"})), "tenant"),
    ];
    for (what, token, reason) in cases {
        let before = refusals(&http, reason).await;
        let answer = rpc(&http, &token, &call(1, "orders.read", json!({}))).await;
        assert_eq!(answer.status, 401, "{what}: {}", answer.body);
        assert_eq!(answer.header("www-authenticate"), Some(r#"Bearer error="invalid_token""#), "{what}");
        assert_eq!(answer.json(), json!({"code":"401","message":"unauthorized"}), "{what}");
        assert_eq!(refusals(&http, reason).await, before + 1, "{what}: counted as {reason}");
    }
    // A token in the URL is never read, a good one neither.
    for query in [format!("access_token={good}"), format!("key={good}")] {
        let answer = http.rpc(call(1, "orders.read", json!({})).to_string(), &[]).await;
        assert_eq!(answer.status, 401);
        let answer = http
            .post(
                &format!("/rpc?{query}"),
                call(1, "orders.read", json!({})).to_string(),
                &[("Content-Type", "application/json")],
            )
            .await;
        assert_eq!(answer.status, 401, "{query}: {}", answer.body);
    }
    assert!(refusals(&http, "token_in_url").await >= 2);
    assert_eq!(up.count("look"), looks, "no refused token ran anything");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_is_down_or_hangs_is_a_503_and_api_keys_keep_working() {
    let dir = TempDir::new("auth-down");
    let Some(mut idp) = Provider::new(&dir.0) else { return };
    idp.keygen("k1");
    // A listener that accepts and never answers stands where the provider will be.
    let hang = std::net::TcpListener::bind(("127.0.0.1", idp.port)).unwrap();
    let up = Upstream::start().await;
    let gw = Gateway::with_config(&dir, &config(&dir, &idp.issuer(), &up));
    let http = gw.http();
    // A well-formed token (its issuer's keys cannot be had): 503, -32011, Retry-After, bounded.
    let token = crafted(
        &idp.pem("k1"),
        "k1",
        json!({"iss": idp.issuer(), "aud": RESOURCE,
        "exp": jsonwebtoken::get_current_timestamp() + 600, "org_id": "acme", "scope": "orders:read"}),
    );
    let started = std::time::Instant::now();
    let answer = rpc(&http, &token, &call(1, "orders.read", json!({}))).await;
    assert!(started.elapsed() < Duration::from_secs(8), "bounded: {:?}", started.elapsed());
    assert_eq!(answer.status, 503, "{}", answer.body);
    assert_eq!(answer.header("retry-after"), Some("5"));
    assert_eq!(answer.json()["error"]["code"], -32011, "{}", answer.body);
    assert!(refusals(&http, "identity_unavailable").await >= 1);
    let by_key = http.rpc(call(2, "orders.read", json!({})).to_string(), &[("X-API-Key", ACME_KEY)]).await;
    assert_eq!(by_key.status, 200, "API keys keep working: {}", by_key.body);
    // The provider comes up: the gateway fetches its keys by itself and the token works.
    drop(hang);
    idp.serve(&["k1"]).await;
    let good = idp.token("acme-reader", "acme-reader-s3cr3t-0002", "orders:read").await;
    assert_eq!(accepted(&http, &good).await.status, 200);
    assert_eq!(up.count("look"), 2, "the key's call and the token's");
}

/// Opaque access tokens (not JWTs) are introspected (RFC 7662) at the issuer with oncerpc's own
/// client: an active one calls what its scopes allow, an unknown one is `401`, and a provider
/// that is gone is `503` for a token it has not vouched for yet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opaque_token_is_introspected() {
    let dir = TempDir::new("auth-introspect");
    let Some(mut idp) = Provider::new(&dir.0) else { return };
    idp.keygen("k1");
    idp.serve(&["k1"]).await;
    let up = Upstream::start().await;
    let opaque_resource = format!("{RESOURCE}opaque");
    let config = config(&dir, &idp.issuer(), &up).replace(
        &format!("audience = \"{RESOURCE}\""),
        &format!(
            "audience = [\"{RESOURCE}\", \"{opaque_resource}\"]\nintrospection = {{ url = \"{}/token/introspection\", client_id = \"oncerpc-gateway\", client_secret = \"${{INTROSPECTION_SECRET}}\" }}",
            idp.issuer()
        ),
    );
    let path = dir.file("oncerpc.toml");
    std::fs::write(&path, config).unwrap();
    let gw = Gateway::start_env(
        &["--config", &path.display().to_string()],
        &[("INTROSPECTION_SECRET", "oncerpc-gateway-s3cr3t-0005")],
    );
    let http = gw.http();
    let reader =
        idp.token_for("acme-reader", "acme-reader-s3cr3t-0002", "orders:read", &opaque_resource).await;
    assert!(!reader.contains('.'), "an opaque token: {reader}");
    let read = rpc(&http, &reader, &call(1, "orders.read", json!({}))).await;
    assert_eq!(read.status, 200, "{}\n{}", read.body, gw.log().join("\n"));
    let create = call(2, "orders.create", json!({"sku": "I-1", "idempotency_key": unique("intro")}));
    let refused = rpc(&http, &reader, &create).await;
    assert_eq!(refused.status, 403, "its scopes, from the introspection answer: {}", refused.body);
    let before = refusals(&http, "inactive_token").await;
    let unknown =
        rpc(&http, "not-a-token-the-provider-issued-0123456789", &call(3, "orders.read", json!({}))).await;
    assert_eq!(unknown.status, 401, "{}", unknown.body);
    assert_eq!(refusals(&http, "inactive_token").await, before + 1);
    // The provider goes away: a token it vouched for is kept (cached), a new one cannot be judged.
    let other =
        idp.token_for("acme-service", "acme-client-s3cr3t-0001", "orders:read", &opaque_resource).await;
    idp.stop();
    assert_eq!(rpc(&http, &reader, &call(4, "orders.read", json!({}))).await.status, 200, "cached");
    let down = rpc(&http, &other, &call(5, "orders.read", json!({}))).await;
    assert_eq!(down.status, 503, "{}", down.body);
    assert_eq!(down.json()["error"]["code"], -32011);
    assert_eq!(up.count("charge"), 0);
    assert!(!gw.log().join("\n").contains(&reader), "a token reached the log");
}
