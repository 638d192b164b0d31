//! The MCP clients of eight agent frameworks against oncerpc (issue 45, "MCP as agents meet
//! it"), each over Streamable HTTP (`oncerpc serve`, an API-key tenant) and over stdio
//! (`oncerpc mcp --config FILE`), each through the framework's own API and the tool objects it
//! hands a model (no LLM: there is no network but the package registries):
//!
//! - Python: fastmcp's `Client`, the OpenAI Agents SDK (`agents.mcp`), Pydantic AI
//!   (`MCPToolset`, run by its own `FunctionModel`), LangChain's `langchain-mcp-adapters`;
//! - TypeScript: the AI SDK's `@ai-sdk/mcp`, Mastra's `@mastra/mcp`, LangChain's
//!   `@langchain/mcp-adapters`, the MCP inspector's CLI.
//!
//! Each client script (`tests/clients/frameworks/`) prints one summary: the tool names and
//! schemas as the framework hands them to a model (`counter_increment` lists `by`,
//! `idempotency_key` and `force_retry`; every name is one model APIs take), a keyed
//! `counter_increment` sent twice (the counter, read with `counter_get`, moves once; the retry
//! is marked a duplicate where the framework shows `_meta`) and, for most, `demo_flaky`: a
//! failure, the stored failure for the retry (whose text names `force_retry`), and a run again
//! with `force_retry: true`.
//!
//! The installs are `scripts/test.sh`'s: a venv (`ONCERPC_FRAMEWORKS_PYTHON`) and npm packages
//! with a Node ≥ 22 (`ONCERPC_FRAMEWORKS_NODE_DIR`). Outside CI a missing one skips its test
//! with a printed reason; in CI (`CI=true`) it is a failure.

mod common;

use std::process::Command;
use std::time::Duration;

use common::mcp_clients;
use common::process::{Gateway, TempDir};
use serde_json::{Value, json};

const ACME: &str = "acme-frameworks-s3cr3t-000";

/// How long one client script may run (a framework's start, a dozen calls) before it is
/// killed and the test fails.
const LIMIT: Duration = Duration::from_secs(180);

/// The demo methods and one API-key tenant on `store`.
fn config(store: &str) -> String {
    format!(
        "demo = true\n\n[store]\nurl = \"{store}\"\n\n[[tenants]]\nname = \"acme\"\napi_keys = [\"{ACME}\"]\n"
    )
}

/// What a framework shows of a call and what the test may so expect of it.
#[derive(Clone, Copy)]
struct Expect {
    /// The framework hands the caller a result's `_meta` (the idempotency status).
    meta: bool,
    /// The script calls `demo_flaky` (a failure, its stored copy, `force_retry`).
    flaky: bool,
    /// The framework hands the model a failure's text (where the stored-outcome hint is).
    hint: bool,
    /// Every call is a process of its own (the inspector's CLI over stdio): the demo counter
    /// `counter_get` reads is that process's, so only the answers can show the retry.
    process_per_call: bool,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Transport {
    Http,
    Stdio,
}

/// Run one client script against a fresh gateway over `transport`; its summary.
async fn drive(mut client: Command, transport: Transport, tag: &str, by: i64, flaky: bool) -> Value {
    let dir = TempDir::new(&format!("mcp-frameworks-{tag}"));
    let key = format!("{tag}-{by}");
    let mode = if flaky { "flaky" } else { "-" };
    let by_arg = by.to_string();
    // The gateway lives until the client is done.
    let _gateway = match transport {
        Transport::Http => {
            let gw = Gateway::with_config(&dir, &config("memory://"));
            client.args(["http", &gw.url("/mcp"), ACME, &key, &by_arg, mode]);
            Some(gw)
        }
        Transport::Stdio => {
            // A durable store: a framework may start `oncerpc mcp` more than once (the
            // inspector's CLI does, once a call), and a retry must find the first outcome.
            let db = dir.file("oncerpc.db");
            let file = dir.file("stdio.toml");
            std::fs::write(&file, config(&format!("sqlite://{}", db.display()))).unwrap();
            let (bin, file) = (env!("CARGO_BIN_EXE_oncerpc"), file.display().to_string());
            client.args(["stdio", bin, &file, &key, &by_arg, mode]);
            None
        }
    };
    client.env("HOME", &dir.0);
    mcp_clients::summary_within(client, LIMIT).await
}

/// A Python framework's client script under the frameworks' venv; `None`: a skip.
fn python(script: &str, module: &str) -> Option<Command> {
    let python = mcp_clients::frameworks_python(module)?;
    let mut cmd = Command::new(python);
    cmd.arg(mcp_clients::client_script(&format!("frameworks/{script}")));
    Some(cmd)
}

/// A TypeScript framework's client script under the frameworks' Node; `None`: a skip.
fn node(script: &str, package: &str) -> Option<Command> {
    let dir = mcp_clients::frameworks_node_dir(package)?;
    let mut cmd = Command::new(dir.join("node_modules/.bin/node"));
    cmd.arg(mcp_clients::client_script(&format!("frameworks/{script}")))
        .env("NODE_PATH", dir.join("node_modules"));
    Some(cmd)
}

/// Both transports, one after the other, each checked against `expect`; the summaries.
async fn both(make: impl Fn() -> Option<Command>, tag: &str, expect: Expect) -> Vec<Value> {
    let mut seen = Vec::new();
    for (transport, by) in [(Transport::Http, 7), (Transport::Stdio, 5)] {
        let Some(client) = make() else { return seen };
        let summary = drive(client, transport, tag, by, expect.flaky).await;
        let what = format!("{tag} over {transport:?}");
        check(&summary, by, expect, transport, &what);
        seen.push(summary);
    }
    seen
}

fn model_name_ok(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The total of a `counter_*` answer: its structured content, or its text's JSON.
fn total(call: &Value, what: &str) -> i64 {
    let from_text = call["text"].as_str().and_then(|t| serde_json::from_str::<Value>(t).ok());
    call["structured"]["total"]
        .as_i64()
        .or_else(|| from_text.and_then(|v| v["total"].as_i64()))
        .unwrap_or_else(|| panic!("{what}: no total in {call}"))
}

/// What every framework must have seen.
fn check(seen: &Value, by: i64, expect: Expect, transport: Transport, what: &str) {
    assert!(seen["version"].as_str().is_some_and(|v| !v.is_empty()), "{what}: {seen}");
    // 1. The tools as the framework hands them to a model.
    let names = seen.get("model_names").unwrap_or(&seen["names"]);
    let names: Vec<&str> = names
        .as_array()
        .unwrap_or_else(|| panic!("{what}: {seen}"))
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(names.len() >= 8, "{what}: every demo method is a tool: {names:?}");
    for name in &names {
        assert!(model_name_ok(name), "{what}: tool name {name:?} is not ^[a-zA-Z0-9_-]{{1,64}}$");
    }
    for tool in ["counter_increment", "counter_get", "demo_flaky", "sum"] {
        assert!(seen["names"].as_array().unwrap().contains(&json!(tool)), "{what}: no {tool}: {names:?}");
    }
    let schema = &seen["increment_schema"];
    assert_eq!(schema["type"], "object", "{what}: {schema}");
    assert_eq!(schema["properties"]["by"]["type"], "integer", "{what}: {schema}");
    assert_eq!(schema["properties"]["idempotency_key"]["type"], "string", "{what}: {schema}");
    assert_eq!(schema["properties"]["force_retry"]["type"], "boolean", "{what}: {schema}");
    let flaky = &seen["flaky_schema"];
    assert_eq!(flaky["properties"]["fail_times"]["type"], "integer", "{what}: {flaky}");
    assert!(
        flaky["required"].as_array().is_some_and(|r| r.contains(&json!("fail_times"))),
        "{what}: {flaky}"
    );

    // 2. A keyed call and its retry: one run.
    let (first, again) = (&seen["first"], &seen["again"]);
    assert_eq!(first["is_error"], false, "{what}: {first}");
    assert_eq!(again["is_error"], false, "{what}: {again}");
    assert_eq!(total(again, what), total(first, what), "{what}: the retry answers the first outcome");
    if expect.process_per_call && transport == Transport::Stdio {
        assert_eq!(total(first, what), by, "{what}: a fresh process's counter, moved by {by}");
    } else {
        let (before, after) = (total(&seen["before"], what), total(&seen["after"], what));
        assert_eq!(total(first, what), before + by, "{what}: {first}");
        assert_eq!(after - before, by, "{what}: the counter moved by {by} once for two calls: {seen}");
    }
    if expect.meta {
        assert_eq!(first["status"], "new", "{what}: {first}");
        assert_eq!(again["status"], "duplicate", "{what}: {again}");
    } else {
        assert_eq!(again["meta_seen"], false, "{what}: this framework shows no _meta: {again}");
    }

    // 3. A failure, its stored copy for the retry (saying how to run it again), force_retry.
    if expect.flaky {
        let f = &seen["flaky"];
        let (failed, stored, forced) = (&f["first"], &f["again"], &f["forced"]);
        assert_eq!(failed["is_error"], true, "{what}: {failed}");
        let told = failed["text"].as_str().unwrap_or_default();
        assert!(!told.contains("stored outcome"), "{what}: the first failure is not a stored one: {told}");
        assert_eq!(stored["is_error"], true, "{what}: {stored}");
        let told = stored["text"].as_str().unwrap_or_default();
        if expect.hint {
            assert!(told.contains("This is the stored outcome of an earlier attempt"), "{what}: {told}");
            assert!(
                told.contains("force_retry: true"),
                "{what}: the model is told how to run it again: {told}"
            );
        } else {
            // The stored error itself, as the model gets it: the first run's (attempt 1).
            assert!(told.contains("-32006") && told.contains(r#"\"attempt\":1"#), "{what}: {told}");
        }
        if expect.meta && stored["meta_seen"] == true {
            assert_eq!(stored["status"], "duplicate", "{what}: {stored}");
        }
        if expect.process_per_call && transport == Transport::Stdio {
            // A fresh process counts `demo_flaky`'s runs from 0: run again, it fails its first.
            assert_eq!(forced["is_error"], true, "{what}: {forced}");
            assert!(
                !forced["text"].as_str().unwrap_or_default().contains("stored outcome"),
                "{what}: {forced}"
            );
            assert_eq!(forced["structured"]["data"]["attempt"], 1, "{what}: it ran again: {forced}");
            return;
        }
        assert_eq!(forced["is_error"], false, "{what}: force_retry runs it again: {forced}");
        let ran = if forced["structured"].is_object() {
            forced["structured"].clone()
        } else {
            serde_json::from_str(forced["text"].as_str().unwrap_or("null")).unwrap_or(Value::Null)
        };
        assert_eq!(ran, json!({"attempt": 2, "ok": true}), "{what}: its second run: {forced}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fastmcp_client_lists_calls_retries_and_force_retries_over_http_and_stdio() {
    let expect = Expect { meta: true, flaky: true, hint: true, process_per_call: false };
    both(|| python("fastmcp_client.py", "fastmcp"), "fastmcp", expect).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_agents_function_tools_keep_their_schemas_strict_and_retry_once_over_http_and_stdio() {
    let expect = Expect { meta: true, flaky: true, hint: true, process_per_call: false };
    for seen in both(|| python("openai_agents_client.py", "agents"), "openai-agents", expect).await {
        // Strict mode (what the Responses API is sent): every tool with arguments converted,
        // `by` kept. (A tool without any, `{"type": "object", "properties": {}}`, is one the SDK
        // will not make strict, an open object: it is sent non-strict, which model APIs take.)
        let strict = seen["strict"].as_object().unwrap_or_else(|| panic!("{seen}"));
        for tool in ["counter_increment", "demo_flaky", "demo_sleep", "sum", "subtract", "add"] {
            assert_eq!(strict[tool], true, "{tool}'s schema converts to strict: {strict:?}");
        }
        let schema = &seen["increment_schema"];
        assert_eq!(schema["additionalProperties"], false, "{schema}");
        assert!(schema["required"].as_array().unwrap().contains(&json!("by")), "{schema}");
        let ensured = &seen["ensure_strict"];
        assert_eq!(ensured["properties"]["by"]["type"], "integer", "{ensured}");
        assert_eq!(ensured["additionalProperties"], false, "{ensured}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pydantic_ai_agent_run_by_its_function_model_calls_tools_once_over_http_and_stdio() {
    // Pydantic AI calls a tool as an MCP task when the server offers tasks, and hands the model
    // the task's result (its structuredContent, not its text): a duplicate key joins the same
    // task, whose result is the stored failure as it was first answered, without the replay's
    // hint (docs/MCP.md, "Tested with").
    let expect = Expect { meta: false, flaky: true, hint: false, process_per_call: false };
    both(|| python("pydantic_ai_client.py", "pydantic_ai.mcp"), "pydantic-ai", expect).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn langchain_mcp_adapters_tools_are_invoked_once_per_key_over_http_and_stdio() {
    let expect = Expect { meta: false, flaky: true, hint: true, process_per_call: false };
    both(|| python("langchain_client.py", "langchain_mcp_adapters"), "langchain-py", expect).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ai_sdk_tools_execute_once_per_key_and_force_retry_over_http_and_stdio() {
    let expect = Expect { meta: true, flaky: true, hint: true, process_per_call: false };
    both(|| node("ai_sdk_client.mjs", "@ai-sdk/mcp"), "ai-sdk", expect).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mastra_tools_execute_once_per_key_over_http_and_stdio() {
    let expect = Expect { meta: true, flaky: true, hint: true, process_per_call: false };
    both(|| node("mastra_client.mjs", "@mastra/mcp"), "mastra", expect).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn langchain_js_tools_are_invoked_once_per_key_over_http_and_stdio() {
    let expect = Expect { meta: true, flaky: true, hint: true, process_per_call: false };
    both(|| node("langchain_client.mjs", "@langchain/mcp-adapters"), "langchain-js", expect).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inspector_cli_lists_portable_schemas_and_calls_once_per_key_over_http_and_stdio() {
    let expect = Expect { meta: true, flaky: true, hint: true, process_per_call: true };
    for seen in
        both(|| node("inspector_client.mjs", "@modelcontextprotocol/inspector"), "inspector", expect).await
    {
        let strict = &seen["strict"];
        assert_eq!(strict["exit"], 0, "--strict finds no portability error: {strict}");
    }
}
