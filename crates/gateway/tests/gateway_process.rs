//! The gateway as a real process: async events survive `kill -9`, and logs are structured
//! lines that never contain an API key.

mod common;

use std::time::Duration;

use common::process::{Gateway, TempDir};
use common::upstream::Upstream;
use serde_json::Value;

const KEY: &str = "acme-very-secret-key";

fn write_config(dir: &TempDir, up: &Upstream) -> String {
    let path = dir.file("oncerpc.toml");
    std::fs::write(
        &path,
        format!(
            r#"
[store]
url = "sqlite://{db}"
lease_ms = 3000
resume_interval_ms = 100

[[tenants]]
name = "acme"
api_keys = ["{KEY}"]

[[methods]]
name = "orders.create"
kind = "command"
timeout_ms = 2000

  [[methods.steps]]
  name = "reserve"
  url = "{reserve}"
  [[methods.steps]]
  name = "confirm"
  url = "{confirm}"
"#,
            db = dir.file("o.db").display(),
            reserve = up.url("reserve"),
            confirm = up.url("confirm"),
        ),
    )
    .unwrap();
    path.display().to_string()
}

async fn get_json(client: &reqwest::Client, url: String) -> (u16, Value) {
    let resp = client.get(url).header("X-API-Key", KEY).send().await.expect("sent");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_event_running_at_kill_9_completes_after_restart_and_its_last_step_runs_once_more() {
    let up = Upstream::start().await;
    up.set_delay(800, &["confirm"]);
    let dir = TempDir::new("events-kill");
    let config = write_config(&dir, &up);
    let client = common::http_client();

    let mut gw = Gateway::start(&["--config", &config]);
    let resp = client
        .post(gw.url("/v2/flows/orders.create?tags=kill"))
        .header("X-API-Key", KEY)
        .header("X-Idempotency-Key", "order-kill-9")
        .body(r#"{"sku":"K-9"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let event_id = resp.json::<Value>().await.unwrap()["event_id"].as_str().unwrap().to_owned();
    // Kill while the last step is in flight.
    for _ in 0..2000 {
        if up.count("confirm") == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(up.count("confirm"), 1, "the last step was reached before the crash");
    gw.kill9();
    let (reserve_before, confirm_before) = (up.count("reserve"), up.count("confirm"));

    let gw = Gateway::start(&["--config", &config]);
    let (status, ev) = get_json(&client, gw.url(&format!("/v2/events/{event_id}"))).await;
    assert_eq!(status, 200, "the accepted event survived the crash: {ev}");
    let mut ev = ev;
    for _ in 0..300 {
        if ev["status"] != "processing" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        ev = get_json(&client, gw.url(&format!("/v2/events/{event_id}"))).await.1;
    }
    assert_eq!(ev["status"], "succeeded", "{ev}");
    assert_eq!(ev["tags"], serde_json::json!(["kill"]));
    assert_eq!(up.count("confirm") - confirm_before, 1, "the final step ran once after the restart");
    assert_eq!(
        up.count("reserve") - reserve_before,
        0,
        "the finished first step is not called again (journal)"
    );
    let keys: Vec<_> =
        up.calls().into_iter().filter(|c| c.step == "confirm").map(|c| c.idempotency_key).collect();
    assert_eq!(
        keys[0], keys[1],
        "the re-run step carries the same upstream key, so the upstream can deduplicate"
    );
    // A retry by the client now is a duplicate with the same event.
    let resp = client
        .post(gw.url("/v2/flows/orders.create?tags=kill"))
        .header("X-API-Key", KEY)
        .header("X-Idempotency-Key", "order-kill-9")
        .body(r#"{"sku":"K-9"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["x-idempotency-status"], "duplicate");
    assert_eq!(resp.json::<Value>().await.unwrap()["event_id"], event_id);
}

#[tokio::test]
async fn one_structured_log_line_per_request_and_never_the_api_key() {
    let up = Upstream::start().await;
    let dir = TempDir::new("events-logs");
    let config = write_config(&dir, &up);
    let client = common::http_client();
    let gw = Gateway::start(&["--config", &config, "--log-format", "json"]);
    let r = client
        .post(gw.url(&format!("/v2/flows/orders.create?sync=true&key={KEY}")))
        .header("X-Idempotency-Key", "log-1")
        .header("X-Correlation-Id", "corr-log-1")
        .body(r#"{"sku":"L"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let r = client
        .post(gw.url("/rpc"))
        .header("X-API-Key", KEY)
        .body(r#"{"jsonrpc":"2.0","method":"orders.create","params":{"sku":"L","idempotency_key":"log-1"},"id":"rpc-log"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    // The access-log lines are written after the responses; wait for both (bounded).
    let request_line_count =
        |lines: &[String]| lines.iter().filter(|l| l.contains(r#""message":"request""#)).count();
    for _ in 0..1000 {
        if request_line_count(&gw.stderr.lock().unwrap()) >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let lines = gw.stderr.lock().unwrap().clone();
    assert!(lines.iter().all(|l| !l.contains(KEY)), "an API key reached the logs");
    let events: Vec<Value> = lines.iter().filter_map(|l| serde_json::from_str(l).ok()).collect();
    assert_eq!(events.len(), lines.len(), "every stderr line is JSON");
    let request_lines: Vec<&Value> = events.iter().filter(|e| e["fields"]["message"] == "request").collect();
    assert_eq!(request_lines.len(), 2, "one line per request: {request_lines:?}");
    for (line, cid, status) in
        [(request_lines[0], "corr-log-1", "new"), (request_lines[1], "rpc-log", "duplicate")]
    {
        // The correlation id is on the line once: in the span of an execution when the line is
        // written inside one, else in the line's own fields (the flows door writes its access
        // line after the execution, as it does for a duplicate answered without running).
        let (in_span, in_fields) = (&line["span"]["correlation_id"], &line["fields"]["correlation_id"]);
        let found = if in_span.is_null() { in_fields } else { in_span };
        assert_eq!(found, cid, "{line}");
        assert!(in_span.is_null() || in_fields.is_null(), "the id twice: {line}");
        let fields = &line["fields"];
        assert_eq!(fields["tenant"], "acme", "{line}");
        assert_eq!(fields["method"], "orders.create");
        assert_eq!(fields["kind"], "command");
        assert_eq!(fields["idempotency_status"], status);
        assert_eq!(fields["outcome"], "ok");
        assert!(fields["duration_us"].is_u64());
    }
}
