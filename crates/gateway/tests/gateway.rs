//! The gateway (issue: flows over HTTP with tenants, async events, upstream steps, metrics),
//! against a real oncerpc server and a real upstream HTTP server on loopback.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::upstream::{Upstream, flow};
use common::{Answer, TestServer, test_config};
use oncerpc::Config;
use oncerpc::config::Tenant;
use serde_json::{Value, json};

const ACME_KEY: &str = "acme-secret";
const BETA_KEY: &str = "test"; // configured as its SHA-256 only
const BETA_SHA256: &str = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

fn gateway_config(up: &Upstream) -> Config {
    let mut cfg = test_config();
    cfg.methods = vec![flow("orders.create", up, &["reserve", "confirm"])];
    cfg.tenants = vec![
        Tenant { name: "acme".into(), api_keys: vec![ACME_KEY.into()], ..Tenant::default() },
        Tenant { name: "beta".into(), api_keys: vec![BETA_SHA256.into()], ..Tenant::default() },
    ];
    cfg.store.resume_interval_ms = 100;
    cfg
}

async fn start() -> (TestServer, Upstream) {
    let up = Upstream::start().await;
    let s = TestServer::start_with(gateway_config(&up)).await;
    (s, up)
}

async fn post_flow(s: &TestServer, query: &str, body: &str, headers: &[(&str, &str)]) -> Answer {
    s.post_path(&format!("/v2/flows/orders.create{query}"), body.to_owned(), headers).await
}

/// Poll an event until it is no longer processing (bounded).
async fn finished_event(s: &TestServer, id: &str, key: &str) -> Value {
    for _ in 0..200 {
        let a = s.get_with(&format!("/v2/events/{id}"), &[("X-API-Key", key)]).await;
        assert_eq!(a.status, 200, "{}", a.body);
        let v = a.json();
        if v["status"] != "processing" {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("event {id} did not finish");
}

#[tokio::test]
async fn async_duplicate_gets_the_same_event_id_and_runs_each_step_once() {
    let (s, up) = start().await;
    let h = [("X-API-Key", ACME_KEY), ("X-Idempotency-Key", "order-7")];
    let first = post_flow(&s, "?tags=web,eu", r#"{"sku":"A-1","qty":2}"#, &h).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.header("x-idempotency-status"), Some("new"));
    let id = first.json()["event_id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("evt_"), "{id}");
    let second = post_flow(&s, "?tags=web,eu", r#"{"sku":"A-1","qty":2}"#, &h).await;
    assert_eq!(second.status, 200);
    assert_eq!(second.json()["event_id"], id, "a duplicate gets the same event_id");
    assert!(matches!(second.header("x-idempotency-status"), Some("processing" | "duplicate")));

    let ev = finished_event(&s, &id, ACME_KEY).await;
    assert_eq!(ev["status"], "succeeded", "{ev}");
    assert_eq!(ev["flow"], "orders.create");
    assert_eq!(ev["tags"], json!(["web", "eu"]));
    assert_eq!(ev["result"]["step"], "confirm");
    assert_eq!(ev["result"]["input"]["input"], json!({"sku":"A-1","qty":2}), "step 2 got step 1's output");
    assert!(ev["created_at"].as_str().unwrap().ends_with('Z'));
    let third = post_flow(&s, "?tags=web,eu", r#"{"sku":"A-1","qty":2}"#, &h).await;
    assert_eq!(third.json()["event_id"], id);
    assert_eq!(third.header("x-idempotency-status"), Some("duplicate"));
    assert_eq!(up.count("reserve"), 1);
    assert_eq!(up.count("confirm"), 1);
}

#[tokio::test]
async fn upstream_calls_carry_correlation_and_derived_idempotency_keys() {
    let (s, up) = start().await;
    let h = [("X-API-Key", ACME_KEY), ("X-Idempotency-Key", "order-keys"), ("X-Correlation-Id", "corr-123")];
    let a = post_flow(&s, "?sync=true", r#"{"sku":"A-1"}"#, &h).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.header("x-correlation-id"), Some("corr-123"));
    let calls = up.calls();
    assert_eq!(calls.len(), 2);
    for c in &calls {
        assert_eq!(c.correlation_id.as_deref(), Some("corr-123"));
        let expected =
            oncerpc_core::idempotency::upstream_key("acme", "orders.create", "order-keys", &c.step);
        assert_eq!(c.idempotency_key.as_deref(), Some(expected.as_str()));
    }
    assert_ne!(calls[0].idempotency_key, calls[1].idempotency_key, "one key per step");
    assert_eq!(calls[0].body, json!({"sku":"A-1"}), "reserved members never reach the upstream");
}

#[tokio::test]
async fn sync_duplicate_returns_the_stored_body_and_other_params_are_422() {
    let (s, up) = start().await;
    let h = [("X-API-Key", ACME_KEY), ("X-Idempotency-Key", "sync-1")];
    let first = post_flow(&s, "?sync=true", r#"{"sku":"B-2"}"#, &h).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.header("x-idempotency-status"), Some("new"));
    assert_eq!(first.json()["step"], "confirm");
    let again = post_flow(&s, "?sync=true", r#"{"sku":"B-2"}"#, &h).await;
    assert_eq!(again.status, 200);
    assert_eq!(again.header("x-idempotency-status"), Some("duplicate"));
    assert_eq!(again.body, first.body, "the stored body, byte for byte (not {{}})");
    assert_eq!(up.counts().values().sum::<usize>(), 2, "no new upstream call");
    let other = post_flow(&s, "?sync=true", r#"{"sku":"C-3"}"#, &h).await;
    assert_eq!(other.status, 422);
    assert_eq!(other.json()["code"], "422");
}

#[tokio::test]
async fn sync_in_flight_answers_200_empty_with_processing() {
    let (s, up) = start().await;
    let s = Arc::new(s);
    up.set_delay(500, &["reserve"]);
    let h = [("X-API-Key", ACME_KEY), ("X-Idempotency-Key", "slow-sync")];
    let first = {
        let s = s.clone();
        tokio::spawn(async move { post_flow(&s, "?sync=true", r#"{"sku":"S"}"#, &h).await })
    };
    s.wait_processing("acme", "orders.create", "slow-sync").await;
    let p = post_flow(&s, "?sync=true", r#"{"sku":"S"}"#, &h).await;
    assert_eq!(p.header("x-idempotency-status"), Some("processing"));
    assert_eq!((p.status, p.body.as_str()), (200, "{}"));
    assert_eq!(first.await.unwrap().header("x-idempotency-status"), Some("new"));
}

#[tokio::test]
async fn upstream_failure_is_502_replayed_then_force_retried_then_409() {
    let (s, up) = start().await;
    up.set_fail(true);
    let h = [("X-API-Key", ACME_KEY), ("X-Idempotency-Key", "fail-1")];
    let failed = post_flow(&s, "?sync=true", r#"{"sku":"F"}"#, &h).await;
    assert_eq!(failed.status, 502, "{}", failed.body);
    let v = failed.json();
    assert_eq!(v["code"], "502");
    assert_eq!(v["data"]["step"], "reserve");
    assert_eq!(v["data"]["status"], 500);
    assert_eq!(up.count("reserve"), 1);

    let replay = post_flow(&s, "?sync=true", r#"{"sku":"F"}"#, &h).await;
    assert_eq!(replay.status, 502);
    assert_eq!(replay.header("x-idempotency-status"), Some("duplicate"));
    assert_eq!(replay.body, failed.body);
    assert_eq!(up.count("reserve"), 1, "a replay makes no upstream call");

    up.set_fail(false);
    let forced = [("X-API-Key", ACME_KEY), ("X-Idempotency-Key", "fail-1"), ("X-Force-Retry", "true")];
    let ok = post_flow(&s, "?sync=true", r#"{"sku":"F"}"#, &forced).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(ok.header("x-idempotency-status"), Some("new"));
    assert_eq!((up.count("reserve"), up.count("confirm")), (2, 1));

    let refused = post_flow(&s, "?sync=true", r#"{"sku":"F"}"#, &forced).await;
    assert_eq!(refused.status, 409);
    assert_eq!(refused.json()["code"], "409");
    assert_eq!((up.count("reserve"), up.count("confirm")), (2, 1), "409: nothing ran");
}

#[tokio::test]
async fn refused_connection_fails_the_flow_as_502_and_a_slow_one_as_504() {
    let up = Upstream::start().await;
    let mut cfg = gateway_config(&up);
    let mut dead = flow("orders.dead", &up, &["reserve"]);
    dead.steps[0].url = "http://127.0.0.1:9/reserve".into(); // discard port: refused
    let mut slow = flow("orders.slow", &up, &["reserve"]);
    slow.timeout_ms = Some(200);
    cfg.methods.extend([dead, slow]);
    let s = TestServer::start_with(cfg).await;
    let h = [("X-API-Key", ACME_KEY), ("X-Idempotency-Key", "dead-1")];
    let a = s.post_path("/v2/flows/orders.dead?sync=true", r#"{"sku":"D"}"#.to_owned(), &h).await;
    assert_eq!(a.status, 502, "{}", a.body);
    assert!(a.json()["data"]["error"].as_str().unwrap().to_lowercase().contains("refused"), "{}", a.body);

    up.set_delay(1_000, &["reserve"]);
    let h = [("X-API-Key", ACME_KEY), ("X-Idempotency-Key", "slow-1")];
    let a = s.post_path("/v2/flows/orders.slow?sync=true", r#"{"sku":"S"}"#.to_owned(), &h).await;
    assert_eq!(a.status, 504, "{}", a.body);
    assert_eq!(a.json()["rpc_code"], -32005);
    // Recorded as failed: the replay is the same 504.
    let again = s.post_path("/v2/flows/orders.slow?sync=true", r#"{"sku":"S"}"#.to_owned(), &h).await;
    assert_eq!((again.status, again.header("x-idempotency-status")), (504, Some("duplicate")));
}

#[tokio::test]
async fn return_step_returns_that_steps_output_and_unknown_steps_are_400() {
    let (s, up) = start().await;
    let h = [("X-API-Key", ACME_KEY), ("X-Idempotency-Key", "ret-1")];
    let a = post_flow(&s, "?sync=true&return_step=reserve", r#"{"sku":"R"}"#, &h).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json()["step"], "reserve");
    assert_eq!(up.count("confirm"), 1, "the later steps still run");
    let bad = post_flow(&s, "?sync=true&return_step=ship", r#"{"sku":"R"}"#, &h).await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.json(), json!({"code":"400","message":"unknown return_step: ship"}));
    assert_eq!(up.count("reserve"), 1, "a 400 runs nothing");
}

#[tokio::test]
async fn tenants_are_isolated() {
    let (s, up) = start().await;
    let body = r#"{"sku":"T"}"#;
    let a = post_flow(&s, "", body, &[("X-API-Key", ACME_KEY), ("X-Idempotency-Key", "shared-key")]).await;
    let b = post_flow(&s, "", body, &[("X-API-Key", BETA_KEY), ("X-Idempotency-Key", "shared-key")]).await;
    let (ida, idb) = (a.json()["event_id"].clone(), b.json()["event_id"].clone());
    assert_ne!(ida, idb);
    assert_eq!(a.header("x-idempotency-status"), Some("new"));
    assert_eq!(b.header("x-idempotency-status"), Some("new"), "same key, other tenant: a new execution");
    finished_event(&s, ida.as_str().unwrap(), ACME_KEY).await;
    finished_event(&s, idb.as_str().unwrap(), BETA_KEY).await;
    assert_eq!(up.count("confirm"), 2, "two executions");
    let peek = s.get_with(&format!("/v2/events/{}", ida.as_str().unwrap()), &[("X-API-Key", BETA_KEY)]).await;
    assert_eq!(peek.status, 404, "tenant B cannot read tenant A's event");
    // /rpc is tenant-scoped too.
    let rpc = |key: &'static str| {
        let s = &s;
        async move {
            s.post_with(
                json!({"jsonrpc":"2.0","method":"orders.create","params":{"sku":"T","idempotency_key":"rpc-k"},"id":1})
                    .to_string(),
                &[("X-API-Key", key)],
            )
            .await
        }
    };
    assert_eq!(rpc(ACME_KEY).await.header("x-idempotency-status"), Some("new"));
    assert_eq!(rpc(BETA_KEY).await.header("x-idempotency-status"), Some("new"));
    assert_eq!(rpc(ACME_KEY).await.header("x-idempotency-status"), Some("duplicate"));
}

#[tokio::test]
async fn api_keys_are_required_once_tenants_exist() {
    let (s, _up) = start().await;
    let unauthorized = r#"{"code":"401","message":"unauthorized"}"#;
    for headers in [vec![], vec![("X-API-Key", "wrong")], vec![("X-API-Key", BETA_SHA256)]] {
        let a = post_flow(&s, "?sync=true", r#"{"sku":"K"}"#, &headers).await;
        assert_eq!((a.status, a.body.as_str()), (401, unauthorized), "{headers:?}");
        let r = s.post_with(r#"{"jsonrpc":"2.0","method":"orders.create","id":1}"#, &headers).await;
        assert_eq!((r.status, r.body.as_str()), (401, unauthorized), "/rpc needs a key too");
    }
    // ?key= works like the header; the sha256-configured tenant authenticates with its key.
    let a = post_flow(
        &s,
        &format!("?sync=true&key={ACME_KEY}"),
        r#"{"sku":"K"}"#,
        &[("X-Idempotency-Key", "q-1")],
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let b = post_flow(
        &s,
        "?sync=true",
        r#"{"sku":"K"}"#,
        &[("X-API-Key", BETA_KEY), ("X-Idempotency-Key", "q-1")],
    )
    .await;
    assert_eq!(b.status, 200, "{}", b.body);
    // Health and metrics stay open.
    assert_eq!(s.get("/healthz").await.status, 200);
}

#[tokio::test]
async fn unknown_flow_is_404_bad_bodies_and_keys_are_400() {
    let (s, _up) = start().await;
    let k = [("X-API-Key", ACME_KEY)];
    let a = s.post_path("/v2/flows/nope", "{}".to_owned(), &k).await;
    assert_eq!(a.status, 404);
    assert_eq!(a.json()["code"], "404");
    assert_eq!(s.post_path("/v2/flows/", "{}".to_owned(), &k).await.status, 400, "missing flow");
    let bad_json = post_flow(&s, "?sync=true", "{not json", &k).await;
    assert_eq!(bad_json.status, 400);
    let bad_key = post_flow(
        &s,
        "?sync=true",
        r#"{"sku":"X"}"#,
        &[("X-API-Key", ACME_KEY), ("X-Idempotency-Key", "a b")],
    )
    .await;
    assert_eq!(bad_key.status, 400);
    assert_eq!(bad_key.json()["message"], "invalid idempotency key: invalid characters");
    let schema = post_flow(
        &s,
        "?sync=true",
        r#"{"qty":1}"#,
        &[("X-API-Key", ACME_KEY), ("X-Idempotency-Key", "schema-1")],
    )
    .await;
    assert_eq!(schema.status, 400, "params_schema: sku is required");
}

#[tokio::test]
async fn metrics_count_new_and_duplicate() {
    let (s, _up) = start().await;
    let h = [("X-API-Key", ACME_KEY), ("X-Idempotency-Key", "m-1")];
    post_flow(&s, "?sync=true", r#"{"sku":"M"}"#, &h).await;
    post_flow(&s, "?sync=true", r#"{"sku":"M"}"#, &h).await;
    post_flow(&s, "?sync=true", r#"{"sku":"M"}"#, &h).await;
    let m = s.get("/metrics").await;
    assert_eq!(m.status, 200);
    let line = |needle: &str| -> f64 {
        m.body
            .lines()
            .find(|l| l.starts_with(needle))
            .unwrap_or_else(|| panic!("no {needle} in\n{}", m.body))
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert_eq!(line(r#"oncerpc_idempotency_total{method="orders.create",status="new"}"#), 1.0);
    assert_eq!(line(r#"oncerpc_idempotency_total{method="orders.create",status="duplicate"}"#), 2.0);
    assert_eq!(line(r#"oncerpc_requests_total{kind="command",method="orders.create",outcome="ok"}"#), 3.0);
    assert!(m.body.contains("oncerpc_request_duration_seconds_bucket"));
    assert!(m.body.contains("oncerpc_in_flight_requests"));
}

#[tokio::test]
async fn every_batch_entry_is_counted_in_the_metrics_once_the_answer_is_sent() {
    // A batch's successes are added to the shared metrics once, when the batch ends (not per
    // entry): the answer must not be sent before they are.
    let s = TestServer::start().await;
    let batch = json!([
        {"jsonrpc":"2.0","method":"sum","params":[1,2],"id":1},
        {"jsonrpc":"2.0","method":"sum","params":[3,4],"id":2},
        {"jsonrpc":"2.0","method":"subtract","params":[5,1],"id":3},
        {"jsonrpc":"2.0","method":"nope","id":4},
        {"jsonrpc":"2.0","method":"sum","params":[5,6],"id":5}
    ]);
    for _ in 0..2 {
        let a = s.post(batch.to_string()).await;
        assert_eq!(a.json().as_array().map(Vec::len), Some(5), "{}", a.body);
    }
    let m = s.get("/metrics").await;
    let value = |needle: &str| -> Option<String> {
        m.body.lines().find(|l| l.starts_with(needle)).and_then(|l| l.rsplit(' ').next()).map(str::to_owned)
    };
    assert_eq!(
        value(r#"oncerpc_requests_total{kind="query",method="sum",outcome="ok"}"#).as_deref(),
        Some("6")
    );
    assert_eq!(value(r#"oncerpc_request_duration_seconds_count{method="sum"}"#).as_deref(), Some("6"));
    assert_eq!(
        value(r#"oncerpc_requests_total{kind="query",method="subtract",outcome="ok"}"#).as_deref(),
        Some("2")
    );
    assert_eq!(
        value(r#"oncerpc_requests_total{kind="unknown",method="unknown",outcome="-32601"}"#).as_deref(),
        Some("2")
    );
    assert_eq!(value("oncerpc_batch_size_count").as_deref(), Some("2"));
}

#[tokio::test]
async fn max_in_flight_reached_is_503() {
    let up = Upstream::start().await;
    let mut cfg = gateway_config(&up);
    cfg.limits.max_in_flight = 1;
    let s = Arc::new(TestServer::start_with(cfg).await);
    up.set_delay(400, &["reserve"]);
    let slow = {
        let s = s.clone();
        tokio::spawn(async move {
            post_flow(
                &s,
                "?sync=true",
                r#"{"sku":"O"}"#,
                &[("X-API-Key", ACME_KEY), ("X-Idempotency-Key", "busy-1")],
            )
            .await
        })
    };
    // Wait until the slow request holds the only slot.
    for _ in 0..100 {
        if up.count("reserve") == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let refused = post_flow(
        &s,
        "?sync=true",
        r#"{"sku":"O"}"#,
        &[("X-API-Key", ACME_KEY), ("X-Idempotency-Key", "busy-2")],
    )
    .await;
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert_eq!(refused.json()["code"], "503");
    let rpc =
        s.post_with(r#"{"jsonrpc":"2.0","method":"orders.create","id":1}"#, &[("X-API-Key", ACME_KEY)]).await;
    assert_eq!(rpc.status, 503);
    assert_eq!(rpc.json()["error"]["code"], -32007);
    assert_eq!(slow.await.unwrap().status, 200);
    let m = s.get("/metrics").await;
    assert!(m.body.contains(r#"oncerpc_overloaded_total{door="flows"} 1"#), "{}", m.body);
}

#[tokio::test]
async fn a_flow_is_callable_through_rpc() {
    let (s, up) = start().await;
    let body = json!({"jsonrpc":"2.0","method":"orders.create","params":{"sku":"P","idempotency_key":"via-rpc"},"id":"r1"});
    let a = s.post_with(body.to_string(), &[("X-API-Key", ACME_KEY)]).await;
    let v = a.json();
    assert_eq!(v["result"]["step"], "confirm", "{v}");
    assert_eq!(v["id"], "r1");
    assert_eq!(up.count("confirm"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_submit_during_a_sync_call_gets_an_event_that_exists_and_finishes() {
    let (s, up) = start().await;
    up.set_delay(600, &["confirm"]);
    let headers = [("X-API-Key", ACME_KEY), ("X-Idempotency-Key", "sync-then-async")];
    let body = r#"{"sku":"A-1"}"#;
    let sync = {
        let (client, url) = (s.client.clone(), s.url("/v2/flows/orders.create?sync=true"));
        tokio::spawn(async move {
            let req =
                client.post(url).header("X-API-Key", ACME_KEY).header("X-Idempotency-Key", "sync-then-async");
            req.body(r#"{"sku":"A-1"}"#).send().await.unwrap().text().await.unwrap()
        })
    };
    s.wait_processing("acme", "orders.create", "sync-then-async").await;
    // The record is the sync call's: the async door answers `processing` with an event id …
    let a = post_flow(&s, "", body, &headers).await;
    assert_eq!((a.status, a.header("x-idempotency-status")), (200, Some("processing")), "{}", a.body);
    let id = a.json()["event_id"].as_str().unwrap().to_owned();
    // … that exists at once (not a 404) …
    let e = s.get_with(&format!("/v2/events/{id}"), &[("X-API-Key", ACME_KEY)]).await;
    assert_eq!(e.status, 200, "{}", e.body);
    // … and finishes with the sync call's outcome, which ran once.
    let sync_body = sync.await.unwrap();
    let v = finished_event(&s, &id, ACME_KEY).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    assert_eq!(v["result"], serde_json::from_str::<Value>(&sync_body).unwrap(), "{v}");
    assert_eq!(up.count("confirm"), 1);
}

#[tokio::test]
async fn a_flow_body_nested_beyond_the_rpc_limit_is_a_400_and_nothing_is_forwarded() {
    let up = Upstream::start().await;
    let mut cfg = gateway_config(&up);
    let mut open = flow("orders.any", &up, &["reserve"]);
    open.params_schema = None;
    cfg.methods.push(open.clone());
    open.name = "orders.peek".into();
    open.kind = oncerpc_core::Kind::Query;
    cfg.methods.push(open);
    let s = TestServer::start_with(cfg).await;
    let h = [("X-API-Key", ACME_KEY), ("X-Idempotency-Key", "deep-1")];
    let deep_array = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let deep_object = format!("{}1{}", r#"{"a":"#.repeat(200), "}".repeat(200));
    for body in [&deep_array, &deep_object] {
        for path in ["orders.any", "orders.any?sync=true", "orders.peek?sync=true", "orders.peek"] {
            let a = s.post_path(&format!("/v2/flows/{path}"), body.clone(), &h).await;
            assert_eq!(a.status, 400, "{}", a.body);
            let v = a.json();
            assert_eq!(v["code"], "400", "{v}");
            assert!(
                v["message"]
                    .as_str()
                    .unwrap()
                    .starts_with("Parse error: the body is nested deeper than 127 levels"),
                "{v}"
            );
        }
    }
    assert_eq!(up.calls().len(), 0, "nothing was forwarded");
    assert_eq!(s.get_with("/v2/events/evt_x", &[("X-API-Key", ACME_KEY)]).await.status, 404);
    // The limit of `/rpc`'s params: 127 levels (128 with the envelope) run, 128 do not.
    let a = s.post_path("/v2/flows/orders.any", format!("{}{}", "[".repeat(128), "]".repeat(128)), &h).await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert_eq!(up.calls().len(), 0, "nothing was forwarded");
    let ok = format!("{}{}", "[".repeat(127), "]".repeat(127));
    let a = s
        .post_path(
            "/v2/flows/orders.any?sync=true",
            ok,
            &[("X-API-Key", ACME_KEY), ("X-Idempotency-Key", "deep-2")],
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(up.count("reserve"), 1);
}
