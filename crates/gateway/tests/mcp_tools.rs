//! The MCP door's tools as a model meets them (issue 45, items 1 and 2): every listed tool —
//! in both protocol eras, over HTTP and over stdio — has a name model APIs accept
//! (`counter.increment` → `counter_increment`, its method in `title` and `_meta`) and an
//! `inputSchema` that lists every argument, is a JSON Schema 2020-12 and is in the subset
//! model APIs take ([`common::tool_schemas`]). The official Python SDK client calls
//! `counter_increment` with `by` and the counter moves by it. `[mcp] tool_names = "method"`
//! keeps the methods' own names; two methods with one tool name are a config error.
//!
//! Outside CI a missing Python SDK skips its test with a printed reason; in CI (`CI=true`,
//! where `scripts/test.sh` installs it) it is a failure.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use common::mcp_clients;
use common::process::{Gateway, Http, TempDir};
use common::tool_schemas::assert_model_ready;
use common::upstream::Upstream;
use serde_json::{Value, json};

const ACME: &str = "acme-tools-s3cr3t-000";

/// The demo methods, one tenant, and flows whose names and schemas a model meets: a dotted
/// name, nullable params, params with a property of their own.
fn config(up: &Upstream, extra: &str) -> String {
    format!(
        r#"
demo = true
{extra}

[store]
url = "memory://"

[[tenants]]
name = "acme"
api_keys = ["{ACME}"]

[[methods]]
name = "orders.create"
kind = "command"
description = "Create an order"
params_schema = {{ type = "object", required = ["sku"], properties = {{ sku = {{ type = "string" }} }} }}
  [[methods.steps]]
  name = "charge"
  url = "{charge}"

[[methods]]
name = "billing.refund-v2"
kind = "command"
title = "Refund a payment"
params_schema = {{ type = ["object", "null"], properties = {{ amount = {{ type = "integer" }} }} }}
  [[methods.steps]]
  name = "refund"
  url = "{charge}"
"#,
        charge = up.url("charge"),
    )
}

/// `_meta` of a `2026-07-28` request.
fn stateless_meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": { "name": "t", "version": "1" },
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

/// POST one MCP message to `/mcp` as ACME (a session's id, or the stateless headers).
async fn post(h: &Http, session: Option<&str>, body: &Value) -> Value {
    let bearer = format!("Bearer {ACME}");
    let mut headers = vec![
        ("Authorization", bearer),
        ("Content-Type", "application/json".into()),
        ("Accept", "application/json, text/event-stream".into()),
    ];
    match session {
        Some(id) => headers.push(("Mcp-Session-Id", id.to_owned())),
        None if body["params"]["_meta"].is_object() => {
            headers.push(("MCP-Protocol-Version", "2026-07-28".into()));
            headers.push(("Mcp-Method", body["method"].as_str().unwrap().to_owned()));
            if let Some(n) = body["params"]["name"].as_str() {
                headers.push(("Mcp-Name", n.to_owned()));
            }
        }
        None => {}
    }
    let all: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let a = h.post("/mcp", body.to_string(), &all).await;
    assert_eq!(a.status, 200, "{body}: {}", a.body);
    a.json()
}

fn initialize(version: &str) -> Value {
    json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":version,
        "capabilities":{},"clientInfo":{"name":"t","version":"1"}}})
}

/// Every tool a `tools/list` lists, page after page, `ask` answering each request.
async fn list_all<F, Fut>(stateless: bool, mut ask: F) -> Vec<Value>
where
    F: FnMut(Value) -> Fut,
    Fut: std::future::Future<Output = Value>,
{
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut params = json!({});
        if let Some(c) = &cursor {
            params["cursor"] = json!(c);
        }
        if stateless {
            params["_meta"] = stateless_meta();
        }
        let page = ask(json!({"jsonrpc":"2.0","id":1,"method":"tools/list","params":params})).await;
        let result = &page["result"];
        tools.extend(result["tools"].as_array().unwrap_or_else(|| panic!("tools: {page}")).iter().cloned());
        match result["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return tools,
        }
    }
}

fn tool<'a>(tools: &'a [Value], name: &str) -> &'a Value {
    tools.iter().find(|t| t["name"] == name).unwrap_or_else(|| panic!("no tool {name}: {tools:?}"))
}

/// What every era and transport must list: model-safe names, each method's own name kept,
/// every argument.
fn assert_tools(tools: &[Value]) {
    assert_model_ready(tools);
    let increment = tool(tools, "counter_increment");
    assert_eq!(increment["title"], "counter.increment");
    assert_eq!(increment["_meta"]["io.oncerpc/method"], "counter.increment");
    let props = &increment["inputSchema"]["properties"];
    assert_eq!(props["by"]["type"], "integer", "{increment}");
    assert!(props["idempotency_key"].is_object() && props["force_retry"].is_object(), "{increment}");
    assert!(increment["inputSchema"].get("required").is_none(), "params are optional: {increment}");
    let flaky = &tool(tools, "demo_flaky")["inputSchema"];
    assert_eq!(flaky["required"], json!(["fail_times"]), "{flaky}");
    assert_eq!(flaky["properties"]["fail_times"]["type"], "integer");
    assert_eq!(tool(tools, "demo_sleep")["inputSchema"]["required"], json!(["ms"]));
    let sum = &tool(tools, "sum")["inputSchema"];
    assert_eq!(sum["required"], json!(["values"]), "{sum}");
    assert_eq!(sum["properties"]["values"]["items"]["type"], "number", "{sum}");
    let subtract = &tool(tools, "subtract")["inputSchema"];
    assert_eq!(subtract["required"], json!(["minuend", "subtrahend"]), "{subtract}");
    let refund = tool(tools, "billing_refund-v2");
    assert_eq!(refund["title"], "Refund a payment", "a title of its own stays");
    assert_eq!(refund["_meta"]["io.oncerpc/method"], "billing.refund-v2");
    assert_eq!(refund["inputSchema"]["properties"]["amount"]["type"], "integer", "{refund}");
    let add = tool(tools, "add");
    assert!(add.get("title").is_none(), "a method whose name is its tool's: {add}");
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert!(!names.iter().any(|n| n.contains('.')), "{names:?}");
}

/// Names and schemas without what an era adds (`execution` in `2025-11-25`).
fn comparable(tools: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = tools
        .iter()
        .map(|t| {
            let mut t = t.clone();
            t.as_object_mut().unwrap().remove("execution");
            t
        })
        .collect();
    out.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    out
}

/// One `oncerpc mcp` child: write a message, read its answer line.
struct Stdio1 {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Stdio1 {
    fn start(config: &str) -> Stdio1 {
        let mut child = Command::new(env!("CARGO_BIN_EXE_oncerpc"))
            .args(["mcp", "--config", config])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("oncerpc mcp starts");
        let out = BufReader::new(child.stdout.take().unwrap());
        Stdio1 { child, out }
    }

    fn ask(&mut self, msg: &Value) -> Value {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
        let mut line = String::new();
        self.out.read_line(&mut line).expect("an answer line");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
    }
}

impl Drop for Stdio1 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_listed_tool_is_one_a_model_api_takes_in_both_eras_over_http_and_stdio() {
    let up = Upstream::start().await;
    let dir = TempDir::new("mcp-tools-list");
    let toml = config(&up, "");
    let gw = Gateway::with_config(&dir, &toml);
    let h = gw.http();
    let mut seen = Vec::new();
    for version in ["2025-11-25", "2025-06-18"] {
        let bearer = format!("Bearer {ACME}");
        let opened = h
            .post(
                "/mcp",
                initialize(version).to_string(),
                &[
                    ("Authorization", &bearer),
                    ("Content-Type", "application/json"),
                    ("Accept", "application/json, text/event-stream"),
                ],
            )
            .await;
        let session = opened.header("mcp-session-id").expect("a session").to_owned();
        let tools = list_all(false, |m| {
            let (h, s) = (h.clone(), session.clone());
            async move { post(&h, Some(&s), &m).await }
        })
        .await;
        assert_tools(&tools);
        if version == "2025-11-25" {
            assert_eq!(tool(&tools, "counter_increment")["execution"]["taskSupport"], "optional");
        }
        seen.push(comparable(&tools));
    }
    let stateless = list_all(true, |m| {
        let h = h.clone();
        async move { post(&h, None, &m).await }
    })
    .await;
    assert_tools(&stateless);
    seen.push(comparable(&stateless));

    let file = dir.file("stdio.toml");
    std::fs::write(&file, &toml).unwrap();
    let mut stdio = Stdio1::start(&file.display().to_string());
    let init = stdio.ask(&initialize("2025-11-25"));
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    let session = list_all(false, |m| std::future::ready(stdio.ask(&m))).await;
    assert_tools(&session);
    seen.push(comparable(&session));
    let mut stdio = Stdio1::start(&file.display().to_string());
    let stateless = list_all(true, |m| std::future::ready(stdio.ask(&m))).await;
    assert_tools(&stateless);
    seen.push(comparable(&stateless));
    for other in &seen[1..] {
        assert_eq!(other, &seen[0], "one list of tools in every era, over HTTP and stdio");
    }
}

/// `tools/call` by the model-safe name; positional params as one array argument; a wrong
/// argument is an error result a model can read; the method's own name still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_are_called_by_their_names_with_the_arguments_their_schemas_list() {
    let up = Upstream::start().await;
    let dir = TempDir::new("mcp-tools-call");
    let gw = Gateway::with_config(&dir, &config(&up, ""));
    let h = gw.http();
    let call = |name: &str, arguments: Value| {
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call",
            "params":{"name":name,"arguments":arguments,"_meta":stateless_meta()}})
    };
    let result = |v: Value| v["result"].clone();
    let sum = result(post(&h, None, &call("sum", json!({"values": [1, 2, 4]}))).await);
    assert_eq!(sum["structuredContent"], json!({"result": 7}), "{sum}");
    let subtract = result(post(&h, None, &call("subtract", json!({"minuend": 7, "subtrahend": 2}))).await);
    assert_eq!(subtract["structuredContent"], json!({"result": 5}), "{subtract}");
    let wrong = result(post(&h, None, &call("sum", json!({"numbers": [1]}))).await);
    assert_eq!(wrong["isError"], true, "{wrong}");
    let told = wrong["content"][0]["text"].as_str().unwrap();
    assert!(told.contains("numbers is not an argument of this tool: it takes values (an array)"), "{told}");
    let missing = result(post(&h, None, &call("demo_flaky", json!({"idempotency_key": "flaky-1"}))).await);
    assert_eq!(missing["isError"], true, "{missing}");
    assert!(missing["content"][0]["text"].as_str().unwrap().contains("fail_times"), "{missing}");
    let by_name = |name: &str, key: &str| call(name, json!({"by": 3, "idempotency_key": key}));
    let safe = result(post(&h, None, &by_name("counter_increment", "inc-1")).await);
    assert_eq!(safe["structuredContent"], json!({"total": 3}), "{safe}");
    let dotted = result(post(&h, None, &by_name("counter.increment", "inc-1")).await);
    assert_eq!(
        dotted["_meta"]["io.oncerpc/idempotency-status"], "duplicate",
        "one method, one key: {dotted}"
    );
    let flow =
        result(post(&h, None, &call("orders_create", json!({"sku": "A-1", "idempotency_key": "o-1"}))).await);
    assert_eq!(flow["isError"], false, "{flow}");
    assert_eq!(up.count("charge"), 1);
    // As a task (the tasks extension): the same names.
    let mut task = by_name("counter_increment", "inc-task");
    task["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] =
        json!({"extensions": {"io.modelcontextprotocol/tasks": {}}});
    let created = post(&h, None, &task).await;
    assert_eq!(created["result"]["resultType"], "task", "{created}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_calls_counter_increment_with_by_over_http_and_the_counter_moves_by_it() {
    let up = Upstream::start().await;
    let dir = TempDir::new("mcp-tools-python-http");
    let gw = Gateway::with_config(&dir, &config(&up, ""));
    let url = gw.url("/mcp");
    let Some(client) = mcp_clients::python_script("mcp_tools_client.py", &["http", &url, ACME, "by-7", "7"])
    else {
        return;
    };
    assert_moved_by_7(&mcp_clients::summary(client).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_calls_counter_increment_with_by_over_stdio_and_the_counter_moves_by_it() {
    let up = Upstream::start().await;
    let dir = TempDir::new("mcp-tools-python-stdio");
    let file = dir.file("stdio.toml");
    std::fs::write(&file, config(&up, "")).unwrap();
    let bin = env!("CARGO_BIN_EXE_oncerpc");
    let args = ["stdio", bin, &file.display().to_string(), "by-7", "7"].map(str::to_owned);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let Some(client) = mcp_clients::python_script("mcp_tools_client.py", &args) else { return };
    assert_moved_by_7(&mcp_clients::summary(client).await);
}

/// What the Python SDK saw: the tools as it parsed them, model-ready; the counter moved by 7.
fn assert_moved_by_7(seen: &Value) {
    let tools = seen["tools"].as_array().unwrap_or_else(|| panic!("{seen}"));
    assert_tools(tools);
    let total = |v: &Value| v["structured"]["total"].as_i64().unwrap_or_else(|| panic!("{seen}"));
    assert_eq!(seen["increment"]["status"], "new", "{seen}");
    assert_eq!(total(&seen["after"]) - total(&seen["before"]), 7, "{seen}");
    assert_eq!(total(&seen["increment"]), total(&seen["after"]));
    assert_eq!(seen["sum"]["structured"], json!({"result": 7}), "{seen}");
    assert_eq!(seen["dotted"]["is_error"], false, "the method's own name, for one release: {seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_names_method_keeps_the_methods_own_names() {
    let up = Upstream::start().await;
    let dir = TempDir::new("mcp-tools-method");
    let gw = Gateway::with_config(&dir, &config(&up, "[mcp]\ntool_names = \"method\""));
    let h = gw.http();
    let tools = list_all(true, |m| {
        let h = h.clone();
        async move { post(&h, None, &m).await }
    })
    .await;
    let increment = tool(&tools, "counter.increment");
    assert!(increment.get("title").is_none(), "{increment}");
    assert_eq!(increment["_meta"]["io.oncerpc/method"], "counter.increment");
    assert!(!tools.iter().any(|t| t["name"] == "counter_increment"));
    let call = json!({"jsonrpc":"2.0","id":2,"method":"tools/call",
        "params":{"name":"counter_increment","arguments":{},"_meta":stateless_meta()}});
    let unknown = post(&h, None, &call).await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
}

/// `oncerpc <args>`: its exit code and stderr.
fn oncerpc(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_oncerpc")).args(args).output().expect("oncerpc runs");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn two_methods_of_one_tool_name_or_a_name_too_long_are_a_config_error_naming_them() {
    let dir = TempDir::new("mcp-tools-clash");
    let flow = |name: &str| {
        format!(
            "[[methods]]\nname = \"{name}\"\nkind = \"query\"\n  [[methods.steps]]\n  name = \"s\"\n  url = \"http://127.0.0.1:9/s\"\n"
        )
    };
    let long = format!("reports.{}", "x".repeat(60));
    for (what, toml, names) in [
        (
            "clash",
            format!("demo = false\n{}{}", flow("orders.create"), flow("orders_create")),
            vec!["\"orders.create\"", "\"orders_create\""],
        ),
        (
            "clash with a demo method",
            format!("demo = true\n{}", flow("counter_get")),
            vec!["\"counter.get\"", "\"counter_get\""],
        ),
        ("too long", format!("demo = false\n{}", flow(&long)), vec![&*long, "68 characters"]),
    ] {
        let file = dir.file("clash.toml");
        std::fs::write(&file, &toml).unwrap();
        let path = file.display().to_string();
        for args in [vec!["check-config", &path], vec!["serve", "--listen", "127.0.0.1:0", "--config", &path]]
        {
            let (code, stderr) = oncerpc(&args);
            assert_eq!(code, Some(2), "{what}, {args:?}: {stderr}");
            assert!(stderr.contains("mcp.tool_names"), "{what}: {stderr}");
            for n in &names {
                assert!(stderr.contains(n), "{what}: names {n}: {stderr}");
            }
        }
        std::fs::write(&file, format!("{toml}\n[mcp]\ntool_names = \"method\"\n")).unwrap();
        let (code, stderr) = oncerpc(&["check-config", &path]);
        assert_eq!(code, Some(0), "{what}: methods' own names do not clash: {stderr}");
    }
}

/// The check above is not vacuous: it refuses what model APIs refuse.
#[test]
fn the_model_check_refuses_what_model_apis_refuse() {
    use common::tool_schemas::model_refusal;
    let ok =
        json!({"name": "a_b", "inputSchema": {"type": "object", "properties": {"x.y": {"type": "string"}}}});
    assert_eq!(model_refusal(&ok), None);
    for bad in [
        json!({"name": "a.b", "inputSchema": {"type": "object", "properties": {}}}),
        json!({"name": "a", "inputSchema": {"type": "object"}}),
        json!({"name": "a", "inputSchema": {"type": ["object", "null"], "properties": {}}}),
        json!({"name": "a", "inputSchema": {"type": "object", "properties": {}, "anyOf": [{}]}}),
        json!({"name": "a", "inputSchema": {"type": "object", "properties": {"a b": {}}}}),
        json!({"name": "a", "inputSchema": {"type": "object", "properties": {}, "required": "x"}}),
    ] {
        assert!(model_refusal(&bad).is_some(), "{bad}");
    }
}
