//! Many replicas sharing one store (Redis, PostgreSQL): every guarantee of SPEC §3 across
//! real `oncerpc serve` processes, take-over after `kill -9`, and store outage and recovery.
//!
//! The servers come from `ONCERPC_TEST_REDIS_URL` / `ONCERPC_TEST_POSTGRES_URL`
//! (`scripts/test.sh` starts them and sets both). Unset: skipped with a reason, or a failure
//! in CI.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::process::{Gateway, TempDir, replica_config_serving, sync_flow_to, unique};
use common::proxy::{Proxy, via};
use common::upstream::Upstream;
use common::{TestServer, test_config};
use serde_json::json;

fn redis_url() -> Option<String> {
    oncerpc_core::testkit::service_url("ONCERPC_TEST_REDIS_URL", "Redis")
}

fn postgres_url() -> Option<String> {
    oncerpc_core::testkit::service_url("ONCERPC_TEST_POSTGRES_URL", "PostgreSQL")
}

async fn three_hundred_identical_commands_across_three_replicas(store_url: String) {
    let up = Upstream::start().await;
    up.set_delay(300, &[]);
    let dir = TempDir::new("replicas");
    let method = unique("orders");
    let config = replica_config_serving(&dir, &store_url, &up, 10_000, 5_000, &method);
    let replicas: Arc<Vec<Gateway>> =
        Arc::new((0..3).map(|_| Gateway::start(&["--config", &config])).collect());
    let client = common::http_client();
    let key = unique("pay");
    let mut tasks = Vec::new();
    for i in 0..300 {
        let (client, replicas, key, method) = (client.clone(), replicas.clone(), key.clone(), method.clone());
        tasks.push(tokio::spawn(async move { sync_flow_to(&client, &replicas[i % 3], &method, &key).await }));
    }
    let mut statuses = std::collections::HashMap::<String, usize>::new();
    for t in tasks {
        let (status, idem, body) = t.await.unwrap();
        assert_eq!(status, 200, "{body}");
        let idem = idem.unwrap_or_default();
        match idem.as_str() {
            "new" | "duplicate" => assert!(body.contains(r#""step":"charge""#), "{body}"),
            "processing" => assert_eq!(body, "{}"),
            other => panic!("unexpected status {other:?}: {body}"),
        }
        *statuses.entry(idem).or_default() += 1;
    }
    assert_eq!(statuses.get("new"), Some(&1), "exactly one `new`: {statuses:?}");
    assert_eq!(up.count("charge"), 1, "exactly one upstream execution across the replicas");
    // Every replica now answers the stored outcome.
    for gw in replicas.iter() {
        assert_eq!(sync_flow_to(&client, gw, &method, &key).await.1.as_deref(), Some("duplicate"));
    }
    assert_eq!(up.count("charge"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_three_replicas_300_identical_commands_execute_once() {
    let Some(url) = redis_url() else { return };
    three_hundred_identical_commands_across_three_replicas(url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_cluster_three_replicas_300_identical_commands_execute_once() {
    let Some(url) = oncerpc_core::testkit::service_url("ONCERPC_TEST_REDIS_CLUSTER_URL", "Redis Cluster")
    else {
        return;
    };
    three_hundred_identical_commands_across_three_replicas(url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_three_replicas_300_identical_commands_execute_once() {
    let Some(url) = postgres_url() else { return };
    three_hundred_identical_commands_across_three_replicas(url).await;
}

async fn another_replica_takes_over_after_kill_9(store_url: String) {
    let up = Upstream::start().await;
    up.set_delay(700, &[]);
    let dir = TempDir::new("replicas-kill");
    let method = unique("orders");
    let config = replica_config_serving(&dir, &store_url, &up, 2_000, 1_000, &method);
    let mut a = Gateway::start(&["--config", &config]);
    let b = Gateway::start(&["--config", &config]);
    let client = common::http_client();
    let key = unique("kill");
    let first = {
        let (client, url, key) =
            (client.clone(), a.url(&format!("/v2/flows/{method}?sync=true")), key.clone());
        tokio::spawn(async move {
            client.post(url).header("X-Idempotency-Key", key).body(r#"{"amount":42}"#).send().await
        })
    };
    // Replica A is executing once the upstream sees its call; then A dies.
    for _ in 0..2000 {
        if up.count("charge") == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(up.count("charge"), 1);
    a.kill9();
    assert!(first.await.unwrap().is_err(), "A died before answering");
    // Replica B: in progress while A's lease lives, then exactly one take-over.
    let mut new = 0;
    let mut saw_processing = false;
    for _ in 0..200 {
        let (status, idem, body) = sync_flow_to(&client, &b, &method, &key).await;
        assert_eq!(status, 200, "{body}");
        match idem.as_deref() {
            Some("processing") => saw_processing = true,
            Some("new") => {
                new += 1;
                assert!(body.contains(r#""step":"charge""#), "{body}");
            }
            Some("duplicate") => break,
            other => panic!("{other:?}: {body}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(saw_processing, "A's lease was honoured before the take-over");
    assert_eq!(new, 1, "the command completed once, on B");
    assert_eq!(up.count("charge"), 2, "the step ran again once, after the lease");
    let keys: Vec<_> = up.calls().into_iter().map(|c| c.idempotency_key).collect();
    assert_eq!(keys[0], keys[1], "the re-run carried the same upstream key");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_kill_9_of_the_executing_replica_another_takes_over() {
    let Some(url) = redis_url() else { return };
    another_replica_takes_over_after_kill_9(url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_kill_9_of_the_executing_replica_another_takes_over() {
    let Some(url) = postgres_url() else { return };
    another_replica_takes_over_after_kill_9(url).await;
}

async fn outage_fails_closed_and_recovers(store_url: String) {
    let proxy = Proxy::start(common::proxy::host_port(&store_url)).await;
    let mut cfg = test_config();
    cfg.store.url = via(&store_url, proxy.addr);
    cfg.store.redis_prefix = unique("oncerpc-outage");
    let s = TestServer::start_with(cfg).await;
    let inc = |key: &str, id: u32| {
        json!({"jsonrpc":"2.0","method":"counter.increment","params":{"by":1,"idempotency_key":key},"id":id})
            .to_string()
    };
    let k1 = unique("before");
    assert_eq!(s.post(inc(&k1, 1)).await.header("x-idempotency-status"), Some("new"));
    assert_eq!(s.get("/healthz").await.status, 200);

    proxy.block().await;
    let down = s.post(inc(&unique("during"), 2)).await.json();
    assert_eq!(down["error"]["code"], -32004, "{down}");
    assert_eq!(s.demo.counter("default"), 1, "a command never runs without its store");
    let q = s.call(json!({"jsonrpc":"2.0","method":"sum","params":[2,3],"id":3})).await;
    assert_eq!(q["result"], 5, "queries keep working");
    let health = s.get("/healthz").await;
    assert_eq!(health.status, 503);
    assert_eq!(health.json()["status"], "degraded");

    proxy.unblock();
    // The service recovers by itself (the first call may still meet a stale connection).
    let k2 = unique("after");
    let mut recovered = false;
    for i in 0..100 {
        let a = s.post(inc(&k2, 10 + i)).await;
        if a.header("x-idempotency-status") == Some("new") {
            recovered = true;
            break;
        }
        assert_eq!(a.json()["error"]["code"], -32004);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(recovered, "commands work again once the store is back");
    assert_eq!(s.demo.counter("default"), 2);
    assert_eq!(
        s.post(inc(&k1, 99)).await.header("x-idempotency-status"),
        Some("duplicate"),
        "records survived"
    );
    assert_eq!(s.get("/healthz").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_fails_closed_and_recovers_by_itself() {
    let Some(url) = redis_url() else { return };
    outage_fails_closed_and_recovers(url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_outage_fails_closed_and_recovers_by_itself() {
    let Some(url) = postgres_url() else { return };
    outage_fails_closed_and_recovers(url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_event_accepted_by_one_replica_is_finished_by_another() {
    for url in [redis_url(), postgres_url()].into_iter().flatten() {
        let up = Upstream::start().await;
        up.set_delay(600, &[]);
        let dir = TempDir::new("replicas-events");
        let method = unique("orders");
        let config = replica_config_serving(&dir, &url, &up, 2_000, 1_000, &method);
        let mut a = Gateway::start(&["--config", &config]);
        let b = Gateway::start(&["--config", &config]);
        let client = common::http_client();
        let resp = client
            .post(a.url(&format!("/v2/flows/{method}")))
            .header("X-Idempotency-Key", unique("evt"))
            .body(r#"{"amount":7}"#)
            .send()
            .await
            .unwrap();
        let id = resp.json::<serde_json::Value>().await.unwrap()["event_id"].as_str().unwrap().to_owned();
        for _ in 0..2000 {
            if up.count("charge") == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        a.kill9();
        let mut event = serde_json::Value::Null;
        for _ in 0..200 {
            event =
                client.get(b.url(&format!("/v2/events/{id}"))).send().await.unwrap().json().await.unwrap();
            if event["status"] != "processing" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(event["status"], "succeeded", "{url}: replica B finished A's event: {event}");
        assert_eq!(up.count("charge"), 2, "{url}");
    }
}
