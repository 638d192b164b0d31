//! W3C Trace Context (SPEC §7): a `traceparent`/`tracestate` sent to `/rpc`, the flows door or
//! `/mcp` (as a header, or in a tool call's `_meta`) reaches every upstream step request as the
//! parent of a span of the gateway's own, in the same trace; the trace id is on the request's
//! log lines, and the span id the upstream sees as its parent is on the step's. A malformed
//! `traceparent` is ignored. Where there are no headers (`oncerpc stdio`), and on `/rpc` when
//! none came, the trace context is read from `params._meta`, which is no part of the call's
//! fingerprint. The real binary, a real upstream on loopback.

mod common;

use std::time::Duration;

use common::process::{Gateway, TempDir};
use common::upstream::Upstream;
use serde_json::json;

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

fn traceparent() -> String {
    format!("00-{TRACE_ID}-{PARENT}-01")
}

fn config(dir: &TempDir, up: &Upstream) -> String {
    let toml = format!(
        r#"
store = {{ url = "memory://" }}
[[methods]]
name = "orders.create"
kind = "command"
steps = [{{ name = "reserve", url = "{}" }}, {{ name = "confirm", url = "{}" }}]
"#,
        up.url("reserve"),
        up.url("confirm")
    );
    let path = dir.file("oncerpc.toml");
    std::fs::write(&path, toml).unwrap();
    path.display().to_string()
}

fn gateway(dir: &TempDir, up: &Upstream) -> Gateway {
    Gateway::start(&["--config", &config(dir, up), "--log-level", "info,oncerpc_flows::flow=debug"])
}

/// The step calls made since `from`: each one's parent span id, checked to be in the trace.
fn step_parents(up: &Upstream, from: usize, state: Option<&str>) -> Vec<String> {
    let calls = up.calls();
    assert_eq!(calls.len(), from + 2, "{calls:?}");
    calls[from..]
        .iter()
        .map(|c| {
            let tp = c.traceparent.as_deref().unwrap_or_else(|| panic!("no traceparent: {c:?}"));
            let parts: Vec<&str> = tp.split('-').collect();
            assert_eq!(parts.len(), 4, "{tp}");
            assert_eq!((parts[0], parts[1], parts[3]), ("00", TRACE_ID, "01"), "{tp}");
            assert_eq!(parts[2].len(), 16);
            assert_ne!(parts[2], PARENT, "a span of the gateway's own, not the caller's");
            assert_eq!(c.tracestate.as_deref(), state);
            parts[2].to_owned()
        })
        .collect()
}

#[tokio::test]
async fn traceparent_reaches_every_upstream_step_and_the_logs() {
    let up = Upstream::start().await;
    let dir = TempDir::new("trace");
    let gw = gateway(&dir, &up);
    let http = gw.http();
    let tp = traceparent();

    // The flows door, keyed.
    let headers = [("traceparent", tp.as_str()), ("tracestate", "vendor=abc"), ("X-Idempotency-Key", "t-1")];
    let a = http.post("/v2/flows/orders.create?sync=true", json!({"sku": "A"}).to_string(), &headers).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let flows = step_parents(&up, 0, Some("vendor=abc"));
    assert_ne!(flows[0], flows[1], "one span per step request");

    // /rpc.
    let body = json!({"jsonrpc": "2.0", "method": "orders.create", "params": {"sku": "B", "idempotency_key": "t-2"}, "id": 1});
    let a = http.rpc(body.to_string(), &[("traceparent", tp.as_str())]).await;
    assert!(a.json().get("result").is_some(), "{}", a.body);
    let rpc = step_parents(&up, 2, None);

    // The MCP door, the trace in the call's _meta (stateless era: no session).
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "orders_create", "arguments": {"sku": "C"},
        "_meta": {"traceparent": tp, "io.oncerpc/idempotency-key": "t-3",
                  "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
                  "io.modelcontextprotocol/clientCapabilities": {}}}});
    let a = http
        .post(
            "/mcp",
            call.to_string(),
            &[
                ("accept", "application/json, text/event-stream"),
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-name", "orders_create"),
            ],
        )
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let mcp = step_parents(&up, 4, None);

    // An async event (the flows door's default) runs in the background within the trace too.
    let headers = [("traceparent", tp.as_str()), ("X-Idempotency-Key", "t-4")];
    let a = http.post("/v2/flows/orders.create", json!({"sku": "D"}).to_string(), &headers).await;
    assert_eq!(a.status, 200, "{}", a.body);
    for _ in 0..200 {
        if up.calls().len() >= 8 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    step_parents(&up, 6, None);

    // A malformed traceparent is ignored: no trace is made up.
    let bad = [("traceparent", "00-not-a-trace-01"), ("X-Idempotency-Key", "t-5")];
    let a = http.post("/v2/flows/orders.create?sync=true", json!({"sku": "E"}).to_string(), &bad).await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(up.calls()[8..].iter().all(|c| c.traceparent.is_none()));

    // The logs: the trace id on each traced request's access line; each span id the upstream
    // saw as its parent on the gateway's line of that step request (at debug).
    let spans: Vec<&String> = flows.iter().chain(&rpc).chain(&mcp).collect();
    let mut log = Vec::new();
    for _ in 0..200 {
        log = gw.log();
        let requests = log
            .iter()
            .filter(|l| l.contains("observe: request ") && l.contains(&format!("trace_id={TRACE_ID}")));
        if requests.count() >= 3 && spans.iter().all(|s| log.iter().any(|l| l.contains(s.as_str()))) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let requests =
        log.iter().filter(|l| l.contains("observe: request ") && l.contains(&format!("trace_id={TRACE_ID}")));
    assert_eq!(requests.count(), 3, "the three traced requests' access lines: {log:?}");
    for span in spans {
        let line = log.iter().find(|l| l.contains(span.as_str()));
        assert!(
            line.is_some_and(|l| l.contains(TRACE_ID)),
            "span {span} is not logged in its trace: {log:?}"
        );
    }
}

/// `oncerpc stdio` has no headers: the trace context comes in `params._meta`, reaches every
/// step and the access line; a retry under another trace context is the same call (`_meta` is
/// reserved: no part of the fingerprint). `/rpc` reads it there too when no header came.
/// The stateless MCP revision takes `traceparent` and the key from the POST's headers, as the
/// session era does (it dropped both: a retry keyed by a header ran twice, untraced).
#[tokio::test]
async fn a_stateless_mcp_call_takes_its_trace_and_key_from_the_headers() {
    let up = Upstream::start().await;
    let dir = TempDir::new("trace-mcp26");
    let gw = gateway(&dir, &up);
    let tp = traceparent();
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "orders_create", "arguments": {"sku": "H"},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
                  "io.modelcontextprotocol/clientCapabilities": {}}}});
    let headers = [
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "orders_create"),
        ("traceparent", tp.as_str()),
        ("tracestate", "vendor=mcp"),
        ("idempotency-key", "t-mcp26-header"),
    ];
    for _ in 0..2 {
        let a = gw.http().post("/mcp", call.to_string(), &headers).await;
        assert_eq!(a.status, 200, "{}", a.body);
    }
    step_parents(&up, 0, Some("vendor=mcp"));
}

#[tokio::test]
async fn a_trace_context_in_params_meta_is_read_over_stdio_and_on_rpc() {
    let up = Upstream::start().await;
    let dir = TempDir::new("trace-stdio");
    let path = config(&dir, &up);
    let call = |tp: &str, id: u32| {
        json!({"jsonrpc": "2.0", "id": id, "method": "orders.create",
               "params": {"sku": "F", "idempotency_key": "t-7", "_meta": {"traceparent": tp, "tracestate": "vendor=abc"}}})
        .to_string()
    };
    let other = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let input = format!("{}\n{}\n", call(&traceparent(), 1), call(other, 2));
    let out = tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_oncerpc"))
            .args(["stdio", "--config", &path, "--log-level", "info"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("oncerpc stdio");
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap();
    let answers: Vec<serde_json::Value> = out
        .stdout
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert!(answers[0]["result"].is_object(), "{answers:?}");
    assert_eq!(answers[1]["result"], answers[0]["result"], "the retry under another trace is a duplicate");
    // Both steps ran once, within the first request's trace.
    step_parents(&up, 0, Some("vendor=abc"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let access = stderr.lines().filter(|l| l.contains("observe: request ")).collect::<Vec<_>>();
    assert_eq!(access.len(), 2, "{stderr}");
    assert!(access[0].contains(&format!("trace_id={TRACE_ID}")), "{stderr}");
    assert!(access[1].contains("trace_id=0af7651916cd43dd8448eb211c80319c"), "{stderr}");

    // /rpc without a traceparent header: the one in params._meta; with a header: the header's.
    let gw = gateway(&dir, &up);
    let http = gw.http();
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "orders.create",
                      "params": {"sku": "G", "idempotency_key": "t-8", "_meta": {"traceparent": traceparent()}}});
    let a = http.rpc(body.to_string(), &[]).await;
    assert!(a.json().get("result").is_some(), "{}", a.body);
    step_parents(&up, 2, None);
    let body = json!({"jsonrpc": "2.0", "id": 4, "method": "orders.create",
                      "params": {"sku": "H", "idempotency_key": "t-9", "_meta": {"traceparent": other}}});
    let a = http.rpc(body.to_string(), &[("traceparent", traceparent().as_str())]).await;
    assert!(a.json().get("result").is_some(), "{}", a.body);
    step_parents(&up, 4, None);
}
