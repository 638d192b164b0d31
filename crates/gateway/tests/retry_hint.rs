//! The retry hint of a concurrent duplicate (SPEC §3, issue "defaults"): `retry_after_ms`
//! is as long as the running execution has been running (at least 50 ms, at most the lease
//! left), not the lease left, and HTTP answers carry it as `Retry-After`. Every `503` says
//! `Retry-After: 1`.

mod common;

use std::time::Duration;

use common::process::TempDir;
use common::upstream::Upstream;
use common::{Answer, TestServer, test_config};
use oncerpc::config::{MethodConfig, StepConfig};
use serde_json::{Value, json};

fn sleep_body(key: &str, ms: u64) -> String {
    json!({"jsonrpc":"2.0","method":"demo.sleep","params":{"ms": ms, "idempotency_key": key},"id": 1})
        .to_string()
}

/// The in-progress answer's hint, after checking its shape and its `Retry-After` header.
fn hint(a: &Answer) -> u64 {
    assert_eq!(a.status, 200, "{}", a.body);
    let v = a.json();
    assert_eq!(v["error"]["code"], -32001, "{v}");
    assert_eq!(a.header("x-idempotency-status"), Some("processing"));
    let ms = v["error"]["data"]["retry_after_ms"].as_u64().unwrap_or_else(|| panic!("a hint: {v}"));
    let secs: u64 = a.header("retry-after").expect("Retry-After on a processing answer").parse().unwrap();
    assert_eq!(secs, ms.div_ceil(1000).max(1), "Retry-After is the hint in whole seconds, rounded up");
    ms
}

/// POST `body` to `path` of `s` from a task of its own (the first, slow execution), with
/// extra headers; its answer when awaited.
fn in_background(
    s: &TestServer,
    path: &str,
    body: String,
    headers: &[(&'static str, &'static str)],
) -> tokio::task::JoinHandle<reqwest::Result<reqwest::Response>> {
    let mut req = s.client.post(s.url(path)).header("content-type", "application/json").body(body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    tokio::spawn(req.send())
}

#[tokio::test]
async fn a_duplicate_of_a_300_ms_command_is_told_to_come_back_soon_not_after_the_lease() {
    let s = TestServer::start().await;
    let first = in_background(&s, "/rpc", sleep_body("hint-1", 300), &[]);
    s.wait_processing("default", "demo.sleep", "hint-1").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let dup = s.post(sleep_body("hint-1", 300)).await;
    let ms = hint(&dup);
    // The lease is 60 s; the job has run ~100 ms of its 300.
    assert!((50..300).contains(&ms), "retry_after_ms {ms} is below the job's 300 ms");
    let v: Value = first.await.unwrap().unwrap().json().await.unwrap();
    assert_eq!(v["result"]["slept_ms"], 300, "{v}");
    // Retrying after the hint (and a little) finds the stored outcome.
    let again = s.post(sleep_body("hint-1", 300)).await;
    assert_eq!(again.header("x-idempotency-status"), Some("duplicate"), "{}", again.body);
    assert!(again.header("retry-after").is_none(), "only processing answers carry a hint");
}

#[tokio::test]
async fn another_process_estimates_the_hint_from_the_lease_it_sees() {
    // Two gateways on one SQLite file: the second does not run the execution, so it estimates
    // the running time from the lease left in the store (the time since the claim).
    let dir = TempDir::new("hint");
    let mut cfg = test_config();
    cfg.store.url = format!("sqlite://{}", dir.file("hint.db").display());
    let a = TestServer::start_with(cfg.clone()).await;
    let b = TestServer::start_with(cfg).await;
    let first = in_background(&a, "/rpc", sleep_body("hint-2", 1500), &[]);
    a.wait_processing("default", "demo.sleep", "hint-2").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let ms = hint(&b.post(sleep_body("hint-2", 1500)).await);
    assert!(
        (50..1500).contains(&ms),
        "the estimate ({ms} ms) is the time since the claim, not the 60 s lease"
    );
    assert!(first.await.unwrap().unwrap().status().is_success());
}

#[tokio::test]
async fn the_flows_door_processing_answer_carries_retry_after() {
    let up = Upstream::start().await;
    up.set_delay(800, &[]);
    let mut cfg = test_config();
    cfg.methods = vec![MethodConfig {
        name: "orders.create".into(),
        kind: oncerpc_core::Kind::Command,
        notification_allowed: false,
        timeout_ms: Some(5_000),
        params_schema: None,
        description: None,
        steps: vec![StepConfig { name: "charge".into(), url: up.url("charge"), ..Default::default() }],
        ..Default::default()
    }];
    let s = TestServer::start_with(cfg).await;
    let path = "/v2/flows/orders.create?sync=true";
    let first = in_background(&s, path, "{}".into(), &[("X-Idempotency-Key", "flow-hint")]);
    s.wait_processing("default", "orders.create", "flow-hint").await;
    let dup = s.post_path(path, "{}", &[("X-Idempotency-Key", "flow-hint")]).await;
    assert_eq!((dup.status, dup.body.as_str()), (200, "{}"));
    assert_eq!(dup.header("x-idempotency-status"), Some("processing"));
    assert_eq!(dup.header("retry-after"), Some("1"), "a hint under a second rounds up to 1");
    assert_eq!(first.await.unwrap().unwrap().status(), 200);
}

#[tokio::test]
async fn every_503_says_when_to_come_back() {
    let mut cfg = test_config();
    cfg.limits.max_in_flight = 1;
    let s = TestServer::start_with(cfg).await;
    let busy = in_background(&s, "/rpc", sleep_body("busy", 600), &[]);
    s.wait_processing("default", "demo.sleep", "busy").await;
    let refused = s.post(r#"{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":1}"#).await;
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert_eq!(refused.json()["error"]["code"], -32007);
    assert_eq!(refused.header("retry-after"), Some("1"));
    let flows =
        s.post_path("/v2/flows/demo.sleep?sync=true", r#"{"ms":1}"#, &[("X-Idempotency-Key", "k-503")]).await;
    assert_eq!(flows.status, 503, "{}", flows.body);
    assert_eq!(flows.header("retry-after"), Some("1"));
    assert!(busy.await.unwrap().unwrap().status().is_success());
}
