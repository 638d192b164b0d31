//! MCP tasks of the session era (`2025-11-25`, experimental) on the event store, against the
//! real binary: the official Python SDK's tasks client runs a three-step flow as a task (over
//! HTTP and over `oncerpc mcp`), and the TypeScript SDK's streams one; the same key gets the
//! same task and each step runs once, the result is the stored outcome for every reader, a
//! running task is cancelled (and reads `cancelled` on the events API too). Two replicas on
//! Redis or PostgreSQL cancel each other's tasks, and one waits on `tasks/result` for a task
//! it resumes after the other's `kill -9`. Bad input (malformed task params, a query as a
//! task, a required tool called inline, unknown and other tenants' tasks, a finished task
//! cancelled, a bad cursor) gets its documented error and runs nothing.

mod common;

use std::time::Duration;

use common::mcp_clients;
use common::process::{Gateway, TempDir, unique};
use common::tasks::{self, KEY_A, KEY_B, STEPS};
use common::upstream::Upstream;
use serde_json::{Value, json};

/// What the Python client saw of one run (`tests/clients/mcp_tasks_client.py`), checked.
fn assert_tasks_seen(seen: &Value, key: &str) {
    assert_eq!(seen["protocol"], "2025-11-25", "{seen}");
    assert_eq!(
        seen["capability"],
        json!({ "list": {}, "cancel": {}, "requests": { "tools": { "call": {} } } })
    );
    assert_eq!(seen["task_support"]["look"], "forbidden", "{seen}");
    let created = &seen["created"];
    let id = created["taskId"].as_str().unwrap();
    assert!(id.starts_with("evt_"), "the task is the event: {id}");
    assert_eq!(created["status"], "working", "{seen}");
    assert!(created["ttl"].as_u64().unwrap() > 0 && created["pollInterval"].as_u64().unwrap() > 0);
    assert_eq!(seen["created_meta"]["io.oncerpc/idempotency-key"], key);
    assert_eq!(seen["created_meta"]["io.oncerpc/idempotency-status"], "new");
    assert_eq!(seen["again"], id, "the same key is the same task");
    assert_eq!(seen["statuses"].as_array().unwrap().last().unwrap(), "completed", "{seen}");
    assert_eq!(seen["got"]["status"], "completed");
    let result = &seen["result"];
    assert_eq!(result["is_error"], false, "{seen}");
    assert_eq!(result["structured"]["step"], "send", "the last step's output: {seen}");
    assert_eq!(result["related_task"], json!({ "taskId": id }));
    assert_eq!(seen["result_again_same"], true, "every reader gets the stored result");
    assert!(seen["listed"].as_array().unwrap().contains(&json!(id)), "{seen}");
    assert_eq!(seen["listed_status"][id], "completed");
    assert_eq!(seen["cancel_finished"]["code"], -32602, "{seen}");
    assert!(seen["cancel_finished"]["message"].as_str().unwrap().contains("terminal status 'completed'"));
    assert_eq!(seen["unknown"]["code"], -32602);
    assert_eq!(seen["unknown_result"]["code"], -32602);
    assert_eq!(seen["query_as_task"]["code"], -32601, "a query does not run as a task: {seen}");
    assert_eq!(seen["query_inline"], false);
    let cancel = &seen["cancel"];
    assert_ne!(cancel["id"], id);
    assert_eq!((&cancel["answer"], &cancel["after"]), (&json!("cancelled"), &json!("cancelled")), "{seen}");
    assert!(cancel["message"].as_str().unwrap().contains("cancelled"));
    assert_eq!(cancel["result"]["is_error"], true, "{seen}");
    assert_eq!(cancel["result"]["structured"]["code"], -32009, "the stored cancellation: {seen}");
    assert_eq!(cancel["again"]["code"], -32602, "a cancelled task is finished: {seen}");
    // The tasks/result that waited told the finished task first.
    let status = notes(seen, "notifications/tasks/status");
    assert_eq!(status.len(), 1, "{seen}");
    assert_eq!(
        (&status[0]["params"]["taskId"], &status[0]["params"]["status"]),
        (&json!(id), &json!("completed"))
    );
}

/// The notifications named `method` the client received.
fn notes<'v>(seen: &'v Value, method: &str) -> Vec<&'v Value> {
    seen["notifications"].as_array().unwrap().iter().filter(|n| n["method"] == method).collect()
}

/// After the client ran: one run per step for the completed task; the cancelled one stopped
/// before `send` (its step in flight finishes upstream, the next never starts); the query as
/// a task ran nothing.
async fn assert_ran_once(up: &Upstream) {
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(up.count("send"), 1, "the cancelled task never reached its last step: {:?}", up.counts());
    assert!(up.count("reserve") <= 2 && up.count("pack") <= 2, "{:?}", up.counts());
    assert_eq!(up.count("look"), 1, "only the inline query ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_runs_a_flow_as_a_task_once_and_cancels_another_over_http() {
    let up = Upstream::start().await;
    up.set_delay(300, &["pack"]);
    let dir = TempDir::new("mcp-tasks-session");
    let method = unique("ship").replace('-', "_");
    let gw = Gateway::start(&["--config", &tasks::config(&dir, "memory://", &up, &method, true)]);
    let key = "order-session-1";
    let Some(client) = mcp_clients::python_script(
        "mcp_tasks_client.py",
        &["http", &gw.url("/mcp"), KEY_A, &method, "look", key],
    ) else {
        return;
    };
    let seen = mcp_clients::summary(client).await;
    assert_tasks_seen(&seen, key);
    assert_eq!(seen["task_support"][&method], "optional", "{seen}");
    assert_ran_once(&up).await;
    // The events API shows the same event, cancelled.
    let cancelled = seen["cancel"]["id"].as_str().unwrap();
    let event = tasks::event(&gw, KEY_A, cancelled).await;
    assert_eq!(event["status"], "cancelled", "{event}");
    assert_eq!(event["error"]["code"], -32009);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_streams_a_flow_as_a_task_and_the_same_key_is_the_same_task() {
    let up = Upstream::start().await;
    up.set_delay(300, &["pack"]);
    let dir = TempDir::new("mcp-tasks-ts");
    let method = unique("ship").replace('-', "_");
    let gw = Gateway::start(&["--config", &tasks::config(&dir, "memory://", &up, &method, true)]);
    let args = [gw.url("/mcp"), KEY_A.into(), method.clone(), "order-ts-1".into()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let Some(client) = mcp_clients::typescript_script("mcp_ts_tasks_client.mjs", &args) else { return };
    let seen = mcp_clients::summary(client).await;
    assert!(seen["capability"]["requests"]["tools"]["call"].is_object(), "{seen}");
    assert_eq!(seen["task_support"], "optional");
    let first = &seen["first"];
    let id = first["taskId"].as_str().unwrap();
    assert!(id.starts_with("evt_"), "{seen}");
    assert_eq!(first["types"][0], "taskCreated", "{seen}");
    assert_eq!(first["types"].as_array().unwrap().last().unwrap(), "result", "{seen}");
    assert_eq!(first["statuses"].as_array().unwrap().last().unwrap(), "completed");
    assert_eq!(first["result"]["structured"]["step"], "send", "{seen}");
    assert_eq!(seen["again"]["taskId"], id, "the same key is the same task");
    assert_eq!(seen["again"]["result"], first["result"], "the stored result");
    assert!(seen["listed"].as_array().unwrap().contains(&json!(id)));
    assert_eq!(seen["cancel_finished"]["code"], -32602, "{seen}");
    assert_eq!(seen["unknown"]["code"], -32602, "{seen}");
    for step in STEPS {
        assert_eq!(up.count(step), 1, "{step} ran once: {:?}", up.counts());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_runs_tasks_over_stdio() {
    let up = Upstream::start().await;
    up.set_delay(300, &["pack"]);
    let dir = TempDir::new("mcp-tasks-stdio");
    let method = unique("ship").replace('-', "_");
    let store = format!("sqlite://{}", dir.file("tasks.db").display());
    let config = tasks::config(&dir, &store, &up, &method, false);
    let bin = env!("CARGO_BIN_EXE_oncerpc");
    let key = "order-stdio-1";
    let Some(client) =
        mcp_clients::python_script("mcp_tasks_client.py", &["stdio", bin, &config, &method, "look", key])
    else {
        return;
    };
    let seen = mcp_clients::summary(client).await;
    assert_tasks_seen(&seen, key);
    // The progressToken of the task-augmented call works for the task's lifetime: one
    // notification per step, each naming the task once it is one.
    let id = &seen["created"]["taskId"];
    let progress: Vec<_> = notes(&seen, "notifications/progress")
        .into_iter()
        .filter(|n| n["params"]["progressToken"] == format!("p-{key}"))
        .collect();
    let done: Vec<_> =
        progress.iter().map(|n| (n["params"]["progress"].as_f64(), n["params"]["total"].as_f64())).collect();
    assert_eq!(done, [(Some(1.0), Some(3.0)), (Some(2.0), Some(3.0)), (Some(3.0), Some(3.0))], "{seen}");
    assert_eq!(
        progress[2]["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], *id,
        "{seen}"
    );
    assert!(progress[2]["params"]["message"].as_str().unwrap().contains("send"));
    assert_ran_once(&up).await;
}

/// A session of the era `version` over HTTP as `api_key`.
struct Session {
    url: String,
    api_key: &'static str,
    id: String,
    version: &'static str,
}

impl Session {
    async fn open(gw: &Gateway, api_key: &'static str, version: &'static str) -> (Session, Value) {
        let init = json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {}, "clientInfo": { "name": "t", "version": "1" } } });
        let resp = common::http_client()
            .post(gw.url("/mcp"))
            .bearer_auth(api_key)
            .header("Accept", "application/json, text/event-stream")
            .json(&init)
            .send()
            .await
            .unwrap();
        let id = resp.headers()["mcp-session-id"].to_str().unwrap().to_owned();
        let answer: Value = resp.json().await.unwrap();
        (Session { url: gw.url("/mcp"), api_key, id, version }, answer["result"].clone())
    }

    async fn send(&self, method: &str, params: Value) -> Value {
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
        let resp = common::http_client()
            .post(&self.url)
            .bearer_auth(self.api_key)
            .header("Accept", "application/json")
            .header("Mcp-Session-Id", &self.id)
            .header("MCP-Protocol-Version", self.version)
            .json(&body)
            .send()
            .await
            .unwrap();
        let text = resp.text().await.unwrap();
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_task_requests_in_a_session_are_refused_and_run_nothing() {
    let up = Upstream::start().await;
    let dir = TempDir::new("mcp-tasks-session-bad");
    let method = unique("ship").replace('-', "_");
    let path = tasks::config(&dir, "memory://", &up, &method, true);
    // A flow that runs only as a task.
    let required = format!(
        "\n[[methods]]\nname = \"{method}_req\"\nkind = \"command\"\ntasks = \"required\"\ntimeout_ms = 1500\n  [[methods.steps]]\n  name = \"req\"\n  url = \"{}\"\n",
        up.url("req")
    );
    std::fs::write(&path, std::fs::read_to_string(&path).unwrap() + &required).unwrap();
    let gw = Gateway::start(&["--config", &path]);
    let (a, init) = Session::open(&gw, KEY_A, "2025-11-25").await;
    assert!(init["capabilities"]["tasks"]["requests"]["tools"]["call"].is_object(), "{init}");
    let tools = a.send("tools/list", json!({})).await;
    let support = |name: &str| {
        tools["result"]["tools"].as_array().unwrap().iter().find(|t| t["name"] == name).unwrap()["execution"]
            ["taskSupport"]
            .clone()
    };
    assert_eq!((support(&method), support(&format!("{method}_req"))), (json!("optional"), json!("required")));

    let call = |task: Value| json!({ "name": method, "arguments": { "sku": "A-1", "idempotency_key": "k-1" }, "task": task });
    for (params, code) in [
        (call(json!("soon")), -32602),
        (call(json!({ "ttl": -1 })), -32602),
        (call(json!({ "ttl": "1m" })), -32602),
        (json!({ "name": "look", "arguments": {}, "task": {} }), -32601),
        (json!({ "name": format!("{method}_req"), "arguments": { "idempotency_key": "r-1" } }), -32601),
    ] {
        let answer = a.send("tools/call", params.clone()).await;
        assert_eq!(answer["error"]["code"], code, "{params}: {answer}");
    }
    for (method, params) in [
        ("tasks/get", json!({ "taskId": "evt_00000000000000000000000000000000" })),
        ("tasks/result", json!({ "taskId": "nope" })),
        ("tasks/cancel", json!({ "taskId": "nope" })),
        ("tasks/get", json!({})),
        ("tasks/get", json!({ "taskId": 7 })),
        ("tasks/list", json!({ "cursor": "not-ours" })),
        ("tasks/list", json!({ "cursor": 5 })),
    ] {
        let answer = a.send(method, params.clone()).await;
        assert_eq!(answer["error"]["code"], -32602, "{method} {params}: {answer}");
    }
    assert_eq!(a.send("tasks/update", json!({ "taskId": "nope" })).await["error"]["code"], -32601);
    assert_eq!(up.counts().values().sum::<usize>(), 0, "nothing ran: {:?}", up.counts());

    // A task of tenant a: unknown to tenant b, for every method, and not in its list.
    let created = a.send("tools/call", call(json!({ "ttl": 60000 }))).await;
    let id = created["result"]["task"]["taskId"].as_str().unwrap().to_owned();
    let (b, _) = Session::open(&gw, KEY_B, "2025-11-25").await;
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let answer = b.send(method, json!({ "taskId": id })).await;
        assert_eq!(answer["error"]["code"], -32602, "{method}: {answer}");
    }
    let listed = b.send("tasks/list", json!({})).await;
    assert_eq!(listed["result"]["tasks"], json!([]), "{listed}");
    let done = a.send("tasks/result", json!({ "taskId": id })).await;
    assert_eq!(done["result"]["structuredContent"]["step"], "send", "{done}");
    for step in STEPS {
        assert_eq!(up.count(step), 1, "{step}: {:?}", up.counts());
    }

    // An older revision has no tasks: params.task is ignored, tasks/* are unknown methods.
    let (old, init) = Session::open(&gw, KEY_A, "2025-06-18").await;
    assert!(init["capabilities"].get("tasks").is_none(), "{init}");
    let tools = old.send("tools/list", json!({})).await;
    assert!(tools["result"]["tools"][0].get("execution").is_none(), "{tools}");
    let inline = old.send("tools/call", call(json!({ "ttl": 60000 }))).await;
    assert_eq!(inline["result"]["structuredContent"]["step"], "send", "inline, the stored result: {inline}");
    assert_eq!(old.send("tasks/get", json!({ "taskId": id })).await["error"]["code"], -32601);
}

/// Two replicas sharing `store_url` and the session secret: a session opened on one is
/// served by both; a task started on `a` is cancelled from `b` between steps (the flow stops
/// before its next step, `tasks/result` on `a` is the stored cancellation); another task's
/// owner is killed with `kill -9` mid-flow, and a `tasks/result` sent to `b` waits for `b` to
/// resume it and answers its result, no finished step run again.
async fn replicas(store_url: &str) {
    let up = Upstream::start().await;
    up.set_delay(1_000, &["pack"]);
    let dir = TempDir::new("mcp-tasks-session-replicas");
    let method = unique("ship").replace('-', "_");
    let cfg = tasks::config(&dir, store_url, &up, &method, true);
    let secret = format!("{}{}", unique("secret"), "-0123456789abcdef0123456789abcdef");
    std::fs::write(
        &cfg,
        std::fs::read_to_string(&cfg).unwrap() + &format!("\n[mcp]\nsession_secret = \"{secret}\"\n"),
    )
    .unwrap();
    let mut a = Gateway::start(&["--config", &cfg]);
    let b = Gateway::start(&["--config", &cfg]);
    let (on_a, _) = Session::open(&a, KEY_A, "2025-11-25").await;
    let on_b = Session { url: b.url("/mcp"), id: on_a.id.clone(), ..on_a };
    let on_a = Session { url: a.url("/mcp"), id: on_b.id.clone(), ..on_b };
    let call = |key: &str| json!({ "name": method, "arguments": { "sku": "A-1", "idempotency_key": key }, "task": {} });

    let created = on_a.send("tools/call", call("rep-cancel")).await;
    let cancelled = created["result"]["task"]["taskId"].as_str().unwrap().to_owned();
    assert_eq!(on_b.send("tasks/get", json!({ "taskId": cancelled })).await["result"]["status"], "working");
    tasks::wait_for(&up, "pack", 1).await;
    let answer = on_b.send("tasks/cancel", json!({ "taskId": cancelled })).await;
    assert_eq!(answer["result"]["status"], "cancelled", "{store_url}: {answer}");
    let result = on_a.send("tasks/result", json!({ "taskId": cancelled })).await;
    assert_eq!(result["result"]["structuredContent"]["code"], -32009, "{store_url}: {result}");

    let created = on_a.send("tools/call", call("rep-kill")).await;
    let killed = created["result"]["task"]["taskId"].as_str().unwrap().to_owned();
    tasks::wait_for(&up, "pack", 2).await;
    a.kill9();
    up.set_delay(0, &[]);
    let result = on_b.send("tasks/result", json!({ "taskId": killed })).await;
    assert_eq!(result["result"]["structuredContent"]["step"], "send", "{store_url}: {result}");
    assert_eq!(result["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"], killed.as_str());
    assert_eq!(up.count("reserve"), 2, "{store_url}: one per task, none again: {:?}", up.counts());
    assert_eq!(up.count("send"), 1, "{store_url}: only the task that was not cancelled: {:?}", up.counts());
    assert!(up.count("pack") <= 3, "{store_url}: the step in flight at most twice: {:?}", up.counts());
    let listed = on_b.send("tasks/list", json!({})).await;
    let statuses: Vec<(&str, &str)> = listed["result"]["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["taskId"].as_str().unwrap(), t["status"].as_str().unwrap()))
        // The shared database may hold the tenant's tasks of other runs.
        .filter(|(id, _)| [&killed, &cancelled].contains(&&id.to_string()))
        .collect();
    assert_eq!(statuses, [(killed.as_str(), "completed"), (cancelled.as_str(), "cancelled")], "{store_url}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_replicas_cancel_each_others_tasks_and_one_resumes_a_killed_ones() {
    if let Some(url) = oncerpc_core::testkit::service_url("ONCERPC_TEST_REDIS_URL", "Redis") {
        replicas(&url).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_replicas_cancel_each_others_tasks_and_one_resumes_a_killed_ones() {
    if let Some(url) = oncerpc_core::testkit::service_url("ONCERPC_TEST_POSTGRES_URL", "PostgreSQL") {
        replicas(&url).await;
    }
}
