//! The stateless revision (`2026-07-28`) over a real dispatcher and store: no handshake, every
//! request on its own (a fresh server answers a retry another one started), the same keys and
//! duplicates as the session era, and every refusal before anything runs.
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use oncerpc_core::{Context, Dispatcher, DispatcherConfig, MemoryStore, MethodSpec, Registry, typed};
use oncerpc_mcp::stateless::{Refusal, Status};
use oncerpc_mcp::{McpServer, RequestHeaders};
use oncerpc_protocol::RpcError;
use serde_json::{Value, json};

/// Two servers on one store (two replicas), a counting command `pay` (its `region` argument
/// mirrored in `Mcp-Param-Region`), and the number of times it ran.
fn replicas() -> (McpServer, McpServer, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let store = Arc::new(MemoryStore::default());
    let server = || {
        let mut registry = Registry::new();
        let r = runs.clone();
        let mut pay = MethodSpec::command();
        pay.params_schema = Some(json!({ "type": "object", "required": ["amount"], "properties": {
            "amount": { "type": "integer" }, "region": { "type": "string", "x-mcp-header": "Region" } } }));
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
        let d = Dispatcher::with_store(registry, DispatcherConfig::default(), store.clone());
        McpServer::new(Arc::new(d))
    };
    (server(), server(), runs)
}

fn meta() -> Value {
    json!({ "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {} })
}

fn pay(id: u64, args: Value) -> Value {
    json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"pay","arguments":args,"_meta":meta()}})
}

async fn ask(s: &McpServer, msg: &Value, headers: Option<&RequestHeaders<'_>>) -> (Status, Value) {
    let a = s.stateless(msg.to_string().as_bytes(), "default".into(), headers).await;
    (a.status, a.body.map(|b| serde_json::from_slice(&b).expect("JSON")).unwrap_or(Value::Null))
}

#[tokio::test]
async fn any_replica_answers_and_a_retry_runs_once() {
    let (a, b, runs) = replicas();
    let call = pay(1, json!({ "amount": 5, "idempotency_key": "k-replica" }));
    let (s1, first) = ask(&a, &call, None).await;
    let (s2, again) = ask(&b, &call, None).await;
    assert_eq!((s1, s2), (Status::Answered, Status::Answered));
    assert_eq!(first["result"]["resultType"], "complete", "{first}");
    assert_eq!(first["result"]["_meta"]["io.oncerpc/idempotency-status"], "new");
    assert_eq!(again["result"]["_meta"]["io.oncerpc/idempotency-status"], "duplicate", "{again}");
    assert_eq!(first["result"]["content"], again["result"]["content"]);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let other = ask(&b, &pay(2, json!({ "amount": 6, "idempotency_key": "k-replica" })), None).await.1;
    assert_eq!(other["result"]["isError"], true, "{other}");
    assert_eq!(other["result"]["structuredContent"]["code"], -32002);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn headers_that_disagree_with_the_body_are_refused_before_anything_runs() {
    let (a, _, runs) = replicas();
    let call = pay(1, json!({ "amount": 5, "region": "eu", "idempotency_key": "k-headers" }));
    let right = RequestHeaders {
        protocol_version: Some(b"2026-07-28"),
        method: Some(b"tools/call"),
        name: Some(b"pay"),
        params: vec![("region".into(), b"eu")],
    };
    let cases: Vec<(&str, RequestHeaders)> = vec![
        ("no version header", RequestHeaders { protocol_version: None, ..right.clone() }),
        ("another method", RequestHeaders { method: Some(b"tools/list"), ..right.clone() }),
        ("no name", RequestHeaders { name: None, ..right.clone() }),
        ("a non-ASCII name", RequestHeaders { name: Some("p\u{e4}y".as_bytes()), ..right.clone() }),
        ("no region", RequestHeaders { params: vec![], ..right.clone() }),
        ("another region", RequestHeaders { params: vec![("region".into(), b"us")], ..right.clone() }),
        ("bad Base64", RequestHeaders { params: vec![("region".into(), b"=?base64?ZX?=")], ..right.clone() }),
    ];
    for (what, headers) in cases {
        let (status, answer) = ask(&a, &call, Some(&headers)).await;
        assert_eq!(status, Status::Refused(Refusal::HeaderMismatch), "{what}: {answer}");
        assert_eq!(
            (answer["id"].clone(), answer["error"]["code"].clone()),
            (json!(1), json!(-32020)),
            "{what}"
        );
    }
    let without_region = pay(2, json!({ "amount": 5, "idempotency_key": "k-headers-2" }));
    let stray = RequestHeaders { params: vec![("region".into(), b"=?base64?!!?=")], ..right.clone() };
    let (status, _) = ask(&a, &without_region, Some(&stray)).await;
    assert_eq!(
        status,
        Status::Refused(Refusal::HeaderMismatch),
        "a malformed header is refused even unneeded"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0, "nothing ran");
    let encoded = RequestHeaders { params: vec![("region".into(), b"=?base64?ZXU=?=")], ..right.clone() };
    let (status, answer) = ask(&a, &call, Some(&encoded)).await;
    assert_eq!(status, Status::Answered, "{answer}");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn bad_requests_and_removed_methods_get_the_revisions_errors() {
    let (a, _, runs) = replicas();
    let with_meta =
        |method: &str, m: Value| json!({"jsonrpc":"2.0","id":7,"method":method,"params":{"_meta":m}});
    let cases: Vec<(&str, Vec<u8>, Status, i64)> = vec![
        ("not JSON", b"{".to_vec(), Status::Refused(Refusal::Malformed), -32700),
        ("a batch", format!("[{}]", pay(1, json!({"amount":1}))).into_bytes(), Status::Refused(Refusal::Batch), -32600),
        ("no jsonrpc", br#"{"id":1,"method":"tools/list"}"#.to_vec(), Status::Refused(Refusal::Malformed), -32600),
        ("no _meta", br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#.to_vec(), Status::Refused(Refusal::Meta), -32602),
        ("params an array", br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":[]}"#.to_vec(), Status::Refused(Refusal::Meta), -32602),
        (
            "capabilities not an object",
            with_meta("tools/list", json!({"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":[]})).to_string().into_bytes(),
            Status::Refused(Refusal::Meta),
            -32602,
        ),
        (
            "a version not served",
            with_meta("tools/list", json!({"io.modelcontextprotocol/protocolVersion":"2025-11-25","io.modelcontextprotocol/clientCapabilities":{}})).to_string().into_bytes(),
            Status::Refused(Refusal::Version),
            -32022,
        ),
        ("initialize", with_meta("initialize", meta()).to_string().into_bytes(), Status::MethodNotFound, -32601),
        ("logging/setLevel", with_meta("logging/setLevel", meta()).to_string().into_bytes(), Status::MethodNotFound, -32601),
        ("resources/list", with_meta("resources/list", meta()).to_string().into_bytes(), Status::MethodNotFound, -32601),
    ];
    for (what, body, status, code) in cases {
        let a = a.stateless(&body, "default".into(), None).await;
        let answer: Value = serde_json::from_slice(&a.body.expect("an answer")).unwrap();
        assert_eq!(a.status, status, "{what}: {answer}");
        assert_eq!(answer["error"]["code"], code, "{what}: {answer}");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let note = json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}});
    let n = a.stateless(note.to_string().as_bytes(), "default".into(), None).await;
    assert_eq!((n.status, n.body), (Status::Accepted, None));
}

#[tokio::test]
async fn discover_and_tools_list_carry_result_type_and_caching_hints() {
    let (a, _, _) = replicas();
    let d =
        ask(&a, &json!({"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":meta()}}), None)
            .await
            .1;
    assert_eq!(d["result"]["resultType"], "complete");
    assert_eq!(
        d["result"]["supportedVersions"],
        json!(["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"])
    );
    assert_eq!(
        d["result"]["capabilities"],
        json!({ "tools": {}, "extensions": { "io.modelcontextprotocol/tasks": {} } })
    );
    assert_eq!(d["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "oncerpc");
    let l = ask(&a, &json!({"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":meta()}}), None)
        .await
        .1;
    assert_eq!(
        (l["result"]["resultType"].clone(), l["result"]["cacheScope"].clone()),
        (json!("complete"), json!("public"))
    );
    assert!(l["result"]["ttlMs"].as_u64().is_some(), "{l}");
    let schema = &l["result"]["tools"][0]["inputSchema"];
    assert_eq!(schema["properties"]["region"]["x-mcp-header"], "Region", "kept as written: {schema}");
}
