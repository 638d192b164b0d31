//! MCP tasks (`2026-07-28`, `io.modelcontextprotocol/tasks`) on the event store, against the
//! real binary: a task-augmented `tools/call` of a three-step flow is an event, polled with
//! `tasks/get` to its inlined result; the same call with the same key is the same task and
//! runs nothing again; a `kill -9` mid-flow and a restart resume it from the step journal;
//! on two replicas sharing Redis or PostgreSQL a task started on one is read and cancelled on
//! the other; another tenant's task is unknown; bad input is refused and runs nothing.
//! The same proofs run with the official SDK v2 client and its tasks extension
//! (`@modelcontextprotocol/client` with `@modelcontextprotocol/ext-tasks`) as the client.

mod common;

use std::time::Duration;

use common::mcp_clients;
use common::process::{Gateway, TempDir, unique};
use common::tasks::{self, KEY_A, KEY_B, STEPS, wait_for};
use common::upstream::Upstream;
use serde_json::{Value, json};

const EXT: &str = "io.modelcontextprotocol/tasks";

fn config(dir: &TempDir, store_url: &str, up: &Upstream, method: &str) -> String {
    tasks::config(dir, store_url, up, method, true)
}

fn meta(tasks: bool) -> Value {
    let caps = if tasks { json!({ "extensions": { EXT: {} } }) } else { json!({}) };
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
    })
}

/// POST one 2026-07-28 request (with its mirrored headers) as `api_key`; the HTTP status and
/// the JSON-RPC answer.
async fn rpc(gw: &Gateway, api_key: &str, method: &str, mut params: Value, tasks: bool) -> (u16, Value) {
    params["_meta"] = meta(tasks);
    let mut req = common::http_client()
        .post(gw.url("/mcp"))
        .bearer_auth(api_key)
        .header("MCP-Protocol-Version", "2026-07-28")
        .header("Mcp-Method", method)
        .header("Accept", "application/json, text/event-stream");
    let name = params.get("name").or_else(|| params.get("taskId")).and_then(Value::as_str);
    if let Some(name) = name {
        req = req.header("Mcp-Name", name);
    }
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
    let resp = req.json(&body).send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}")))
}

fn call(tool: &str, key: &str) -> Value {
    json!({ "name": tool, "arguments": { "sku": "A-1", "idempotency_key": key } })
}

/// `tasks/get` until the task is no longer working.
async fn settled(gw: &Gateway, api_key: &str, task: &str) -> Value {
    let mut last = Value::Null;
    for _ in 0..300 {
        let (_, answer) = rpc(gw, api_key, "tasks/get", json!({ "taskId": task }), true).await;
        last = answer["result"].clone();
        if last["status"] != "working" {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the task did not settle: {last}");
}

/// `tests/clients/mcp_ext_tasks_client.mjs MODE` (the SDK v2 client with ext-tasks) against
/// `gw` as `api_key`: its summary; `None` when the client is not installed (outside CI).
async fn ext_tasks(gw: &Gateway, api_key: &str, mode: &str, args: &[&str]) -> Option<Value> {
    let url = gw.url("/mcp");
    let argv: Vec<&str> = [mode, url.as_str(), api_key].into_iter().chain(args.iter().copied()).collect();
    Some(mcp_clients::summary(mcp_clients::typescript_2026_script("mcp_ext_tasks_client.mjs", &argv)?).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_runs_once_per_key_and_is_polled_to_its_inlined_result() {
    let up = Upstream::start().await;
    up.set_delay(300, &["pack"]);
    let dir = TempDir::new("mcp-tasks");
    let method = unique("ship").replace('-', "_");
    let gw = Gateway::start(&["--config", &config(&dir, "memory://", &up, &method)]);

    let (status, created) = rpc(&gw, KEY_A, "tools/call", call(&method, "order-1"), true).await;
    assert_eq!(status, 200);
    let task = &created["result"];
    assert_eq!(task["resultType"], "task", "{created}");
    let id = task["taskId"].as_str().unwrap().to_owned();
    assert!(id.starts_with("evt_"), "the task is the event: {id}");
    assert_eq!(task["status"], "working");
    assert!(task["ttlMs"].as_u64().unwrap() > 0 && task["pollIntervalMs"].as_u64().unwrap() > 0);
    assert!(task["createdAt"].as_str().unwrap().ends_with('Z'));
    assert!(task.get("result").is_none() && task.get("ttl").is_none());

    // The same call with the same key while it runs: the same task, nothing started.
    let (_, again) = rpc(&gw, KEY_A, "tools/call", call(&method, "order-1"), true).await;
    assert_eq!(again["result"]["taskId"], id.as_str());

    let done = settled(&gw, KEY_A, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["resultType"], "complete");
    let result = &done["result"];
    assert_eq!(result["resultType"], "complete", "the inlined result is the revision's: {result}");
    assert_eq!(result["isError"], false);
    assert_eq!(result["structuredContent"]["step"], "send", "the last step's output: {result}");
    assert_eq!(done["taskId"], id.as_str());

    // After it finished: the same task again, still one run per step; every reader gets the
    // same bytes of the result.
    let (_, late) = rpc(&gw, KEY_A, "tools/call", call(&method, "order-1"), true).await;
    assert_eq!(late["result"]["taskId"], id.as_str());
    assert_eq!(late["result"]["status"], "completed");
    for step in STEPS {
        assert_eq!(up.count(step), 1, "{step} ran once: {:?}", up.counts());
    }
    let again = settled(&gw, KEY_A, &id).await;
    assert_eq!(again["result"].to_string(), done["result"].to_string());

    // The same event over the events API (one store, one execution).
    let event = tasks::event(&gw, KEY_A, &id).await;
    assert_eq!(event["status"], "succeeded", "{event}");

    // Another tenant: the task is unknown, for reading and for cancelling.
    for method in ["tasks/get", "tasks/cancel", "tasks/update"] {
        let (_, other) = rpc(&gw, KEY_B, method, json!({ "taskId": id }), true).await;
        assert_eq!(other["error"]["code"], -32602, "{method}: {other}");
    }

    // Without the extension: the plain synchronous result, and tasks/* refused (-32021).
    let (_, sync) = rpc(&gw, KEY_A, "tools/call", call(&method, "order-2"), false).await;
    assert_eq!(sync["result"]["resultType"], "complete", "{sync}");
    assert!(sync["result"].get("taskId").is_none());
    assert_eq!(sync["result"]["structuredContent"]["step"], "send");
    let (status, refused) = rpc(&gw, KEY_A, "tasks/get", json!({ "taskId": id }), false).await;
    assert_eq!((status, refused["error"]["code"].as_i64()), (400, Some(-32021)), "{refused}");
    assert!(refused["error"]["data"]["requiredCapabilities"]["extensions"][EXT].is_object());

    // A query answers inline, even with the extension.
    let (_, look) = rpc(&gw, KEY_A, "tools/call", json!({ "name": "look", "arguments": {} }), true).await;
    assert_eq!(look["result"]["resultType"], "complete", "{look}");
}

/// The official client: ext-tasks declares the extension, creates the task, polls `tasks/get`
/// to the inlined result; the same key gets the same task and nothing runs again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_v2_client_with_ext_tasks_runs_a_flow_task_once_per_key() {
    let up = Upstream::start().await;
    up.set_delay(300, &["pack"]);
    let dir = TempDir::new("mcp-ext-tasks");
    let method = unique("ship").replace('-', "_");
    let gw = Gateway::start(&["--config", &config(&dir, "memory://", &up, &method)]);
    let Some(seen) = ext_tasks(&gw, KEY_A, "run", &[&method, "ext-1"]).await else { return };
    assert_eq!(seen["capabilities"]["execution"], true, "ext-tasks found the extension: {seen}");
    assert_eq!(seen["capabilities"]["cancellation"], true, "{seen}");
    let first = &seen["first"];
    assert_eq!(first["kind"], "task", "a command with the extension is a task: {seen}");
    let id = first["taskId"].as_str().unwrap();
    assert!(id.starts_with("evt_"), "{seen}");
    assert_eq!(first["statuses"][0], "working", "polled while it ran: {seen}");
    assert_eq!(first["outcome"]["status"], "completed", "{seen}");
    assert_eq!(first["outcome"]["structured"]["step"], "send", "the last step's output: {seen}");
    assert_eq!(first["outcome"]["is_error"], false);
    assert_eq!(seen["again"]["taskId"], id, "the same key is the same task");
    assert_eq!(seen["again"]["outcome"], first["outcome"], "the stored result: {seen}");
    for step in STEPS {
        assert_eq!(up.count(step), 1, "{step} ran once: {:?}", up.counts());
    }
    // Another tenant, through the same client: the task is unknown.
    let other = ext_tasks(&gw, KEY_B, "get", &[id]).await.unwrap();
    assert_eq!(other["error"]["code"], -32602, "{other}");
    let mine = ext_tasks(&gw, KEY_A, "get", &[id]).await.unwrap();
    assert_eq!((&mine["taskId"], &mine["status"]), (&json!(id), &json!("completed")), "{mine}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_task_requests_are_refused_and_run_nothing() {
    let up = Upstream::start().await;
    let dir = TempDir::new("mcp-tasks-bad");
    let method = unique("ship").replace('-', "_");
    let gw = Gateway::start(&["--config", &config(&dir, "memory://", &up, &method)]);
    for (method, params, code) in [
        ("tasks/get", json!({ "taskId": "evt_00000000000000000000000000000000" }), -32602),
        ("tasks/cancel", json!({ "taskId": "nope" }), -32602),
        ("tasks/update", json!({ "taskId": "nope", "inputResponses": {} }), -32602),
        ("tasks/get", json!({}), -32602),
        ("tasks/get", json!({ "taskId": 7 }), -32602),
        ("tasks/list", json!({}), -32601),
        ("tasks/result", json!({ "taskId": "nope" }), -32601),
    ] {
        let (_, answer) = rpc(&gw, KEY_A, method, params.clone(), true).await;
        assert_eq!(answer["error"]["code"], code, "{method} {params}: {answer}");
    }
    // A task-augmented call with invalid arguments (a key reused with others): a tool error,
    // no second task.
    let (_, first) = rpc(&gw, KEY_A, "tools/call", call(&method, "k-1"), true).await;
    let id = first["result"]["taskId"].as_str().unwrap().to_owned();
    let reused = json!({ "name": method, "arguments": { "sku": "B-2", "idempotency_key": "k-1" } });
    let (_, answer) = rpc(&gw, KEY_A, "tools/call", reused, true).await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    assert_eq!(answer["result"]["structuredContent"]["code"], -32002);
    settled(&gw, KEY_A, &id).await;
    assert_eq!(up.count("reserve"), 1, "nothing else ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_survives_kill_9_and_finishes_without_calling_finished_steps_again() {
    let up = Upstream::start().await;
    up.set_delay(1_000, &["pack"]);
    let dir = TempDir::new("mcp-tasks-kill");
    let method = unique("ship").replace('-', "_");
    let cfg = config(&dir, &format!("sqlite://{}", dir.file("o.db").display()), &up, &method);
    let mut a = Gateway::start(&["--config", &cfg]);
    // Started by the official client (ext-tasks), which leaves it running.
    let Some(started) = ext_tasks(&a, KEY_A, "start", &[&method, "crash-1"]).await else { return };
    assert_eq!(started["kind"], "task", "{started}");
    let id = started["taskId"].as_str().unwrap().to_owned();
    wait_for(&up, "pack", 1).await;
    a.kill9();
    up.set_delay(0, &[]);

    let b = Gateway::start(&["--config", &cfg]);
    // The client polls the restarted gateway to the outcome; the raw read agrees.
    let outcome = ext_tasks(&b, KEY_A, "settle", &[&id]).await.unwrap();
    assert_eq!(outcome["status"], "completed", "{outcome}");
    assert_eq!(outcome["structured"]["step"], "send", "{outcome}");
    let done = settled(&b, KEY_A, &id).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["structuredContent"]["step"], "send");
    assert_eq!(up.count("reserve"), 1, "the finished step is not called again");
    assert!(up.count("pack") <= 2, "the step in flight at most twice");
    assert_eq!(up.count("send"), 1);
    // The retry after the restart: the same task, nothing run again.
    let (_, again) = rpc(&b, KEY_A, "tools/call", call(&method, "crash-1"), true).await;
    assert_eq!(again["result"]["taskId"], id.as_str());
    assert_eq!(up.count("send"), 1);
}

/// A task started on one replica is read, retried and cancelled on the other: cancelled
/// between steps, the flow does not start its next step.
async fn two_replicas(store_url: &str) {
    let up = Upstream::start().await;
    up.set_delay(1_000, &["pack"]);
    let dir = TempDir::new("mcp-tasks-replicas");
    let method = unique("ship").replace('-', "_");
    let cfg = config(&dir, store_url, &up, &method);
    let a = Gateway::start(&["--config", &cfg]);
    let b = Gateway::start(&["--config", &cfg]);
    // The official client (ext-tasks) on B, connected before the task exists: it reads the task
    // and cancels it when told (a process start would take longer than the step in flight).
    let signals = TempDir::new("mcp-tasks-signals");
    let dir = signals.file("");
    let watcher = mcp_clients::typescript_2026_script(
        "mcp_ext_tasks_client.mjs",
        &["cancel-when", &b.url("/mcp"), KEY_A, dir.to_str().unwrap()],
    )
    .map(|mut cmd| cmd.stdout(std::process::Stdio::piped()).spawn().expect("the SDK client starts"));
    if watcher.is_some() {
        for _ in 0..600 {
            if signals.file("ready").exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert!(signals.file("ready").exists(), "the SDK client connected");
    }

    let (_, created) = rpc(&a, KEY_A, "tools/call", call(&method, "rep-1"), true).await;
    let id = created["result"]["taskId"].as_str().unwrap().to_owned();
    std::fs::write(signals.file("task"), &id).unwrap();
    let (_, on_b) = rpc(&b, KEY_A, "tasks/get", json!({ "taskId": id }), true).await;
    assert_eq!(on_b["result"]["status"], "working", "{store_url}: {on_b}");
    let (_, retried) = rpc(&b, KEY_A, "tools/call", call(&method, "rep-1"), true).await;
    assert_eq!(retried["result"]["taskId"], id.as_str(), "{store_url}: the same task on the other replica");
    let (_, other) = rpc(&b, KEY_B, "tasks/get", json!({ "taskId": id }), true).await;
    assert_eq!(other["error"]["code"], -32602, "{store_url}: another tenant's task is unknown");

    wait_for(&up, "pack", 1).await;
    // Cancelled on B by the official client where it is installed, else by a raw request.
    match watcher {
        Some(child) => {
            std::fs::write(signals.file("go"), "").unwrap();
            let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap()).await.unwrap();
            common::process::keep_output(&out);
            assert!(out.status.success(), "{store_url}: {}", String::from_utf8_lossy(&out.stderr));
            let seen: Value = serde_json::from_slice(&out.stdout).expect("the client's summary");
            assert_eq!(seen["before"], json!({ "taskId": id, "status": "working" }), "{store_url}: {seen}");
            assert_eq!(seen["cancel"], "ok", "{store_url}: {seen}");
            assert_eq!(seen["after"]["status"], "cancelled", "{store_url}: {seen}");
            let other = ext_tasks(&b, KEY_B, "get", &[&id]).await.unwrap();
            assert_eq!(other["error"]["code"], -32602, "{store_url}: another tenant's, via the SDK: {other}");
        }
        None => {
            let (_, ack) = rpc(&b, KEY_A, "tasks/cancel", json!({ "taskId": id }), true).await;
            assert_eq!(ack["result"], json!({ "resultType": "complete" }), "{store_url}: {ack}");
        }
    }
    let done = settled(&a, KEY_A, &id).await;
    assert_eq!(done["status"], "cancelled", "{store_url}: {done}");
    assert!(done.get("result").is_none() && done.get("error").is_none());
    // The step in flight finishes upstream; the next one never starts.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!((up.count("reserve"), up.count("pack"), up.count("send")), (1, 1, 0), "{store_url}");
    let (_, after) = rpc(&a, KEY_A, "tasks/get", json!({ "taskId": id }), true).await;
    assert_eq!(
        after["result"]["status"], "cancelled",
        "{store_url}: the owner's outcome does not replace it"
    );
    // Cancelling again: the same ack. Retrying the key: the same, cancelled task.
    let (_, ack) = rpc(&a, KEY_A, "tasks/cancel", json!({ "taskId": id }), true).await;
    assert_eq!(ack["result"]["resultType"], "complete");
    let (_, retried) = rpc(&a, KEY_A, "tools/call", call(&method, "rep-1"), true).await;
    assert_eq!(retried["result"]["status"], "cancelled", "{store_url}: {retried}");
    // The events API shows the same event cancelled, with the stored -32009.
    let event = tasks::event(&b, KEY_A, &id).await;
    assert_eq!((&event["status"], &event["error"]["code"]), (&json!("cancelled"), &json!(-32009)), "{event}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_a_task_started_on_one_replica_is_read_and_cancelled_on_the_other() {
    if let Some(url) = oncerpc_core::testkit::service_url("ONCERPC_TEST_REDIS_URL", "Redis") {
        two_replicas(&url).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_task_started_on_one_replica_is_read_and_cancelled_on_the_other() {
    if let Some(url) = oncerpc_core::testkit::service_url("ONCERPC_TEST_POSTGRES_URL", "PostgreSQL") {
        two_replicas(&url).await;
    }
}
