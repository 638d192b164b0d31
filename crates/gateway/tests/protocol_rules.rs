//! SPEC §1 (protocol, batches) and §2 (registry and policy), one rule per test, against a
//! real server over HTTP. Ids are checked on the raw response text, never on parsed numbers:
//! the rule is that they come back byte for byte.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Answer, TestServer, test_config};
use oncerpc_core::{Context, MethodSpec, Registry, typed};
use oncerpc_protocol::RpcError;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// helpers

/// A `subtract [42, 23]` request whose `id` member is the raw JSON text `id`.
fn subtract_with_raw_id(id: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":{id}}}"#)
}

/// The raw response text carries `"id":<raw>` as a complete member (followed by `}` or `,`).
fn assert_raw_id(body: &str, raw: &str) {
    let closed = format!(r#""id":{raw}}}"#);
    let more = format!(r#""id":{raw},"#);
    assert!(
        body.contains(&closed) || body.contains(&more),
        "expected the id echoed byte for byte as {raw}; raw response: {body}"
    );
}

/// A single JSON-RPC error object with `code` and the given `id`.
fn assert_error(v: &Value, code: i64, id: &Value) {
    assert!(v.is_object(), "expected one response object, got {v}");
    assert_eq!(v["jsonrpc"], "2.0", "response: {v}");
    assert_eq!(v["error"]["code"], code, "response: {v}");
    assert!(v["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "message: {v}");
    assert!(v.get("result").is_none(), "an error response has no result: {v}");
    assert_eq!(v.get("id"), Some(id), "response: {v}");
}

/// The answer is HTTP 200 with a single error object.
fn assert_error_answer(a: &Answer, code: i64, id: &Value) {
    assert_eq!(a.status, 200, "JSON-RPC errors travel in a 200 body: {}", a.body);
    assert_error(&a.json(), code, id);
}

/// HTTP 204, empty body.
fn assert_no_content(a: &Answer) {
    assert_eq!(a.status, 204, "nothing to return must be 204; body: {:?}", a.body);
    assert_eq!(a.body, "", "a 204 has no body");
}

/// `counter.get` over the wire and the demo state agree, and equal `expected`.
async fn assert_counter(s: &TestServer, expected: i64) {
    let v = s.call(json!({"jsonrpc":"2.0","method":"counter.get","id":"probe"})).await;
    assert_eq!(v["result"]["total"], expected, "counter.get: {v}");
    assert_eq!(s.demo.counter("default"), expected, "demo state");
}

/// The server still answers a plain request.
async fn assert_still_serving(s: &TestServer) {
    let v = s.call(json!({"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":99})).await;
    assert_eq!(v["result"], 19, "the server must keep answering: {v}");
    assert_eq!(v["id"], 99);
}

fn panic_on_purpose() {
    panic!("handler exploded on purpose (expected by the test)");
}

/// A server with the demo methods plus test-only methods:
/// * `test.ping` (query) → `"pong"`;
/// * `test.boom` (query) → panics;
/// * `test.slow` (query, 50 ms timeout) → sleeps 2 s;
/// * `test.tick` (query, notifications allowed) → adds one to `ticks`;
/// * `test.peek` (query, notifications not allowed) → adds one to `ticks`.
async fn custom_server() -> (TestServer, Arc<AtomicUsize>) {
    let config = test_config();
    let state = Arc::new(oncerpc::demo::DemoState::default());
    let mut registry = Registry::new();
    let demo_timeout = Duration::from_millis(config.limits.default_timeout_ms);
    oncerpc::demo::register(&mut registry, state.clone(), demo_timeout).expect("demo methods register");
    registry
        .register(
            "test.ping",
            MethodSpec::query(),
            typed(|_ctx: Context, _p: Value| async move { Ok::<_, RpcError>("pong") }),
        )
        .expect("register test.ping");
    registry
        .register(
            "test.boom",
            MethodSpec::query(),
            typed(|_ctx: Context, _p: Value| async move {
                panic_on_purpose();
                Ok::<_, RpcError>("unreachable")
            }),
        )
        .expect("register test.boom");
    registry
        .register(
            "test.slow",
            MethodSpec::query().timeout(Duration::from_millis(50)),
            typed(|_ctx: Context, _p: Value| async move {
                tokio::time::sleep(Duration::from_secs(2)).await;
                Ok::<_, RpcError>("too late")
            }),
        )
        .expect("register test.slow");
    let ticks = Arc::new(AtomicUsize::new(0));
    for (name, allowed) in [("test.tick", true), ("test.peek", false)] {
        let t = ticks.clone();
        registry
            .register(
                name,
                MethodSpec::query().notification_allowed(allowed),
                typed(move |_ctx: Context, _p: Value| {
                    let t = t.clone();
                    async move { Ok::<_, RpcError>(t.fetch_add(1, Ordering::SeqCst) + 1) }
                }),
            )
            .expect("register tick/peek");
    }
    let app = oncerpc::App::with_registry(config, registry, state);
    (TestServer::start_app(app).await, ticks)
}

// ---------------------------------------------------------------------------------------------
// §1 ids: echoed byte for byte

#[tokio::test]
async fn id_float_1_0_is_echoed_as_1_0() {
    let s = TestServer::start().await;
    let a = s.post(subtract_with_raw_id("1.0")).await;
    assert_eq!(a.status, 200);
    assert!(a.body.contains(r#""id":1.0}"#), "raw response: {}", a.body);
    assert_eq!(a.json()["result"], 19);
}

#[tokio::test]
async fn id_30_digit_integer_is_echoed_exactly() {
    let s = TestServer::start().await;
    let raw = "123456789012345678901234567890";
    let a = s.post(subtract_with_raw_id(raw)).await;
    assert_eq!(a.status, 200);
    assert_raw_id(&a.body, raw);
    assert_eq!(a.json()["result"], 19);
}

#[tokio::test]
async fn id_negative_zero_is_echoed_as_minus_0() {
    let s = TestServer::start().await;
    let a = s.post(subtract_with_raw_id("-0")).await;
    assert_raw_id(&a.body, "-0");
    assert_eq!(a.json()["result"], 19);
}

#[tokio::test]
async fn id_exponent_1e3_is_echoed_as_1e3() {
    let s = TestServer::start().await;
    let a = s.post(subtract_with_raw_id("1e3")).await;
    assert_raw_id(&a.body, "1e3");
    assert_eq!(a.json()["result"], 19);
}

#[tokio::test]
async fn id_other_number_spellings_are_echoed_exactly() {
    let s = TestServer::start().await;
    for raw in ["-98765432109876543210987654321", "1.50", "2E-7", "0.1e+10", "1e400"] {
        let a = s.post(subtract_with_raw_id(raw)).await;
        assert_eq!(a.status, 200, "id {raw}: {}", a.body);
        assert_raw_id(&a.body, raw);
        // `1e400` is out of f64 range, so serde_json on this side cannot parse the answer:
        // check the result in the raw text too.
        assert!(a.body.contains(r#""result":19"#), "id {raw}: {}", a.body);
    }
}

#[tokio::test]
async fn id_string_with_unicode_escape_keeps_its_escape() {
    let s = TestServer::start().await;
    let raw = r#""a\u0062""#;
    let a = s.post(subtract_with_raw_id(raw)).await;
    assert!(a.body.contains(r#""id":"a\u0062"}"#), "raw response: {}", a.body);
    assert_eq!(a.json()["result"], 19);
}

#[tokio::test]
async fn id_strings_with_other_escapes_are_echoed_byte_for_byte() {
    let s = TestServer::start().await;
    for raw in [
        r#""\ud83d\ude00""#,
        r#""tab\there\nnewline""#,
        r#""quote\" back\\ slash\/""#,
        r#""\u00e9 and é""#,
        r#""\b\f\r""#,
        r#""""#,
    ] {
        let a = s.post(subtract_with_raw_id(raw)).await;
        assert_eq!(a.status, 200, "id {raw}: {}", a.body);
        assert_raw_id(&a.body, raw);
        assert_eq!(a.json()["result"], 19, "id {raw}");
    }
}

#[tokio::test]
async fn ids_in_a_batch_are_echoed_byte_for_byte() {
    let s = TestServer::start().await;
    let body = format!(
        "[{},{},{}]",
        subtract_with_raw_id("1.0"),
        subtract_with_raw_id(r#""a\u0062""#),
        subtract_with_raw_id("123456789012345678901234567890")
    );
    let a = s.post(body).await;
    assert_eq!(a.status, 200);
    let expected = r#"[{"jsonrpc":"2.0","result":19,"id":1.0},{"jsonrpc":"2.0","result":19,"id":"a\u0062"},{"jsonrpc":"2.0","result":19,"id":123456789012345678901234567890}]"#;
    // Member order and spacing are not part of the rule; the id texts are. Compare the ids in
    // the raw text, and the structure as JSON.
    assert_raw_id(&a.body, "1.0");
    assert_raw_id(&a.body, r#""a\u0062""#);
    assert_raw_id(&a.body, "123456789012345678901234567890");
    let pos = |needle: &str| a.body.find(needle).unwrap_or_else(|| panic!("{needle} in {}", a.body));
    assert!(pos(r#""id":1.0"#) < pos(r#""id":"a\u0062""#), "order: {}", a.body);
    assert!(pos(r#""id":"a\u0062""#) < pos(r#""id":1234567890"#), "order: {}", a.body);
    assert_eq!(a.json(), serde_json::from_str::<Value>(expected).unwrap());
}

/// A replayed command (SPEC §3 returns the stored outcome) still answers with the id of the
/// request being answered, byte for byte — not the id of the first execution.
#[tokio::test]
async fn replayed_command_echoes_the_new_requests_id_byte_for_byte() {
    let s = TestServer::start().await;
    let body = |id: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","method":"counter.increment","params":{{"by":1,"idempotency_key":"replay-key-1"}},"id":{id}}}"#
        )
    };
    let first = s.post(body("1.0")).await;
    assert_raw_id(&first.body, "1.0");
    assert_eq!(first.json()["result"]["total"], 1);
    let second = s.post(body(r#""a\u0062""#)).await;
    assert_raw_id(&second.body, r#""a\u0062""#);
    assert_eq!(second.json()["result"]["total"], 1, "replayed, not re-executed: {}", second.body);
    assert_counter(&s, 1).await;
}

#[tokio::test]
async fn id_null_is_a_request_answered_with_id_null() {
    let s = TestServer::start().await;
    let a = s.post(subtract_with_raw_id("null")).await;
    assert_eq!(a.status, 200, "\"id\": null is a request, not a notification");
    assert!(a.body.contains(r#""id":null}"#), "raw response: {}", a.body);
    let v = a.json();
    assert_eq!(v["result"], 19);
    assert!(v.get("error").is_none());
}

#[tokio::test]
async fn id_object_is_invalid_request_with_id_null() {
    let s = TestServer::start().await;
    let a = s.post(r#"{"jsonrpc":"2.0","method":"counter.increment","params":{"by":1},"id":{"a":1}}"#).await;
    assert_error_answer(&a, -32600, &Value::Null);
    assert_counter(&s, 0).await;
}

#[tokio::test]
async fn id_array_is_invalid_request_with_id_null() {
    let s = TestServer::start().await;
    let a = s.post(r#"{"jsonrpc":"2.0","method":"counter.increment","params":{"by":1},"id":[1]}"#).await;
    assert_error_answer(&a, -32600, &Value::Null);
    assert_counter(&s, 0).await;
}

#[tokio::test]
async fn id_boolean_is_invalid_request_with_id_null() {
    let s = TestServer::start().await;
    for raw in ["true", "false"] {
        let a = s
            .post(format!(
                r#"{{"jsonrpc":"2.0","method":"counter.increment","params":{{"by":1}},"id":{raw}}}"#
            ))
            .await;
        assert_error_answer(&a, -32600, &Value::Null);
    }
    assert_counter(&s, 0).await;
}

// ---------------------------------------------------------------------------------------------
// §1 request shape

#[tokio::test]
async fn jsonrpc_member_missing_is_invalid_request() {
    let s = TestServer::start().await;
    let a = s.post(r#"{"method":"counter.increment","params":{"by":1},"id":1}"#).await;
    assert_error_answer(&a, -32600, &json!(1));
    assert_counter(&s, 0).await;
}

#[tokio::test]
async fn jsonrpc_1_0_is_invalid_request() {
    let s = TestServer::start().await;
    let a = s.post(r#"{"jsonrpc":"1.0","method":"counter.increment","params":{"by":1},"id":1}"#).await;
    assert_error_answer(&a, -32600, &json!(1));
    assert_counter(&s, 0).await;
}

#[tokio::test]
async fn jsonrpc_2_0_as_a_number_is_invalid_request() {
    let s = TestServer::start().await;
    let a = s.post(r#"{"jsonrpc":2.0,"method":"counter.increment","params":{"by":1},"id":1}"#).await;
    assert_error_answer(&a, -32600, &json!(1));
    assert_counter(&s, 0).await;
}

#[tokio::test]
async fn jsonrpc_must_be_exactly_2_0() {
    let s = TestServer::start().await;
    for raw in [r#""2.0 ""#, r#""2""#, r#""2.00""#, "null", r#"["2.0"]"#] {
        let a = s.post(format!(r#"{{"jsonrpc":{raw},"method":"subtract","params":[42,23],"id":1}}"#)).await;
        assert_error_answer(&a, -32600, &json!(1));
    }
}

#[tokio::test]
async fn method_not_a_string_is_invalid_request() {
    let s = TestServer::start().await;
    for raw in ["1", "null", r#"["subtract"]"#, r#"{"name":"subtract"}"#, "true"] {
        let a = s.post(format!(r#"{{"jsonrpc":"2.0","method":{raw},"params":[42,23],"id":"m"}}"#)).await;
        assert_error_answer(&a, -32600, &json!("m"));
    }
}

#[tokio::test]
async fn method_missing_is_invalid_request() {
    let s = TestServer::start().await;
    let a = s.post(r#"{"jsonrpc":"2.0","params":[42,23],"id":5}"#).await;
    assert_error_answer(&a, -32600, &json!(5));
}

#[tokio::test]
async fn params_string_number_null_are_invalid_request() {
    let s = TestServer::start().await;
    for raw in [r#""bar""#, "42", "null", "true"] {
        let a = s
            .post(format!(r#"{{"jsonrpc":"2.0","method":"counter.increment","params":{raw},"id":7}}"#))
            .await;
        assert_error_answer(&a, -32600, &json!(7));
    }
    assert_counter(&s, 0).await;
}

#[tokio::test]
async fn params_object_and_array_are_accepted() {
    let s = TestServer::start().await;
    let by_name = s
        .call(json!({"jsonrpc":"2.0","method":"subtract","params":{"minuend":5,"subtrahend":2},"id":1}))
        .await;
    assert_eq!(by_name["result"], 3);
    let by_position = s.call(json!({"jsonrpc":"2.0","method":"subtract","params":[5,2],"id":2})).await;
    assert_eq!(by_position["result"], 3);
}

#[tokio::test]
async fn duplicate_id_member_is_invalid_request_with_id_null() {
    let s = TestServer::start().await;
    let a = s.post(r#"{"jsonrpc":"2.0","method":"counter.increment","params":{"by":1},"id":1,"id":2}"#).await;
    assert_error_answer(&a, -32600, &Value::Null);
    assert_counter(&s, 0).await;
}

#[tokio::test]
async fn duplicate_method_member_is_invalid_request_with_id_echoed() {
    let s = TestServer::start().await;
    let a = s
        .post(r#"{"jsonrpc":"2.0","method":"sum","method":"counter.increment","params":{"by":1},"id":1}"#)
        .await;
    assert_error_answer(&a, -32600, &json!(1));
    assert_counter(&s, 0).await;
}

#[tokio::test]
async fn duplicate_other_members_are_invalid_request() {
    let s = TestServer::start().await;
    let cases = [
        r#"{"jsonrpc":"2.0","jsonrpc":"2.0","method":"subtract","params":[42,23],"id":1}"#,
        r#"{"jsonrpc":"2.0","method":"subtract","params":[42,23],"params":[1,1],"id":1}"#,
        r#"{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":1,"x":1,"x":2}"#,
    ];
    for body in cases {
        let a = s.post(body).await;
        assert_error_answer(&a, -32600, &json!(1));
    }
}

#[tokio::test]
async fn top_level_scalars_are_invalid_request_with_id_null() {
    let s = TestServer::start().await;
    for body in ["1", r#""subtract""#, "null", "true"] {
        let a = s.post(body).await;
        assert_error_answer(&a, -32600, &Value::Null);
    }
}

// ---------------------------------------------------------------------------------------------
// §1 parse errors

#[tokio::test]
async fn invalid_utf8_is_parse_error_with_id_null() {
    let s = TestServer::start().await;
    let bodies: [&[u8]; 3] = [
        b"{\"jsonrpc\":\"2.0\",\"method\":\"subtract\",\"params\":[42,23],\"id\":\"\xff\"}",
        b"{\"jsonrpc\":\"2.0\",\"method\":\"sub\xc3\x28tract\",\"params\":[42,23],\"id\":1}",
        b"[{\"jsonrpc\":\"2.0\",\"method\":\"subtract\",\"params\":[42,23],\"id\":1,\"\xc0\xaf\":1}]",
    ];
    for body in bodies {
        let a = s.post(body.to_vec()).await;
        assert_error_answer(&a, -32700, &Value::Null);
    }
}

#[tokio::test]
async fn trailing_garbage_after_json_is_parse_error() {
    let s = TestServer::start().await;
    let good = r#"{"jsonrpc":"2.0","method":"counter.increment","params":{"by":1},"id":1}"#;
    for suffix in [" x", "}", "]", ",", good] {
        let a = s.post(format!("{good}{suffix}")).await;
        assert_error_answer(&a, -32700, &Value::Null);
    }
    assert_counter(&s, 0).await;
    // Trailing whitespace is not garbage.
    let a = s.post(format!("{good} \n\t\r\n")).await;
    assert_eq!(a.json()["result"]["total"], 1, "{}", a.body);
}

#[tokio::test]
async fn invalid_json_is_parse_error_with_id_null() {
    let s = TestServer::start().await;
    for body in [
        "",
        "{",
        r#"{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":1"#,
        r#"{'jsonrpc':'2.0'}"#,
        r#"{"jsonrpc":"2.0","method":"subtract","params":[42,23,],"id":1}"#,
    ] {
        let a = s.post(body).await;
        assert_error_answer(&a, -32700, &Value::Null);
    }
}

#[tokio::test]
async fn nesting_200000_deep_in_params_is_parse_error_and_server_keeps_serving() {
    let s = TestServer::start().await;
    let depth = 200_000;
    let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let body = format!(r#"{{"jsonrpc":"2.0","method":"sum","params":{nested},"id":1}}"#);
    let a = s.post(body).await;
    assert_error_answer(&a, -32700, &Value::Null);
    assert_still_serving(&s).await;
}

#[tokio::test]
async fn nesting_200000_deep_top_level_array_is_parse_error() {
    let s = TestServer::start().await;
    let depth = 200_000;
    let a = s.post(format!("{}{}", "[".repeat(depth), "]".repeat(depth))).await;
    assert_error_answer(&a, -32700, &Value::Null);
    assert_still_serving(&s).await;
}

#[tokio::test]
async fn nesting_200000_deep_in_id_or_unknown_member_is_parse_error() {
    let s = TestServer::start().await;
    let depth = 200_000;
    let arrays = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    // 100,000 objects deep is already 600 kB: it stays under the 1 MiB body limit.
    let objects = format!("{}1{}", r#"{"a":"#.repeat(depth / 2), "}".repeat(depth / 2));
    for body in [
        format!(r#"{{"jsonrpc":"2.0","method":"sum","params":[1],"id":{arrays}}}"#),
        format!(r#"{{"jsonrpc":"2.0","method":"sum","params":[1],"extra":{objects},"id":1}}"#),
        format!(r#"[{{"jsonrpc":"2.0","method":"sum","params":{objects},"id":1}}]"#),
    ] {
        let a = s.post(body).await;
        assert_error_answer(&a, -32700, &Value::Null);
    }
    assert_still_serving(&s).await;
}

// ---------------------------------------------------------------------------------------------
// §1 batches

#[tokio::test]
async fn empty_batch_is_one_invalid_request_object_not_an_array() {
    let s = TestServer::start().await;
    let a = s.post("[]").await;
    assert_error_answer(&a, -32600, &Value::Null);
    assert!(a.body.trim_start().starts_with('{'), "not an array: {}", a.body);
}

#[tokio::test]
async fn batch_of_non_objects_gives_one_invalid_request_per_entry() {
    let s = TestServer::start().await;
    let a = s.post("[1,2,3]").await;
    assert_eq!(a.status, 200);
    let v = a.json();
    let items = v.as_array().unwrap_or_else(|| panic!("an array: {v}"));
    assert_eq!(items.len(), 3, "{v}");
    for item in items {
        assert_error(item, -32600, &Value::Null);
    }
}

#[tokio::test]
async fn batch_entries_are_judged_each_on_its_own() {
    let s = TestServer::start().await;
    let a = s
        .post(
            r#"[
            {"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":1},
            "x",
            {"jsonrpc":"2.0","method":"subtract","params":[1,1],"id":2,"id":3},
            [1],
            {"jsonrpc":"1.0","method":"subtract","params":[42,23],"id":4},
            {"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":{"x":1}},
            {"jsonrpc":"2.0","method":"nope","id":5},
            {"jsonrpc":"2.0","method":"subtract","params":[10,3],"id":6}
        ]"#,
        )
        .await;
    let v = a.json();
    let items = v.as_array().unwrap_or_else(|| panic!("an array: {v}"));
    assert_eq!(items.len(), 8, "{v}");
    assert_eq!(items[0]["result"], 19);
    assert_eq!(items[0]["id"], 1);
    assert_error(&items[1], -32600, &Value::Null);
    assert_error(&items[2], -32600, &Value::Null);
    assert_error(&items[3], -32600, &Value::Null);
    assert_error(&items[4], -32600, &json!(4));
    assert_error(&items[5], -32600, &Value::Null);
    assert_error(&items[6], -32601, &json!(5));
    assert_eq!(items[7]["result"], 7);
    assert_eq!(items[7]["id"], 6);
}

fn increments(n: usize) -> String {
    let entries: Vec<String> = (1..=n)
        .map(|i| format!(r#"{{"jsonrpc":"2.0","method":"counter.increment","params":{{"by":1}},"id":{i}}}"#))
        .collect();
    format!("[{}]", entries.join(","))
}

#[tokio::test]
async fn batch_over_max_size_answers_every_readable_id_with_an_error_and_nothing_runs() {
    let mut cfg = test_config();
    cfg.batch.max_size = 3;
    let s = TestServer::start_with(cfg).await;
    let a = s.post(increments(5)).await;
    assert_eq!(a.status, 200, "{}", a.body);
    let v = a.json();
    let items = v.as_array().unwrap_or_else(|| panic!("an array, one error per id: {v}"));
    assert_eq!(items.len(), 5, "{v}");
    for (i, item) in items.iter().enumerate() {
        assert_error(item, -32600, &json!(i + 1));
        let message = item["error"]["message"].as_str().unwrap();
        assert!(message.contains("limit is 3"), "the message names the limit: {message:?}");
    }
    assert_counter(&s, 0).await;

    // Ids are echoed as sent; notifications and entries without a readable id get no slot.
    let mixed = r#"[{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":"a\u0062"},
        {"jsonrpc":"2.0","method":"sum","params":[1,2]},
        7,
        {"jsonrpc":"2.0","method":"sum","id":1.0},
        {"jsonrpc":"2.0","method":"sum","id":null}]"#;
    let a = s.post(mixed).await;
    assert!(a.body.contains(r#""id":"a\u0062""#) && a.body.contains(r#""id":1.0"#), "{}", a.body);
    let v = a.json();
    let ids: Vec<Value> = v.as_array().unwrap().iter().map(|e| e["id"].clone()).collect();
    assert_eq!(ids, vec![json!("ab"), json!(1.0), Value::Null], "{v}");

    // With no readable id at all: one error, `id: null`.
    let a = s.post(r#"[1,2,3,4]"#).await;
    assert_error_answer(&a, -32600, &Value::Null);
    assert!(a.json()["error"]["message"].as_str().unwrap().contains("limit is 3"), "{}", a.body);

    // Exactly at the limit is accepted and every entry runs.
    let a = s.post(increments(3)).await;
    let v = a.json();
    assert_eq!(v.as_array().map(Vec::len), Some(3), "{v}");
    assert_counter(&s, 3).await;
}

#[tokio::test]
async fn batch_disabled_gives_one_error_batch_requests_not_supported() {
    let mut cfg = test_config();
    cfg.batch.enabled = false;
    let s = TestServer::start_with(cfg).await;
    let a = s.post(increments(2)).await;
    assert_error_answer(&a, -32600, &Value::Null);
    assert_eq!(a.json()["error"]["message"], "Batch requests not supported");
    assert_counter(&s, 0).await;
    // A single request still works.
    let v = s.call(json!({"jsonrpc":"2.0","method":"counter.increment","params":{"by":2},"id":1})).await;
    assert_eq!(v["result"]["total"], 2, "{v}");
}

#[tokio::test]
async fn batch_disabled_also_refuses_the_empty_array_the_same_way() {
    let mut cfg = test_config();
    cfg.batch.enabled = false;
    let s = TestServer::start_with(cfg).await;
    let a = s.post("[1]").await;
    assert_error_answer(&a, -32600, &Value::Null);
    assert_eq!(a.json()["error"]["message"], "Batch requests not supported");
}

#[tokio::test]
async fn batch_of_only_notifications_is_204() {
    let s = TestServer::start().await;
    let a = s
        .post(
            r#"[{"jsonrpc":"2.0","method":"update","params":[1]},
               {"jsonrpc":"2.0","method":"notify_hello","params":[7]},
               {"jsonrpc":"2.0","method":"no.such.method"}]"#,
        )
        .await;
    assert_no_content(&a);
}

#[tokio::test]
async fn batch_notifications_leave_no_slot() {
    let s = TestServer::start().await;
    let a = s
        .post(
            r#"[{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":"a"},
               {"jsonrpc":"2.0","method":"update","params":[1]},
               {"jsonrpc":"2.0","method":"subtract","params":[5,1],"id":"b"}]"#,
        )
        .await;
    let v = a.json();
    assert_eq!(
        v,
        json!([
            {"jsonrpc":"2.0","result":3,"id":"a"},
            {"jsonrpc":"2.0","result":4,"id":"b"}
        ])
    );
}

#[tokio::test]
async fn batch_responses_keep_request_order_when_earlier_entries_finish_last() {
    let s = TestServer::start().await;
    let a = s
        .post(
            r#"[{"jsonrpc":"2.0","method":"demo.sleep","params":{"ms":300},"id":1},
               {"jsonrpc":"2.0","method":"demo.sleep","params":{"ms":10},"id":2},
               {"jsonrpc":"2.0","method":"demo.sleep","params":{"ms":150},"id":3}]"#,
        )
        .await;
    let v = a.json();
    let items = v.as_array().unwrap_or_else(|| panic!("an array: {v}"));
    let ids: Vec<&Value> = items.iter().map(|i| &i["id"]).collect();
    assert_eq!(ids, [&json!(1), &json!(2), &json!(3)], "request order: {v}");
    // Each response is the one of its own entry: the first (slowest) really slept 300 ms.
    let slept: Vec<&Value> = items.iter().map(|i| &i["result"]["slept_ms"]).collect();
    assert_eq!(slept, [&json!(300), &json!(10), &json!(150)], "{v}");
}

#[tokio::test]
async fn batch_is_never_a_way_around_a_check() {
    // Every entry goes through the same policy a single request does.
    let s = TestServer::start().await;
    let a = s
        .post(
            r#"[{"jsonrpc":"2.0","method":"counter.increment","params":{"by":1}},
               {"jsonrpc":"2.0","method":"sum","params":[1,2]},
               {"jsonrpc":"2.0","method":"counter.increment","params":{"by":"x"},"id":1},
               {"jsonrpc":"2.0","method":"counter.increment","params":"x","id":2},
               {"jsonrpc":"2.0","method":"counter.get","id":3}]"#,
        )
        .await;
    let v = a.json();
    let items = v.as_array().unwrap_or_else(|| panic!("an array: {v}"));
    assert_eq!(items.len(), 5, "{v}");
    assert_error(&items[0], -32600, &Value::Null);
    assert_error(&items[1], -32600, &Value::Null);
    assert_error(&items[2], -32602, &json!(1));
    assert_error(&items[3], -32600, &json!(2));
    assert_eq!(items[4]["result"]["total"], 0);
    assert_counter(&s, 0).await;
}

#[tokio::test]
async fn batch_two_commands_with_the_same_idempotency_key_execute_once() {
    let s = TestServer::start().await;
    let a = s
        .post(
            r#"[{"jsonrpc":"2.0","method":"counter.increment","params":{"by":5,"idempotency_key":"same-key-1"},"id":1},
               {"jsonrpc":"2.0","method":"counter.increment","params":{"by":5,"idempotency_key":"same-key-1"},"id":2}]"#,
        )
        .await;
    let v = a.json();
    let items = v.as_array().unwrap_or_else(|| panic!("an array: {v}"));
    assert_eq!(items.len(), 2, "{v}");
    assert_eq!(items[0]["id"], 1);
    assert_eq!(items[1]["id"], 2);
    assert_eq!(items[0]["result"], json!({"total": 5}), "{v}");
    assert_eq!(items[0]["result"], items[1]["result"], "both carry the same outcome: {v}");
    assert_counter(&s, 5).await;
}

#[tokio::test]
async fn responses_never_carry_both_result_and_error() {
    let s = TestServer::start().await;
    let a = s
        .post(
            r#"[{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":1},
               {"jsonrpc":"2.0","method":"nope","id":2},
               {"jsonrpc":"2.0","method":"demo.sleep","params":{"ms":"x"},"id":3},
               {"foo":"boo"},
               {"jsonrpc":"2.0","method":"get_data","id":4},
               {"jsonrpc":"2.0","method":"counter.increment"},
               {"jsonrpc":"2.0","method":"rpc.discover","id":5},
               7]"#,
        )
        .await;
    let v = a.json();
    let items = v.as_array().unwrap_or_else(|| panic!("an array: {v}"));
    assert_eq!(items.len(), 8, "{v}");
    let mut results = 0;
    for item in items {
        assert_eq!(item["jsonrpc"], "2.0", "{item}");
        assert!(item.get("id").is_some(), "every response carries id: {item}");
        let has_result = item.get("result").is_some();
        let has_error = item.get("error").is_some();
        assert!(has_result != has_error, "exactly one of result/error: {item}");
        results += usize::from(has_result);
    }
    assert_eq!(results, 3, "subtract, get_data and rpc.discover succeed: {v}");
}

// ---------------------------------------------------------------------------------------------
// §2 policy

#[tokio::test]
async fn unknown_method_with_id_is_method_not_found() {
    let s = TestServer::start().await;
    let a = s.post(r#"{"jsonrpc":"2.0","method":"no.such.method","params":[1],"id":"q-1"}"#).await;
    assert_error_answer(&a, -32601, &json!("q-1"));
    assert_eq!(a.json()["error"]["message"], "Method not found");
}

#[tokio::test]
async fn unknown_method_notification_is_204() {
    let s = TestServer::start().await;
    let a = s.post(r#"{"jsonrpc":"2.0","method":"no.such.method","params":[1]}"#).await;
    assert_no_content(&a);
}

#[tokio::test]
async fn command_without_id_is_invalid_request_saying_it_requires_an_id() {
    let s = TestServer::start().await;
    let a = s.post(r#"{"jsonrpc":"2.0","method":"counter.increment","params":{"by":1}}"#).await;
    assert_error_answer(&a, -32600, &Value::Null);
    let v = a.json();
    let text = format!("{} {}", v["error"]["message"], v["error"]["data"]);
    assert!(text.contains("requires an id"), "the error says the method requires an id: {v}");
    // An idempotency key does not stand in for the id.
    let a = s
        .post(r#"{"jsonrpc":"2.0","method":"counter.increment","params":{"by":1,"idempotency_key":"no-id-key"}}"#)
        .await;
    assert_error_answer(&a, -32600, &Value::Null);
    assert_counter(&s, 0).await;
}

#[tokio::test]
async fn notification_to_a_query_that_does_not_allow_it_is_invalid_request() {
    let s = TestServer::start().await;
    let a = s.post(r#"{"jsonrpc":"2.0","method":"sum","params":[1,2,4]}"#).await;
    assert_error_answer(&a, -32600, &Value::Null);
}

#[tokio::test]
async fn refused_notification_does_not_execute() {
    let (s, ticks) = custom_server().await;
    let a = s.post(r#"{"jsonrpc":"2.0","method":"test.peek"}"#).await;
    assert_error_answer(&a, -32600, &Value::Null);
    assert_eq!(ticks.load(Ordering::SeqCst), 0, "checked before anything executes");
    // As a request it runs.
    let v = s.call(json!({"jsonrpc":"2.0","method":"test.peek","id":1})).await;
    assert_eq!(v["result"], 1, "{v}");
}

#[tokio::test]
async fn allowed_notification_is_204_with_empty_body() {
    let s = TestServer::start().await;
    let a = s.post(r#"{"jsonrpc":"2.0","method":"update","params":[1,2,3,4,5]}"#).await;
    assert_no_content(&a);
}

#[tokio::test]
async fn allowed_notification_is_executed() {
    let (s, ticks) = custom_server().await;
    let a = s.post(r#"{"jsonrpc":"2.0","method":"test.tick"}"#).await;
    assert_no_content(&a);
    // SPEC does not say whether the 204 waits for the execution: poll (bounded) for it.
    for _ in 0..500 {
        if ticks.load(Ordering::SeqCst) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(ticks.load(Ordering::SeqCst), 1, "the notification ran exactly once");
}

#[tokio::test]
async fn failing_allowed_notification_is_never_answered() {
    let s = TestServer::start().await;
    // `notify_sum` allows notifications; these params make it fail.
    let a = s.post(r#"{"jsonrpc":"2.0","method":"notify_sum","params":["x"]}"#).await;
    assert_no_content(&a);
    assert_still_serving(&s).await;
}

#[tokio::test]
async fn typed_params_failure_is_invalid_params_naming_the_field() {
    let s = TestServer::start().await;
    let a = s.post(r#"{"jsonrpc":"2.0","method":"demo.sleep","params":{"ms":"x"},"id":1}"#).await;
    assert_error_answer(&a, -32602, &json!(1));
    let message = a.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(message.contains("ms"), "the message names the field: {message:?}");
}

#[tokio::test]
async fn schema_failure_is_invalid_params_with_the_failing_path() {
    let s = TestServer::start().await;
    let a = s.post(r#"{"jsonrpc":"2.0","method":"counter.increment","params":{"by":"x"},"id":1}"#).await;
    assert_error_answer(&a, -32602, &json!(1));
    assert_eq!(a.json()["error"]["data"]["path"], "/by", "{}", a.body);
    assert_counter(&s, 0).await;
}

#[tokio::test]
async fn rpc_discover_returns_an_openrpc_document_from_the_registry() {
    let s = TestServer::start().await;
    let v = s.call(json!({"jsonrpc":"2.0","method":"rpc.discover","id":1})).await;
    assert_eq!(v["id"], 1);
    let doc = &v["result"];
    let version = doc["openrpc"].as_str().unwrap_or_else(|| panic!("openrpc version: {doc}"));
    assert!(version.starts_with("1."), "OpenRPC 1.x: {version}");
    let methods = doc["methods"].as_array().unwrap_or_else(|| panic!("methods: {doc}"));
    let find = |name: &str| {
        methods.iter().find(|m| m["name"] == name).unwrap_or_else(|| panic!("{name} listed in {doc}"))
    };
    assert_eq!(find("counter.increment")["x-kind"], "command");
    assert_eq!(find("counter.increment")["x-notification-allowed"], false);
    assert_eq!(find("counter.get")["x-kind"], "query");
    assert_eq!(find("update")["x-notification-allowed"], true);
    assert_eq!(find("sum")["x-notification-allowed"], false);
    for name in
        ["subtract", "sum", "add", "get_data", "notify_hello", "notify_sum", "demo.sleep", "demo.flaky"]
    {
        find(name);
    }
}

#[tokio::test]
async fn demo_add_takes_an_object_and_checks_its_schema() {
    let s = TestServer::start().await;
    let v = s.call(json!({"jsonrpc":"2.0","method":"add","params":{"a":1,"b":2},"id":1})).await;
    assert_eq!(v["result"], 3, "{v}");
    let v = s.call(json!({"jsonrpc":"2.0","method":"add","params":{"a":1.5,"b":2},"id":2})).await;
    assert_eq!(v["result"], 3.5, "{v}");
    let v = s.call(json!({"jsonrpc":"2.0","method":"add","params":{"a":1},"id":3})).await;
    assert_eq!(v["error"]["code"], -32602, "b is required: {v}");
}

#[tokio::test]
async fn rpc_discover_as_a_notification_is_refused_like_any_query() {
    let s = TestServer::start().await;
    let a = s.post(r#"{"jsonrpc":"2.0","method":"rpc.discover"}"#).await;
    assert_error_answer(&a, -32600, &Value::Null);
}

#[tokio::test]
async fn get_openrpc_json_returns_the_same_document() {
    let s = TestServer::start().await;
    let v = s.call(json!({"jsonrpc":"2.0","method":"rpc.discover","id":1})).await;
    let a = s.get("/openrpc.json").await;
    assert_eq!(a.status, 200);
    assert_eq!(a.json(), v["result"]);
}

#[tokio::test]
async fn get_healthz_is_200() {
    let s = TestServer::start().await;
    let a = s.get("/healthz").await;
    assert_eq!(a.status, 200, "{}", a.body);
}

// ---------------------------------------------------------------------------------------------
// §4 body limit

#[tokio::test]
async fn body_over_the_limit_is_413_with_a_json_rpc_invalid_request() {
    let s = TestServer::start().await;
    let pad = "x".repeat(2 * 1024 * 1024);
    let body =
        format!(r#"{{"jsonrpc":"2.0","method":"counter.increment","params":{{"pad":"{pad}"}},"id":1}}"#);
    let a = s.post(body).await;
    assert_eq!(a.status, 413, "{}", a.body);
    assert_error(&a.json(), -32600, &Value::Null);
    assert_counter(&s, 0).await;
}

/// A body over the limit sent without `Content-Length` (chunked) is refused as well: the limit
/// is enforced on the bytes read, not only on what the client announces.
#[tokio::test]
async fn chunked_body_over_the_limit_is_413_with_a_json_rpc_invalid_request() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = TestServer::start().await;
    let stream = tokio::net::TcpStream::connect(s.addr).await.expect("connect");
    let (mut rd, mut wr) = stream.into_split();
    // Write in the background: the server may answer (and stop reading) before the end.
    let writer = tokio::spawn(async move {
        let head = "POST /rpc HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
        wr.write_all(head.as_bytes()).await?;
        let prefix = r#"{"jsonrpc":"2.0","method":"counter.increment","params":{"pad":""#;
        wr.write_all(format!("{:x}\r\n{prefix}\r\n", prefix.len()).as_bytes()).await?;
        let chunk = "x".repeat(64 * 1024);
        for _ in 0..32 {
            wr.write_all(format!("{:x}\r\n{chunk}\r\n", chunk.len()).as_bytes()).await?;
        }
        let suffix = r#""},"id":1}"#;
        wr.write_all(format!("{:x}\r\n{suffix}\r\n0\r\n\r\n", suffix.len()).as_bytes()).await?;
        Ok::<_, std::io::Error>(wr)
    });
    let mut response = Vec::new();
    let _ = rd.read_to_end(&mut response).await;
    let _ = writer.await;
    let text = String::from_utf8_lossy(&response);
    assert!(text.starts_with("HTTP/1.1 413"), "response: {text}");
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or_default();
    let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("JSON-RPC body ({e}): {text}"));
    assert_error(&v, -32600, &Value::Null);
    assert_counter(&s, 0).await;
}

// ---------------------------------------------------------------------------------------------
// §7 correlation id

#[tokio::test]
async fn correlation_id_is_generated_for_a_413() {
    let s = TestServer::start().await;
    let a = s.post(vec![b' '; 2 * 1024 * 1024]).await;
    assert_eq!(a.status, 413);
    assert!(a.header("x-correlation-id").is_some_and(|c| !c.trim().is_empty()), "{:?}", a.headers);
}

#[tokio::test]
async fn correlation_id_is_the_string_id() {
    let s = TestServer::start().await;
    let a = s.post(r#"{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":"abc-1"}"#).await;
    assert_eq!(a.header("x-correlation-id"), Some("abc-1"));
}

#[tokio::test]
async fn correlation_id_is_the_number_id_text() {
    let s = TestServer::start().await;
    let a = s.post(r#"{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":7}"#).await;
    assert_eq!(a.header("x-correlation-id"), Some("7"));
}

#[tokio::test]
async fn correlation_id_is_generated_for_a_notification_only_batch() {
    let s = TestServer::start().await;
    let body = r#"[{"jsonrpc":"2.0","method":"update"},{"jsonrpc":"2.0","method":"notify_hello"}]"#;
    let a = s.post(body).await;
    assert_no_content(&a);
    let first = a.header("x-correlation-id").map(str::to_owned);
    assert!(first.as_deref().is_some_and(|c| !c.trim().is_empty()), "generated: {first:?}");
    let b = s.post(body).await;
    let second = b.header("x-correlation-id").map(str::to_owned);
    assert!(second.as_deref().is_some_and(|c| !c.trim().is_empty()), "generated: {second:?}");
    assert_ne!(first, second, "a fresh id per request");
}

#[tokio::test]
async fn correlation_id_is_generated_for_a_single_notification() {
    let s = TestServer::start().await;
    let a = s.post(r#"{"jsonrpc":"2.0","method":"update"}"#).await;
    assert_no_content(&a);
    assert!(a.header("x-correlation-id").is_some_and(|c| !c.trim().is_empty()), "{:?}", a.headers);
}

#[tokio::test]
async fn correlation_id_is_generated_for_an_error_without_id() {
    let s = TestServer::start().await;
    let a = s.post(r#"{"jsonrpc":"2.0","method":"counter.increment"}"#).await;
    assert_error_answer(&a, -32600, &Value::Null);
    let cid = a.header("x-correlation-id").map(str::to_owned);
    assert!(cid.as_deref().is_some_and(|c| !c.trim().is_empty() && c != "null"), "generated: {cid:?}");
    let p = s.post("{").await;
    assert_error_answer(&p, -32700, &Value::Null);
    let pid = p.header("x-correlation-id").map(str::to_owned);
    assert!(pid.as_deref().is_some_and(|c| !c.trim().is_empty() && c != "null"), "generated: {pid:?}");
    assert_ne!(cid, pid);
}

// ---------------------------------------------------------------------------------------------
// handler isolation: panics and deadlines

#[tokio::test]
async fn handler_panic_is_internal_error_and_the_server_keeps_serving() {
    let (s, _) = custom_server().await;
    let a = s.post(r#"{"jsonrpc":"2.0","method":"test.boom","id":1}"#).await;
    assert_error_answer(&a, -32603, &json!(1));
    let v = s.call(json!({"jsonrpc":"2.0","method":"test.ping","id":2})).await;
    assert_eq!(v["result"], "pong", "{v}");
    // Inside a batch, the panic costs only its own entry.
    let v = s
        .call(json!([
            {"jsonrpc":"2.0","method":"test.boom","id":"a"},
            {"jsonrpc":"2.0","method":"test.ping","id":"b"}
        ]))
        .await;
    assert_error(&v[0], -32603, &json!("a"));
    assert_eq!(v[1]["result"], "pong", "{v}");
    assert_still_serving(&s).await;
}

#[tokio::test]
async fn handler_over_its_timeout_is_minus_32005_and_the_next_request_answers() {
    let (s, _) = custom_server().await;
    let a = s.post(r#"{"jsonrpc":"2.0","method":"test.slow","id":"t"}"#).await;
    assert_error_answer(&a, -32005, &json!("t"));
    let v = s.call(json!({"jsonrpc":"2.0","method":"test.ping","id":2})).await;
    assert_eq!(v["result"], "pong", "{v}");
}
