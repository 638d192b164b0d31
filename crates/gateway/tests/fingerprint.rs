//! Fingerprints by exact decimal value, end to end (issue: "fingerprints compare f64s"),
//! against a real server on loopback: on `/rpc` with the demo `counter.increment`, and on the
//! flows door with a configured flow whose upstream records the raw bodies it is sent.
//!
//! - amounts past u64 (100 ETH in wei) are different params: -32002 / 422, never the other
//!   request's stored answer;
//! - `1` and `1.0` are the same params: a duplicate, not -32002;
//! - a duplicate member in keyed params is -32600 / 400 before anything runs or is forwarded,
//!   and leaves no record;
//! - a key in the params and the same key in a header make the same request.

mod common;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Path, State};
use axum::routing::post;
use common::{Answer, TestServer, test_config};
use oncerpc::config::{MethodConfig, StepConfig};
use oncerpc_core::store::RecordKey;
use serde_json::{Value, json};

const WEI_1: &str = "100000000000000000001";
const WEI_2: &str = "100000000000000000002";

// ---------------------------------------------------------------------------------------------
// /rpc

fn rpc(params: &str, id: u64) -> String {
    format!(r#"{{"jsonrpc":"2.0","method":"counter.increment","params":{params},"id":{id}}}"#)
}

async fn record_exists(s: &TestServer, method: &str, key: &str) -> bool {
    let key = RecordKey::new("default", method, key);
    s.dispatcher.store().get(&key).await.expect("memory store").is_some()
}

#[tokio::test]
async fn rpc_wei_amounts_past_u64_are_different_params() {
    let s = TestServer::start().await;
    let first = s.post(rpc(&format!(r#"{{"by":1,"amount":{WEI_1},"idempotency_key":"wei-1"}}"#), 1)).await;
    assert_eq!(first.header("x-idempotency-status"), Some("new"), "{}", first.body);
    assert_eq!(first.json()["result"], json!({"total": 1}));

    // The same key with 1 wei more: not the first one's stored answer.
    let second = s.post(rpc(&format!(r#"{{"by":1,"amount":{WEI_2},"idempotency_key":"wei-1"}}"#), 2)).await;
    let v = second.json();
    assert_eq!(v["error"]["code"], -32002, "{v}");
    assert_eq!(v["id"], 2);
    assert!(v.get("result").is_none());
    assert_eq!(s.demo.counter("default"), 1);

    // The first amount again, spelled otherwise: its duplicate.
    let again =
        s.post(rpc(r#"{"amount":1.00000000000000000001e20,"idempotency_key":"wei-1","by":1}"#, 1)).await;
    assert_eq!(again.header("x-idempotency-status"), Some("duplicate"));
    assert_eq!(again.body, first.body, "byte-identical replay");
    assert_eq!(s.demo.counter("default"), 1);
}

#[tokio::test]
async fn rpc_one_and_one_point_zero_are_the_same_params() {
    let s = TestServer::start().await;
    let first = s.post(rpc(r#"{"by":1,"idempotency_key":"one-1"}"#, 1)).await;
    assert_eq!(first.header("x-idempotency-status"), Some("new"), "{}", first.body);
    for (i, spelling) in ["1.0", "1e0", "10e-1", "0.1E1", "100e-2"].into_iter().enumerate() {
        let a = s.post(rpc(&format!(r#"{{"by":{spelling},"idempotency_key":"one-1"}}"#), 1)).await;
        assert_eq!(a.header("x-idempotency-status"), Some("duplicate"), "{spelling}: {}", a.body);
        assert_eq!(a.body, first.body, "{spelling} (#{i}) replays the stored answer, no -32002");
    }
    assert_eq!(s.demo.counter("default"), 1);
}

#[tokio::test]
async fn rpc_duplicate_members_are_invalid_requests_that_run_nothing_and_leave_no_record() {
    let s = TestServer::start().await;
    for (params, member) in [
        (r#"{"by":5,"by":7,"idempotency_key":"dup-1"}"#, "by"),
        (r#"{"by":5,"meta":{"note":{"x":1,"x":2}},"idempotency_key":"dup-1"}"#, "x"),
        (r#"{"by":5,"idempotency_key":"dup-1","idempotency_key":"dup-1"}"#, "idempotency_key"),
        (r#"{"by":5,"\u0062y":7,"idempotency_key":"dup-1"}"#, "by"),
    ] {
        let v = s.post(rpc(params, 9)).await.json();
        assert_eq!(v["error"]["code"], -32600, "{params}: {v}");
        assert_eq!(v["error"]["message"], format!("duplicate member \"{member}\" in params"), "{params}");
        assert_eq!(v["id"], 9, "the request's id is echoed");
    }
    // The same with the key in a header, in a batch, and without a key (dev mode).
    let v = s.post_with(rpc(r#"{"by":5,"by":7}"#, 10), &[("X-Idempotency-Key", "dup-1")]).await.json();
    assert_eq!(v["error"]["code"], -32600, "{v}");
    let batch = format!(
        "[{},{}]",
        rpc(r#"{"by":5,"by":7,"idempotency_key":"dup-1"}"#, 11),
        rpc(r#"{"by":2,"idempotency_key":"dup-2"}"#, 12)
    );
    let v = s.post(batch).await.json();
    assert_eq!(v[0]["error"]["code"], -32600, "{v}");
    assert_eq!(v[1]["result"], json!({"total": 2}), "the other entry runs: {v}");
    let v = s.post(rpc(r#"{"by":5,"by":7}"#, 13)).await.json();
    assert_eq!(v["error"]["code"], -32600, "{v}");
    assert_eq!(s.demo.counter("default"), 2, "none of the duplicate-member requests ran");
    assert!(!record_exists(&s, "counter.increment", "dup-1").await, "no record left");

    // A corrected retry with the same key runs.
    let ok = s.post(rpc(r#"{"by":5,"idempotency_key":"dup-1"}"#, 14)).await;
    assert_eq!(ok.header("x-idempotency-status"), Some("new"), "{}", ok.body);
    assert_eq!(ok.json()["result"], json!({"total": 7}));
}

#[tokio::test]
async fn rpc_a_key_in_params_or_in_a_header_is_the_same_request() {
    let s = TestServer::start().await;
    // Params first, then the header.
    let a = s.post(rpc(r#"{"amount":5,"idempotency_key":"k-1","by":5}"#, 1)).await;
    assert_eq!(a.header("x-idempotency-status"), Some("new"), "{}", a.body);
    let b = s.post_with(rpc(r#"{"by":5,"amount":5}"#, 1), &[("X-Idempotency-Key", "k-1")]).await;
    assert_eq!(b.header("x-idempotency-status"), Some("duplicate"), "{}", b.body);
    assert_eq!(b.body, a.body);
    // The header first, then the params (and the IETF header).
    let c = s.post_with(rpc(r#"{"by":5,"amount":5}"#, 2), &[("Idempotency-Key", "k-2")]).await;
    assert_eq!(c.header("x-idempotency-status"), Some("new"), "{}", c.body);
    let d = s.post(rpc(r#"{"amount":5.0,"by":5,"idempotency_key":"k-2"}"#, 2)).await;
    assert_eq!(d.header("x-idempotency-status"), Some("duplicate"), "{}", d.body);
    assert_eq!(d.body, c.body);
    // Both, agreeing: still the same request.
    let e = s
        .post_with(rpc(r#"{"by":5,"amount":5,"idempotency_key":"k-1"}"#, 1), &[("X-Idempotency-Key", "k-1")])
        .await;
    assert_eq!(e.header("x-idempotency-status"), Some("duplicate"), "{}", e.body);
    assert_eq!(s.demo.counter("default"), 10, "two executions, one per key");
}

// ---------------------------------------------------------------------------------------------
// flows door

/// An upstream that records each body as raw text and answers `{"step":…,"input":<body>}`
/// with the body spliced in as is, so no number of it passes through an `f64` on either side.
struct RawUpstream {
    addr: std::net::SocketAddr,
    bodies: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl RawUpstream {
    async fn start() -> RawUpstream {
        let bodies: Arc<Mutex<Vec<String>>> = Arc::default();
        let app = Router::new().route("/{step}", post(raw_step)).with_state(bodies.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        RawUpstream { addr, bodies, task }
    }

    fn bodies(&self) -> Vec<String> {
        self.bodies.lock().unwrap().clone()
    }

    fn calls(&self) -> usize {
        self.bodies.lock().unwrap().len()
    }
}

impl Drop for RawUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn raw_step(
    State(bodies): State<Arc<Mutex<Vec<String>>>>,
    Path(step): Path<String>,
    body: String,
) -> String {
    bodies.lock().unwrap().push(body.clone());
    format!(r#"{{"step":{},"input":{body}}}"#, Value::String(step))
}

async fn start_flows() -> (TestServer, RawUpstream) {
    let up = RawUpstream::start().await;
    let mut cfg = test_config();
    cfg.methods = vec![MethodConfig {
        name: "payments.send".into(),
        kind: oncerpc_core::Kind::Command,
        notification_allowed: false,
        timeout_ms: Some(5_000),
        params_schema: Some(json!({"type": "object", "required": ["amount"]})),
        description: None,
        steps: vec![StepConfig {
            name: "transfer".into(),
            url: format!("http://{}/transfer", up.addr),
            ..Default::default()
        }],
        ..Default::default()
    }];
    let s = TestServer::start_with(cfg).await;
    (s, up)
}

async fn send(s: &TestServer, query: &str, body: &str, key: Option<&str>) -> Answer {
    let headers: Vec<(&str, &str)> = key.map(|k| ("X-Idempotency-Key", k)).into_iter().collect();
    s.post_path(&format!("/v2/flows/payments.send{query}"), body.to_owned(), &headers).await
}

#[tokio::test]
async fn flows_wei_amounts_past_u64_are_422_and_reach_the_upstream_exactly() {
    let (s, up) = start_flows().await;
    let body1 = format!(r#"{{"amount":{WEI_1}}}"#);
    let first = send(&s, "?sync=true", &body1, Some("wei-f")).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.header("x-idempotency-status"), Some("new"));
    assert_eq!(up.bodies(), vec![body1.clone()], "forwarded byte for byte");
    assert_eq!(first.body, format!(r#"{{"step":"transfer","input":{body1}}}"#));

    let second = send(&s, "?sync=true", &format!(r#"{{"amount":{WEI_2}}}"#), Some("wei-f")).await;
    assert_eq!(second.status, 422, "{}", second.body);
    assert_eq!(second.json()["code"], "422");
    assert!(!second.body.contains(WEI_1), "not the first one's stored answer: {}", second.body);
    assert_eq!(up.calls(), 1);

    // The same amount spelled otherwise is the same request: the stored result.
    let again = send(&s, "?sync=true", r#"{ "amount" : 1.00000000000000000001E+20 }"#, Some("wei-f")).await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.header("x-idempotency-status"), Some("duplicate"));
    assert_eq!(again.body, first.body);

    // 1 and 1.0: a duplicate, not 422.
    let one = send(&s, "?sync=true", r#"{"amount":1}"#, Some("one-f")).await;
    assert_eq!(one.header("x-idempotency-status"), Some("new"), "{}", one.body);
    let one_point_zero = send(&s, "?sync=true", r#"{"amount":1.0}"#, Some("one-f")).await;
    assert_eq!(one_point_zero.status, 200, "{}", one_point_zero.body);
    assert_eq!(one_point_zero.header("x-idempotency-status"), Some("duplicate"));
    assert_eq!(one_point_zero.body, one.body);
    assert_eq!(up.calls(), 2);

    // Async submissions follow the same rule.
    let a = send(&s, "", &body1, Some("wei-async")).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let b = send(&s, "", &format!(r#"{{"amount":{WEI_2}}}"#), Some("wei-async")).await;
    assert_eq!(b.status, 422, "{}", b.body);
    let c = send(&s, "", &format!(r#"{{"amount":{WEI_1}.000}}"#), Some("wei-async")).await;
    assert_eq!(c.status, 200, "{}", c.body);
    assert_eq!(c.json()["event_id"], a.json()["event_id"], "a duplicate gets the same event");
}

#[tokio::test]
async fn flows_duplicate_members_are_400_and_nothing_is_forwarded() {
    let (s, up) = start_flows().await;
    for (query, body, key) in [
        ("?sync=true", format!(r#"{{"amount":{WEI_1},"amount":{WEI_2}}}"#), Some("dup-f")),
        ("", format!(r#"{{"amount":{WEI_1},"amount":{WEI_2}}}"#), Some("dup-f")),
        ("?sync=true", format!(r#"{{"amount":{WEI_1},"amount":{WEI_2},"idempotency_key":"dup-f"}}"#), None),
        ("?sync=true", r#"{"amount":1,"to":{"iban":"X","iban":"Y"}}"#.to_owned(), Some("dup-f")),
        // Without a key (an async call gets a synthetic one) and in dev mode.
        ("", format!(r#"{{"amount":{WEI_1},"amount":{WEI_2}}}"#), None),
        ("?sync=true", format!(r#"{{"amount":{WEI_1},"amount":{WEI_2}}}"#), None),
    ] {
        let a = send(&s, query, &body, key).await;
        assert_eq!(a.status, 400, "{query} {body}: {}", a.body);
        let v = a.json();
        assert_eq!(v["code"], "400");
        assert!(v["message"].as_str().unwrap().starts_with("duplicate member \""), "{v}");
    }
    assert_eq!(up.calls(), 0, "nothing reached the upstream");
    assert!(!record_exists(&s, "payments.send", "dup-f").await, "no record left");

    // A corrected retry with the same key runs.
    let ok = send(&s, "?sync=true", &format!(r#"{{"amount":{WEI_2}}}"#), Some("dup-f")).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(ok.header("x-idempotency-status"), Some("new"));
    assert_eq!(up.bodies(), vec![format!(r#"{{"amount":{WEI_2}}}"#)]);
}

#[tokio::test]
async fn flows_a_key_in_params_or_in_a_header_is_the_same_request() {
    let (s, up) = start_flows().await;
    let bare = format!(r#"{{"amount":{WEI_1},"memo":"rent"}}"#);
    // Params first, then the header.
    let a = send(
        &s,
        "?sync=true",
        &format!(r#"{{"amount":{WEI_1},"idempotency_key":"pk-1","memo":"rent"}}"#),
        None,
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.header("x-idempotency-key"), Some("pk-1"));
    assert_eq!(a.header("x-idempotency-status"), Some("new"));
    // The upstream gets the params without the key, every other byte kept.
    assert_eq!(up.bodies(), vec![bare.clone()]);
    let b = send(&s, "?sync=true", &bare, Some("pk-1")).await;
    assert_eq!(b.header("x-idempotency-status"), Some("duplicate"), "{}", b.body);
    assert_eq!(b.body, a.body);

    // The header first, then the params.
    let c = send(&s, "?sync=true", &bare, Some("pk-2")).await;
    assert_eq!(c.header("x-idempotency-status"), Some("new"), "{}", c.body);
    let d = send(
        &s,
        "?sync=true",
        &format!(r#"{{"memo":"rent","idempotency_key":"pk-2","amount":{WEI_1}}}"#),
        None,
    )
    .await;
    assert_eq!(d.header("x-idempotency-status"), Some("duplicate"), "{}", d.body);
    assert_eq!(d.body, c.body);

    // Both doors' first step got the same input.
    assert_eq!(up.bodies(), vec![bare.clone(), bare]);

    // A key in the params with another amount is still the same key: 422.
    let e = send(
        &s,
        "?sync=true",
        &format!(r#"{{"amount":{WEI_2},"idempotency_key":"pk-1","memo":"rent"}}"#),
        None,
    )
    .await;
    assert_eq!(e.status, 422, "{}", e.body);
    assert_eq!(up.calls(), 2);
}
