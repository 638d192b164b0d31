//! The MCP door over a real dispatcher and store: the session-era handshake, tools, and the
//! promise — a tool call retried with the same key runs once, whichever door sent it first.
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use oncerpc_core::{
    Context, Dispatcher, DispatcherConfig, MemoryStore, MethodSpec, Mode, Registry, RequestMeta,
    StepProgress, typed,
};
use oncerpc_mcp::{McpServer, Session};
use oncerpc_protocol::RpcError;
use serde_json::{Value, json};

fn server(mode: Mode) -> (McpServer, Arc<Dispatcher>, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let mut registry = Registry::new();
    let r = runs.clone();
    let mut pay = MethodSpec::command();
    pay.params_schema = Some(json!({ "type": "object", "required": ["amount"] }));
    registry
        .register(
            "pay",
            pay,
            typed(move |_c: Context, p: Value| {
                let n = r.fetch_add(1, Ordering::SeqCst) + 1;
                async move { Ok::<_, RpcError>(json!({ "charged": p["amount"], "run": n })) }
            }),
        )
        .unwrap();
    registry
        .register(
            "add",
            MethodSpec::query(),
            typed(|_c: Context, p: Value| async move {
                Ok::<_, RpcError>(p["a"].as_i64().unwrap_or(0) + p["b"].as_i64().unwrap_or(0))
            }),
        )
        .unwrap();
    registry
        .register(
            "steps",
            MethodSpec::query(),
            typed(|c: Context, _: Value| async move {
                for (n, step) in ["one", "two", "three"].into_iter().enumerate() {
                    tokio::task::yield_now().await;
                    if let Some(p) = &c.progress {
                        let done = n as u32 + 1;
                        p.report(&StepProgress { step, done, total: 3, ok: true, resumed: false });
                    }
                }
                Ok::<_, RpcError>("finished")
            }),
        )
        .unwrap();
    registry
        .register(
            "slow",
            MethodSpec::query(),
            typed(|_c: Context, _: Value| async move {
                tokio::time::sleep(std::time::Duration::from_secs(20)).await;
                Ok::<_, RpcError>("late")
            }),
        )
        .unwrap();
    let mut config = DispatcherConfig::default();
    config.idempotency.mode = mode;
    let d = Arc::new(Dispatcher::with_store(registry, config, Arc::new(MemoryStore::default())));
    (McpServer::new(d.clone()), d, runs)
}

async fn send(s: &McpServer, session: &mut Session, msg: Value) -> Option<Value> {
    let out = s.handle(msg.to_string().as_bytes(), session).await?;
    Some(serde_json::from_slice(&out).expect("an answer is JSON"))
}

async fn initialized(s: &McpServer, version: &str) -> Session {
    let mut session = Session::new("default");
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
        "protocolVersion": version, "capabilities": {}, "clientInfo": {"name":"t","version":"1"}}});
    let a = send(s, &mut session, init).await.unwrap();
    assert!(a["result"]["capabilities"]["tools"].is_object(), "{a}");
    assert!(
        send(s, &mut session, json!({"jsonrpc":"2.0","method":"notifications/initialized"})).await.is_none()
    );
    session
}

fn call(id: u64, name: &str, args: Value, meta: Option<Value>) -> Value {
    let mut params = json!({ "name": name, "arguments": args });
    if let Some(m) = meta {
        params["_meta"] = m;
    }
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params })
}

#[tokio::test]
async fn initialize_negotiates_a_session_revision() {
    let (s, _, _) = server(Mode::Dev);
    for (asked, got) in
        [("2025-03-26", "2025-03-26"), ("2025-06-18", "2025-06-18"), ("1999-01-01", "2025-11-25")]
    {
        let mut session = Session::new("default");
        let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion": asked}});
        let a = send(&s, &mut session, init).await.unwrap();
        assert_eq!(a["result"]["protocolVersion"], got);
        assert_eq!(a["result"]["serverInfo"]["name"], "oncerpc");
    }
    let mut session = Session::new("default");
    assert_eq!(
        send(&s, &mut session, json!({"jsonrpc":"2.0","id":"p","method":"ping"})).await.unwrap()["result"],
        json!({})
    );
    let unknown =
        send(&s, &mut session, json!({"jsonrpc":"2.0","id":2,"method":"resources/list"})).await.unwrap();
    assert_eq!(unknown["error"]["code"], -32601, "no resources: {unknown}");
}

#[tokio::test]
async fn a_command_retried_with_the_same_key_runs_once() {
    let (s, _, runs) = server(Mode::Dev);
    let mut session = initialized(&s, "2025-06-18").await;
    let first =
        send(&s, &mut session, call(1, "pay", json!({"amount": 5, "idempotency_key": "pay-1"}), None))
            .await
            .unwrap();
    let again =
        send(&s, &mut session, call(2, "pay", json!({"amount": 5, "idempotency_key": "pay-1"}), None))
            .await
            .unwrap();
    assert_eq!(first["result"]["_meta"]["io.oncerpc/idempotency-status"], "new", "{first}");
    assert_eq!(again["result"]["_meta"]["io.oncerpc/idempotency-status"], "duplicate", "{again}");
    assert_eq!(again["result"]["_meta"]["io.oncerpc/idempotency-key"], "pay-1");
    assert_eq!(first["result"]["content"], again["result"]["content"], "the stored result, byte for byte");
    assert_eq!(again["result"]["structuredContent"], json!({"charged": 5, "run": 1}));
    // The key in _meta works the same, and both ways name one record.
    let meta = Some(json!({"io.oncerpc/idempotency-key": "pay-1"}));
    let by_meta = send(&s, &mut session, call(3, "pay", json!({"amount": 5}), meta)).await.unwrap();
    assert_eq!(by_meta["result"]["_meta"]["io.oncerpc/idempotency-status"], "duplicate", "{by_meta}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    let other =
        send(&s, &mut session, call(4, "pay", json!({"amount": 6, "idempotency_key": "pay-1"}), None))
            .await
            .unwrap();
    assert_eq!(other["result"]["isError"], true, "{other}");
    assert_eq!(other["result"]["structuredContent"]["code"], -32002);
    let clash = Some(json!({"io.oncerpc/idempotency-key": "pay-2"}));
    let clash =
        send(&s, &mut session, call(5, "pay", json!({"amount": 5, "idempotency_key": "pay-3"}), clash))
            .await
            .unwrap();
    assert_eq!(clash["result"]["structuredContent"]["code"], -32602, "two different keys: {clash}");
    let invalid =
        send(&s, &mut session, call(6, "pay", json!({"idempotency_key": "pay-4"}), None)).await.unwrap();
    assert_eq!(invalid["result"]["isError"], true, "schema: {invalid}");
    assert_eq!(invalid["result"]["structuredContent"]["code"], -32602);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "refused calls ran nothing");
}

#[tokio::test]
async fn a_command_sent_over_rpc_is_a_duplicate_over_mcp() {
    let (s, d, runs) = server(Mode::Dev);
    let body =
        br#"{"jsonrpc":"2.0","method":"pay","params":{"amount":9,"idempotency_key":"cross-1"},"id":1}"#;
    let reply = d.handle(body, &RequestMeta::default()).await;
    let rpc: Value = serde_json::from_slice(&reply.body.unwrap()).unwrap();
    let mut session = initialized(&s, "2025-11-25").await;
    let a = send(&s, &mut session, call(1, "pay", json!({"amount": 9, "idempotency_key": "cross-1"}), None))
        .await
        .unwrap();
    assert_eq!(a["result"]["_meta"]["io.oncerpc/idempotency-status"], "duplicate", "{a}");
    assert_eq!(a["result"]["structuredContent"], rpc["result"]);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn production_mode_requires_a_key_for_commands_but_not_queries() {
    let (s, _, runs) = server(Mode::Production);
    let mut session = initialized(&s, "2025-06-18").await;
    let a = send(&s, &mut session, call(1, "pay", json!({"amount": 1}), None)).await.unwrap();
    assert_eq!(a["result"]["isError"], true, "{a}");
    assert_eq!(a["result"]["structuredContent"]["code"], -32602);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let q = send(&s, &mut session, call(2, "add", json!({"a": 2, "b": 3}), None)).await.unwrap();
    assert_eq!(q["result"]["structuredContent"], json!({"result": 5}), "{q}");
    assert_eq!(q["result"]["content"][0]["text"], "5");
}

#[tokio::test]
async fn bad_input_gets_a_clear_error_and_runs_nothing() {
    let (s, _, runs) = server(Mode::Dev);
    let mut session = initialized(&s, "2025-06-18").await;
    let parse = s.handle(b"{not json", &mut session).await.unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&parse).unwrap()["error"]["code"], -32700);
    let unknown = send(&s, &mut session, call(1, "nope", json!({}), None)).await.unwrap();
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    let no_name = send(&s, &mut session, json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{}}))
        .await
        .unwrap();
    assert_eq!(no_name["error"]["code"], -32602);
    let args = send(
        &s,
        &mut session,
        json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"pay","arguments":[1]}}),
    )
    .await
    .unwrap();
    assert_eq!(args["error"]["code"], -32602);
    let cursor = send(
        &s,
        &mut session,
        json!({"jsonrpc":"2.0","id":4,"method":"tools/list","params":{"cursor":"zz"}}),
    )
    .await
    .unwrap();
    assert_eq!(cursor["error"]["code"], -32602);
    // Batches were removed after 2025-03-26.
    let batch = json!([{"jsonrpc":"2.0","id":5,"method":"ping"}]).to_string();
    let refused: Value =
        serde_json::from_slice(&s.handle(batch.as_bytes(), &mut session).await.unwrap()).unwrap();
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    let mut old = initialized(&s, "2025-03-26").await;
    let served: Value = serde_json::from_slice(&s.handle(batch.as_bytes(), &mut old).await.unwrap()).unwrap();
    assert_eq!(served, json!([{"jsonrpc":"2.0","result":{},"id":5}]));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn over_stdio_a_calls_progress_and_log_lines_come_before_its_answer() {
    let (s, _, _) = server(Mode::Dev);
    let lines = [
        json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}),
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
        json!({"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"info"}}),
        call(2, "steps", json!({}), Some(json!({"progressToken": 7}))),
        // No token and a level above the steps' messages: nothing but the answer.
        json!({"jsonrpc":"2.0","id":3,"method":"logging/setLevel","params":{"level":"error"}}),
        call(4, "steps", json!({}), None),
    ];
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let mut output = Vec::new();
    oncerpc_mcp::stdio::run(&s, input.as_bytes(), &mut output, 1 << 20, std::future::pending())
        .await
        .unwrap();
    let out: Vec<Value> = output
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    let kinds: Vec<String> = out
        .iter()
        .map(|m| {
            m.get("method")
                .and_then(Value::as_str)
                .map_or_else(|| format!("answer {}", m["id"]), str::to_owned)
        })
        .collect();
    let p = "notifications/progress";
    let m = "notifications/message";
    assert_eq!(
        kinds,
        ["answer 0", "answer 1", p, m, p, m, p, m, "answer 2", "answer 3", "answer 4"],
        "{out:#?}"
    );
    let progress: Vec<_> =
        out.iter().filter(|m| m["method"] == p).map(|m| m["params"]["progress"].clone()).collect();
    assert_eq!(progress, [json!(1), json!(2), json!(3)]);
    assert!(
        out.iter()
            .filter(|m| m["method"] == p)
            .all(|m| m["params"]["progressToken"] == 7 && m["params"]["total"] == 3)
    );
    assert_eq!(out[8]["result"]["structuredContent"], json!({"result": "finished"}));
}

/// Wait until the clock is in window `n` of `window_ms` (or later).
async fn until_window(n: u64, window_ms: u64) {
    let now = oncerpc_core::store::now_ms();
    let at = n * window_ms + 5;
    if now < at {
        tokio::time::sleep(std::time::Duration::from_millis(at - now)).await;
    }
}

#[tokio::test]
async fn derive_key_makes_an_identical_keyless_call_within_the_window_a_duplicate() {
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let mut registry = Registry::new();
    let mut email = MethodSpec::command();
    let window_ms = 1_000;
    email.derive_key_window = Some(std::time::Duration::from_millis(window_ms));
    let handler = typed(move |_c: Context, p: Value| {
        let n = r.fetch_add(1, Ordering::SeqCst) + 1;
        async move { Ok::<_, RpcError>(json!({ "sent": p["to"], "run": n })) }
    });
    registry.register("email.send", email, handler).unwrap();
    let mut config = DispatcherConfig::default();
    config.idempotency.mode = Mode::Production;
    let d = Arc::new(Dispatcher::with_store(registry, config, Arc::new(MemoryStore::default())));
    let s = McpServer::new(d);
    let mut session = initialized(&s, "2025-11-25").await;
    let status =
        |a: &Value| a["result"]["_meta"]["io.oncerpc/idempotency-status"].as_str().unwrap().to_owned();
    let key = |a: &Value| a["result"]["_meta"]["io.oncerpc/idempotency-key"].as_str().unwrap().to_owned();

    // Start at the beginning of a window, so the retries below land where the test says.
    let w = oncerpc_core::store::now_ms() / window_ms + 1;
    until_window(w, window_ms).await;
    let first =
        send(&s, &mut session, call(1, "email_send", json!({"to":"a@x.io","n":1}), None)).await.unwrap();
    assert_eq!(status(&first), "new", "no key needed even in production: {first}");
    // The same arguments in another order and spelling: the same call.
    let again =
        send(&s, &mut session, call(2, "email_send", json!({"n":1.0,"to":"a@x.io"}), None)).await.unwrap();
    assert_eq!((status(&again), key(&again)), ("duplicate".into(), key(&first)));
    let other =
        send(&s, &mut session, call(3, "email_send", json!({"to":"b@x.io","n":1}), None)).await.unwrap();
    assert_eq!(status(&other), "new");
    // The next window still finds the first call.
    until_window(w + 1, window_ms).await;
    let next =
        send(&s, &mut session, call(4, "email_send", json!({"to":"a@x.io","n":1}), None)).await.unwrap();
    assert_eq!((status(&next), key(&next)), ("duplicate".into(), key(&first)));
    // Two windows on, it is a new call; a key the client gives wins over the derived one.
    until_window(w + 2, window_ms).await;
    let later =
        send(&s, &mut session, call(5, "email_send", json!({"to":"a@x.io","n":1}), None)).await.unwrap();
    assert_eq!(status(&later), "new");
    assert_ne!(key(&later), key(&first));
    let keyed = send(
        &s,
        &mut session,
        call(6, "email_send", json!({"to":"a@x.io","n":1,"idempotency_key":"mine-1"}), None),
    )
    .await
    .unwrap();
    assert_eq!((status(&keyed), key(&keyed)), ("new".into(), "mine-1".into()));
    assert_eq!(runs.load(Ordering::SeqCst), 4, "a@x.io twice (two windows apart), b@x.io, and mine-1");
}

#[tokio::test]
async fn over_stdio_a_cancellation_read_while_its_query_runs_stops_it() {
    let (s, _, _) = server(Mode::Dev);
    let lines = [
        json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{
            "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}),
        call(5, "slow", json!({}), None),
        json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5,"reason":"user"}}),
        call(6, "add", json!({"a":1,"b":2}), None),
    ];
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let mut output = Vec::new();
    let started = std::time::Instant::now();
    oncerpc_mcp::stdio::run(&s, input.as_bytes(), &mut output, 1 << 20, std::future::pending())
        .await
        .unwrap();
    let out: Vec<Value> = output
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    let ids: Vec<&Value> = out.iter().map(|m| &m["id"]).collect();
    assert_eq!(ids, [&json!(0), &json!(6)], "the cancelled query gets no answer: {out:#?}");
    assert_eq!(out[1]["result"]["structuredContent"], json!({"result": 3}));
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "the query did not run to its end");
}

/// A command whose params are positional: its tool takes them as one array argument, the key
/// beside it, and a retry with that key runs nothing again; the key in `_meta` too must agree.
#[tokio::test]
async fn a_positional_command_takes_its_params_as_one_argument_and_runs_once_per_key() {
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let mut registry = Registry::new();
    let mut push =
        MethodSpec::command().params_schema(json!({ "type": "array", "items": { "type": "integer" } }));
    push.tool.array_argument = Some("items".into());
    let handler = typed(move |_c: Context, p: Vec<i64>| {
        let n = r.fetch_add(1, Ordering::SeqCst) + 1;
        async move { Ok::<_, RpcError>(json!({ "pushed": p, "run": n })) }
    });
    registry.register("queue.push", push, handler).unwrap();
    let d = Arc::new(Dispatcher::with_store(
        registry,
        DispatcherConfig::default(),
        Arc::new(MemoryStore::default()),
    ));
    let s = McpServer::new(d);
    let mut session = initialized(&s, "2025-06-18").await;
    let list = send(&s, &mut session, json!({"jsonrpc":"2.0","id":1,"method":"tools/list"})).await.unwrap();
    let tool = &list["result"]["tools"][0];
    assert_eq!((&tool["name"], &tool["title"]), (&json!("queue_push"), &json!("queue.push")));
    assert_eq!(tool["inputSchema"]["properties"]["items"]["items"]["type"], "integer", "{tool}");
    let args = json!({ "items": [1, 2], "idempotency_key": "push-1" });
    let first = send(&s, &mut session, call(2, "queue_push", args.clone(), None)).await.unwrap();
    assert_eq!(first["result"]["structuredContent"], json!({ "pushed": [1, 2], "run": 1 }), "{first}");
    let again = send(&s, &mut session, call(3, "queue_push", args.clone(), None)).await.unwrap();
    assert_eq!(again["result"]["_meta"]["io.oncerpc/idempotency-status"], "duplicate", "{again}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let differ = json!({ "io.oncerpc/idempotency-key": "push-2" });
    let refused = send(&s, &mut session, call(4, "queue_push", args, Some(differ))).await.unwrap();
    assert_eq!(refused["result"]["isError"], true, "an error result the model reads: {refused}");
    let told = refused["result"]["content"][0]["text"].as_str().unwrap();
    assert!(told.contains("arguments.idempotency_key differ"), "{told}");
    let wrong = send(&s, &mut session, call(5, "queue_push", json!({ "values": [1] }), None)).await.unwrap();
    let told = wrong["result"]["content"][0]["text"].as_str().unwrap_or_else(|| panic!("{wrong}"));
    assert_eq!(told, "invalid arguments: values is not an argument of this tool: it takes items (an array)");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
