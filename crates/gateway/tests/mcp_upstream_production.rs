//! Re-exported MCP upstream tools in `mode = "production"` (issue 45, item 3): a command
//! without a key is refused there, so its schema says `idempotency_key` is required — as the
//! registry's own commands' schemas do — except for a tool that derives its key from the call;
//! a query (`readOnlyHint`) has no key at all. The upstream is the official Python SDK's
//! server (`tests/clients/mcp_upstream_server.py`) over stdio, started by oncerpc.
//!
//! Outside CI a missing Python SDK skips the test with a printed reason; in CI it is a failure.

mod common;

use common::mcp_clients;
use common::mcp_upstream::{Executions, wait_up};
use common::process::{Gateway, TempDir};
use serde_json::{Value, json};

const KEY: &str = "acme-production-s3cr3t-0123";

fn tool<'a>(tools: &'a [Value], name: &str) -> &'a Value {
    tools.iter().find(|t| t["name"] == name).unwrap_or_else(|| panic!("no tool {name}: {tools:#?}"))
}

fn required(tool: &Value) -> Vec<&str> {
    tool["inputSchema"]["required"]
        .as_array()
        .map_or(Vec::new(), |r| r.iter().filter_map(Value::as_str).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_production_a_reexported_commands_key_is_required_unless_derived() {
    let Some(python) = mcp_clients::python_sdk() else { return };
    let dir = TempDir::new("mcp-upstream-production");
    let log = Executions(dir.file("executions.jsonl"));
    let config = format!(
        r#"mode = "production"

[store]
url = "sqlite://{db}"

[[tenants]]
name = "acme"
api_keys = ["{KEY}"]

[[mcp.upstreams]]
name = "pay"
command = "{python}"
args = ["{script}", "{log}", "stdio"]
tools = ["charge", "keyed_charge", "balance"]

  [[mcp.upstreams.tool]]
  name = "keyed_charge"
  derive_key = {{ from = "arguments", window_secs = 600 }}
"#,
        db = dir.file("once.db").display(),
        script = mcp_clients::client_script("mcp_upstream_server.py").display(),
        log = log.0.display(),
    );
    let gw = Gateway::with_config(&dir, &config);
    let http = gw.http();
    wait_up(&http, "pay").await;
    let auth = format!("Bearer {KEY}");
    let headers = [("Authorization", auth.as_str())];
    let meta = common::mcp2026::meta();
    let list = json!({"jsonrpc":"2.0","id":0,"method":"tools/list","params":{"_meta":meta}});
    let answer = common::mcp2026::post(&http, &list, &headers).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let tools = answer.json()["result"]["tools"].as_array().cloned().unwrap_or_default();
    common::tool_schemas::assert_model_ready(&tools);

    let charge = required(tool(&tools, "charge"));
    assert!(charge.contains(&"idempotency_key"), "a command's key is required: {charge:?}");
    assert!(
        charge.contains(&"amount") && charge.contains(&"card"),
        "its own required arguments stay: {charge:?}"
    );
    let derived = required(tool(&tools, "keyed_charge"));
    assert!(!derived.contains(&"idempotency_key"), "a derived key is not asked for: {derived:?}");
    let balance = tool(&tools, "balance");
    assert!(
        balance["inputSchema"]["properties"].get("idempotency_key").is_none(),
        "a query has no key: {balance}"
    );

    // What the schema says is what the door does: a keyless command is refused, nothing runs.
    let call = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge",
        "arguments":{"amount":5,"card":"4242"},"_meta":meta}});
    let refused = common::mcp2026::post(&http, &call, &headers).await.json();
    assert_eq!(refused["result"]["isError"], true, "{refused}");
    assert_eq!(refused["result"]["structuredContent"]["code"], -32602, "{refused}");
    assert!(log.lines().iter().all(|l| l["tool"] != "charge"), "nothing ran: {:?}", log.lines());
}
