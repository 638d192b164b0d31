//! A rolling deploy finishes its work: SIGTERM to the real binary while async events and
//! commands whose client hung up are running. Everything finishes and is recorded before the
//! process exits, and after a restart on the same store no upstream call repeats.

mod common;

use std::time::Duration;

use common::process::{Gateway, TempDir, replica_config};
use common::upstream::Upstream;
use serde_json::Value;

async fn flow(
    client: &reqwest::Client,
    gw: &Gateway,
    query: &str,
    key: &str,
) -> reqwest::Result<reqwest::Response> {
    client
        .post(gw.url(&format!("/v2/flows/orders.create{query}")))
        .header("X-Idempotency-Key", key)
        .body(format!(r#"{{"order":"{key}"}}"#))
        .send()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_async_events_and_abandoned_commands_before_exiting() {
    let up = Upstream::start().await;
    up.set_delay(1500, &["charge"]);
    let dir = TempDir::new("sigterm");
    let store = format!("sqlite://{}", dir.file("o.db").display());
    let config = replica_config(&dir, &store, &up, 4000, 3000);
    let mut gw = Gateway::start(&["--config", &config]);
    let client = common::http_client();

    // 20 async events: answered at once, executing in the background.
    let mut events = Vec::new();
    for i in 0..20 {
        let resp = flow(&client, &gw, "", &format!("evt-{i}")).await.expect("sent");
        assert_eq!(resp.status(), 200);
        let v: Value = resp.json().await.unwrap();
        events.push(v["event_id"].as_str().unwrap().to_owned());
    }
    // 5 sync commands whose clients give up after 200 ms.
    let impatient = common::http_client_builder().timeout(Duration::from_millis(200)).build().unwrap();
    for i in 0..5 {
        assert!(
            flow(&impatient, &gw, "?sync=true", &format!("cmd-{i}")).await.is_err(),
            "the client hung up"
        );
    }
    // All 25 are in the upstream's hands when the deploy stops the process.
    for _ in 0..200 {
        if up.count("charge") == 25 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(up.count("charge"), 25);
    gw.sigterm();
    let status = gw.wait_exit(Duration::from_secs(20));
    assert!(status.success(), "exit status {status:?}: {:#?}", gw.log());
    let log = gw.log().join("\n");
    assert!(!log.contains("left processing"), "nothing may be left processing:\n{log}");

    // The next version starts on the same store: everything is recorded, nothing re-runs.
    let gw = Gateway::start(&["--config", &config]);
    for id in &events {
        let v: Value =
            client.get(gw.url(&format!("/v2/events/{id}"))).send().await.unwrap().json().await.unwrap();
        assert_eq!(v["status"], "succeeded", "{id}: {v}");
    }
    for i in 0..5 {
        let resp = flow(&client, &gw, "?sync=true", &format!("cmd-{i}")).await.expect("sent");
        assert_eq!(resp.status(), 200);
        let status =
            resp.headers().get("x-idempotency-status").and_then(|v| v.to_str().ok()).map(str::to_owned);
        assert_eq!(status.as_deref(), Some("duplicate"), "cmd-{i} was recorded");
    }
    // Several resume intervals and more than a lease: nothing is executed again.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    assert_eq!(up.count("charge"), 25, "no upstream call repeated after the restart");
}
