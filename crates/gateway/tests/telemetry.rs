//! OpenTelemetry export over OTLP (`[telemetry]`, SPEC §7) into a real trace backend: Arize
//! Phoenix (`scripts/test.sh` installs it; an OTLP/HTTP receiver and a REST API that reads the
//! spans back). A keyed flow sent with a caller's `traceparent` through the real binary to a
//! real upstream becomes one trace in the backend: the gateway's request span (its parent the
//! caller's span), the idempotency claim and each step's span, whose ids are the parent ids
//! the upstream received. A request without a `traceparent` starts a trace of its own.
//!
//! Outside CI a missing backend skips the test with a printed reason; in CI it is a failure.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::process::{Gateway, TempDir};
use common::upstream::Upstream;
use serde_json::{Value, json};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

/// Phoenix on free loopback ports, its data in a directory of its own.
struct Phoenix {
    child: Child,
    url: String,
    _dir: TempDir,
}

impl Drop for Phoenix {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

async fn phoenix() -> Option<Phoenix> {
    let Some(bin) = std::env::var_os("ONCERPC_PHOENIX") else {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(!ci, "the trace backend (arize-phoenix) is required in CI (scripts/test.sh installs it)");
        eprintln!("SKIPPED: the trace backend is not installed: run ./scripts/test.sh");
        return None;
    };
    let dir = TempDir::new("phoenix");
    let (port, grpc) = (free_port(), free_port());
    let child = Command::new(bin)
        .arg("serve")
        .env("PHOENIX_HOST", "127.0.0.1")
        .env("PHOENIX_PORT", port.to_string())
        .env("PHOENIX_GRPC_PORT", grpc.to_string())
        .env("PHOENIX_WORKING_DIR", dir.file(""))
        .env("PHOENIX_TELEMETRY_ENABLED", "false")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start phoenix");
    let phoenix = Phoenix { child, url: format!("http://127.0.0.1:{port}"), _dir: dir };
    let http = common::http_client();
    for _ in 0..600 {
        if http
            .get(format!("{}/v1/projects", phoenix.url))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return Some(phoenix);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("phoenix did not start");
}

/// The spans the backend holds for `trace_id`, once there are at least `n` (it waits for the
/// gateway's batch export).
async fn trace_spans(phoenix: &Phoenix, trace_id: &str, n: usize) -> Vec<Value> {
    let http = common::http_client();
    let mut found = Vec::new();
    for _ in 0..300 {
        let url = format!("{}/v1/projects/default/spans?limit=1000", phoenix.url);
        if let Ok(r) = http.get(url).send().await
            && let Ok(page) = r.json::<Value>().await
        {
            found = page["data"]
                .as_array()
                .map(|d| d.iter().filter(|s| s["context"]["trace_id"] == trace_id).cloned().collect())
                .unwrap_or_default();
            if found.len() >= n {
                return found;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("the backend has {} spans of trace {trace_id}, not {n}: {found:?}", found.len());
}

fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

fn span_id(span: &Value) -> &str {
    span["context"]["span_id"].as_str().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_flow_is_one_trace_in_the_backend_linked_to_the_caller_and_the_upstream() {
    let Some(phoenix) = phoenix().await else { return };
    let up = Upstream::start().await;
    let dir = TempDir::new("telemetry");
    let toml = format!(
        r#"
store = {{ url = "memory://" }}
[telemetry]
otlp_endpoint = "{endpoint}"
service_name = "oncerpc-test"
[[methods]]
name = "orders.create"
kind = "command"
steps = [{{ name = "reserve", url = "{reserve}" }}, {{ name = "confirm", url = "{confirm}" }}]
"#,
        endpoint = phoenix.url,
        reserve = up.url("reserve"),
        confirm = up.url("confirm"),
    );
    let gw = Gateway::with_config(&dir, &toml);
    let http = gw.http();

    // A keyed flow, in the caller's trace.
    let tp = format!("00-{TRACE_ID}-{PARENT}-01");
    let headers = [("traceparent", tp.as_str()), ("X-Idempotency-Key", "trace-order-1")];
    let a = http.post("/v2/flows/orders.create?sync=true", json!({"sku": "A"}).to_string(), &headers).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let calls = up.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    let upstream_parents: Vec<String> = calls
        .iter()
        .map(|c| {
            let tp = c.traceparent.as_deref().expect("each step request carries a traceparent");
            let parts: Vec<&str> = tp.split('-').collect();
            assert_eq!((parts[0], parts[1], parts[3]), ("00", TRACE_ID, "01"), "in the caller's trace: {tp}");
            parts[2].to_owned()
        })
        .collect();

    let spans = trace_spans(&phoenix, TRACE_ID, 4).await;
    let request = named(&spans, "orders.create");
    assert_eq!(request.len(), 1, "one request span: {spans:?}");
    let request = request[0];
    assert_eq!(request["parent_id"], PARENT, "a child of the caller's span: {request}");
    assert_eq!(request["attributes"]["rpc.method"], "orders.create", "{request}");
    let claim = named(&spans, "idempotency claim");
    assert_eq!(claim.len(), 1, "{spans:?}");
    assert_eq!(claim[0]["parent_id"], span_id(request), "the claim is the request's: {spans:?}");
    let mut steps: Vec<&Value> =
        spans.iter().filter(|s| s["name"].as_str().is_some_and(|n| n.starts_with("step "))).collect();
    steps.sort_by_key(|s| s["start_time"].as_str().unwrap_or("").to_owned());
    let names: Vec<&str> = steps.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["step reserve", "step confirm"], "{spans:?}");
    for (step, parent) in steps.iter().zip(&upstream_parents) {
        assert_eq!(step["parent_id"], span_id(request), "each step is the request's: {step}");
        assert_eq!(span_id(step), parent, "the upstream's parent id is the step's span: {step}");
    }

    // Without a traceparent the request starts a trace of its own, its steps within it.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "orders.create", "params": {"sku": "B", "idempotency_key": "trace-order-2"}});
    let a = http.rpc(body.to_string(), &[]).await;
    assert!(a.json().get("result").is_some(), "{}", a.body);
    let calls = up.calls();
    let own = calls[2].traceparent.as_deref().expect("a traceparent of the gateway's own trace");
    let own_trace = own.split('-').nth(1).unwrap().to_owned();
    assert_ne!(own_trace, TRACE_ID);
    let spans = trace_spans(&phoenix, &own_trace, 4).await;
    let root = named(&spans, "orders.create");
    assert_eq!(root.len(), 1, "{spans:?}");
    assert!(root[0]["parent_id"].is_null(), "the root of its trace: {}", root[0]);

    // The exported spans stay out of the log; the export is said once at start.
    let log = gw.log();
    assert!(log.iter().any(|l| l.contains("exporting spans over OTLP")), "{log:?}");
    assert!(!log.iter().any(|l| l.contains("oncerpc.request") || l.contains("idempotency claim")), "{log:?}");
}
