//! CORS for browser clients (`[http] cors_allowed_origins`, issue "defaults"): a browser's
//! preflight is answered, an allowed origin's call can read the answer and its headers, other
//! origins get no CORS headers, and CORS is off by default.

mod common;

use common::{TestServer, test_config};
use oncerpc::Config;

const APP: &str = "https://app.example.com";

async fn preflight(s: &TestServer, origin: &str) -> reqwest::Response {
    s.client
        .request(reqwest::Method::OPTIONS, s.url("/rpc"))
        .header("Origin", origin)
        .header("Access-Control-Request-Method", "POST")
        .header("Access-Control-Request-Headers", "content-type, x-idempotency-key, x-api-key")
        .send()
        .await
        .expect("preflight sent")
}

fn with_origins(origins: &[&str]) -> Config {
    let mut cfg = test_config();
    cfg.http.cors_allowed_origins = origins.iter().map(|o| (*o).to_owned()).collect();
    cfg
}

fn header<'a>(r: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    r.headers().get(name).and_then(|v| v.to_str().ok())
}

#[tokio::test]
async fn a_preflight_from_an_allowed_origin_is_answered_and_the_call_is_readable() {
    let s = TestServer::start_with(with_origins(&[APP, "http://localhost:3000"])).await;
    let pre = preflight(&s, APP).await;
    assert!(pre.status().is_success(), "preflight: {}", pre.status());
    assert_eq!(header(&pre, "access-control-allow-origin"), Some(APP));
    let methods = header(&pre, "access-control-allow-methods").unwrap_or_default().to_ascii_uppercase();
    assert!(methods.contains("POST"), "{methods}");
    let allowed = header(&pre, "access-control-allow-headers").unwrap_or_default().to_ascii_lowercase();
    for h in ["content-type", "x-idempotency-key", "x-api-key"] {
        assert!(allowed.contains(h), "{h} allowed: {allowed}");
    }

    let call = s
        .client
        .post(s.url("/rpc"))
        .header("Origin", APP)
        .header("content-type", "application/json")
        .header("X-Idempotency-Key", "cors-1")
        .body(r#"{"jsonrpc":"2.0","method":"counter.increment","params":{"by":2},"id":1}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(call.status(), 200);
    assert_eq!(header(&call, "access-control-allow-origin"), Some(APP));
    let exposed = header(&call, "access-control-expose-headers").unwrap_or_default().to_ascii_lowercase();
    for h in ["x-correlation-id", "x-idempotency-key", "x-idempotency-status", "retry-after"] {
        assert!(exposed.contains(h), "{h} exposed: {exposed}");
    }
    let v: serde_json::Value = call.json().await.unwrap();
    assert_eq!(v["result"]["total"], 2, "{v}");
}

#[tokio::test]
async fn other_origins_get_no_cors_headers_and_nothing_is_open_by_default() {
    let s = TestServer::start_with(with_origins(&[APP])).await;
    let pre = preflight(&s, "https://evil.example").await;
    assert!(header(&pre, "access-control-allow-origin").is_none(), "{:?}", pre.headers());

    let off = TestServer::start().await;
    let pre = preflight(&off, APP).await;
    assert_eq!(pre.status(), 405, "no CORS by default: OPTIONS is not a route");
    assert!(header(&pre, "access-control-allow-origin").is_none());
}

#[tokio::test]
async fn a_star_allows_any_origin() {
    let s = TestServer::start_with(with_origins(&["*"])).await;
    let pre = preflight(&s, "https://anything.example").await;
    assert!(pre.status().is_success());
    assert_eq!(header(&pre, "access-control-allow-origin"), Some("*"));
}

#[test]
fn origins_are_validated_naming_the_key() {
    for bad in [vec!["*", APP], vec!["app.example.com"], vec!["https://app.example.com/"], vec!["ftp://x"]] {
        let toml = format!(
            "[http]\ncors_allowed_origins = [{}]\n",
            bad.iter().map(|o| format!("{o:?}")).collect::<Vec<_>>().join(", ")
        );
        let err = toml::from_str::<Config>(&toml)
            .map_err(|e| e.to_string())
            .and_then(|c: Config| c.validate().map_err(|e| e.to_string()));
        let err = err.expect_err(&format!("{bad:?} must be refused"));
        assert!(err.contains("http.cors_allowed_origins"), "{err}");
    }
}
