//! What a flow's deadline says about its steps (SPEC §14): a step is not started with less
//! than its `timeout_ms` left (`-32005`, `data.step_in_flight: false`, nothing sent), and a
//! deadline that fires while a step's request is out says so (`data.step_in_flight: true`,
//! `data.step`), so a client knows whether a force retry could send it twice.

mod common;

use common::upstream::{Upstream, flow};
use common::{TestServer, test_config};
use serde_json::{Value, json};

/// The flow `pay` of `steps` on `up`, with the method's `timeout_ms` and each step's own.
async fn start(up: &Upstream, timeout_ms: u64, step_timeouts: &[Option<u64>]) -> TestServer {
    let names: Vec<&str> = ["a", "b"][..step_timeouts.len()].to_vec();
    let mut method = flow("pay", up, &names);
    method.timeout_ms = Some(timeout_ms);
    method.params_schema = None;
    for (step, ms) in method.steps.iter_mut().zip(step_timeouts) {
        step.timeout_ms = *ms;
    }
    let mut cfg = test_config();
    cfg.methods = vec![method];
    TestServer::start_with(cfg).await
}

async fn pay(s: &TestServer, key: &str) -> Value {
    s.call(json!({"jsonrpc": "2.0", "method": "pay", "params": {"idempotency_key": key}, "id": 1})).await
}

#[tokio::test]
async fn a_deadline_while_a_step_is_out_says_the_step_is_in_flight() {
    let up = Upstream::start().await;
    up.set_delay(3_000, &["b"]);
    let s = start(&up, 800, &[None, None]).await;
    let r = pay(&s, "k-in-flight").await;
    assert_eq!(r["error"]["code"], -32005, "{r}");
    assert_eq!(r["error"]["data"]["step_in_flight"], true, "{r}");
    assert_eq!(r["error"]["data"]["step"], "b", "{r}");
    assert_eq!(r["error"]["data"]["timeout_ms"], 800, "{r}");
    assert_eq!((up.count("a"), up.count("b")), (1, 1), "b was sent");
}

#[tokio::test]
async fn a_step_is_not_started_with_less_than_its_timeout_left() {
    let up = Upstream::start().await;
    up.set_delay(600, &["a"]);
    // 1000 ms for the flow: after a's 600 ms, b (timeout_ms 700) no longer fits.
    let s = start(&up, 1_000, &[None, Some(700)]).await;
    let r = pay(&s, "k-not-started").await;
    assert_eq!(r["error"]["code"], -32005, "{r}");
    let data = &r["error"]["data"];
    assert_eq!(data["step_in_flight"], false, "{r}");
    assert_eq!(data["step"], "b", "{r}");
    let reason = data["reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with(r#"step "b" not started: "#) && reason.ends_with("less than its timeout_ms (700)"),
        "{r}"
    );
    assert_eq!((up.count("a"), up.count("b")), (1, 0), "b was never sent");
}
