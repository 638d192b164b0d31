//! `[[openapi]]` (SPEC §21): an OpenAPI document's operations as methods, tools and flows.
//!
//! Against Prism (a real OpenAPI mock server that validates every request against the
//! document, `--errors`): every operation is a tool with its schema, and a call through
//! `/rpc`, the flows door and MCP reaches Prism as a request the document allows (a request
//! Prism refuses comes back as an error and fails the test). Against the tests' own upstream
//! (which counts): the charge, retried with one key, reaches the upstream once; a 5xx is
//! retried with the same `Idempotency-Key`; a 4xx is a stored failure, never re-sent.
//! Outside CI a missing Prism skips the Prism test with a printed reason; in CI it fails.

mod common;

use common::prism::{Prism, fixture};
use common::upstream::Upstream;
use common::{TestServer, test_config};
use oncerpc::config::ConfigError;
use oncerpc_flows::openapi::OpenApiConfig;
use serde_json::{Value, json};

fn shop(base_url: &str, more: &str) -> OpenApiConfig {
    toml::from_str(&format!(
        "name = \"shop\"\nspec = {:?}\nbase_url = {base_url:?}\n{more}",
        fixture("shop.yaml").display().to_string()
    ))
    .unwrap()
}

async fn server(doc: OpenApiConfig) -> TestServer {
    let mut cfg = test_config();
    cfg.openapi.push(doc);
    TestServer::start_with(cfg).await
}

/// Open an MCP session (`2025-11-25`) and send `body` in it.
async fn mcp(srv: &TestServer, session: &mut Option<String>, body: Value) -> Value {
    let accept = [("content-type", "application/json"), ("accept", "application/json, text/event-stream")];
    if session.is_none() {
        let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25",
            "capabilities":{},"clientInfo":{"name":"t","version":"1"}}});
        let a = srv.post_path("/mcp", init.to_string(), &accept).await;
        *session = Some(a.header("mcp-session-id").expect("a session").to_owned());
    }
    let id = session.clone().unwrap();
    let mut headers = accept.to_vec();
    headers.push(("mcp-session-id", &id));
    let a = srv.post_path("/mcp", body.to_string(), &headers).await;
    assert_eq!(a.status, 200, "{body}: {}", a.body);
    a.json()
}

fn tool<'a>(tools: &'a [Value], name: &str) -> &'a Value {
    tools.iter().find(|t| t["name"] == name).unwrap_or_else(|| panic!("no tool {name}: {tools:?}"))
}

#[tokio::test]
async fn every_operation_is_a_tool_and_prism_accepts_every_call_from_every_door() {
    let Some(prism) = Prism::start(&fixture("shop.yaml")).await else { return };
    // Prism validates: a request the document does not allow is refused, not mocked.
    let refused = common::http_client()
        .post(format!("{}/charges", prism.url()))
        .header("content-type", "application/json")
        .body(r#"{"price":{"amount":0,"currency":"EUR"},"source":"tok"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 422, "Prism runs with --errors");

    let srv = server(shop(&prism.url(), "")).await;
    let mut session = None;
    let listed = mcp(&srv, &mut session, json!({"jsonrpc":"2.0","id":1,"method":"tools/list"})).await;
    let tools = listed["result"]["tools"].as_array().expect("tools").clone();
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    for name in ["shop_listProducts", "shop_getProduct", "shop_createCharge"] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    // Path parameters from a $ref'd parameter of the path item, a header parameter, required.
    let get = tool(&tools, "shop_getProduct");
    let schema = &get["inputSchema"];
    assert_eq!(schema["properties"]["productId"]["pattern"], "^p-[0-9]+$", "{schema}");
    assert_eq!(schema["properties"]["X-Shop-Locale"]["enum"], json!(["en", "fr"]), "{schema}");
    let required: Vec<&str> =
        schema["required"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(required.contains(&"productId") && required.contains(&"X-Shop-Locale"), "{schema}");
    let description = get["description"].as_str().unwrap();
    assert!(
        description.starts_with("Get one product") && description.contains("GET /products/{productId}"),
        "{description}"
    );
    // The body's $refs inlined; the key header is oncerpc's to send, not the caller's.
    let charge = &tool(&tools, "shop_createCharge")["inputSchema"];
    assert_eq!(
        charge["properties"]["body"]["properties"]["price"]["properties"]["currency"]["enum"],
        json!(["EUR", "USD"]),
        "{charge}"
    );
    assert!(charge["properties"].get("Idempotency-Key").is_none(), "{charge}");
    assert!(charge["required"].as_array().unwrap().contains(&json!("body")), "{charge}");
    let list = &tool(&tools, "shop_listProducts")["inputSchema"];
    assert_eq!(list["properties"]["tag"]["type"], "array", "{list}");
    assert!(tool(&tools, "shop_listProducts")["annotations"]["readOnlyHint"] != json!(false));

    // Every operation through every door; Prism refuses (422/400) whatever breaks the document,
    // and a refusal is an error here. Each result is checked for the operation's own shape.
    let calls = [
        ("shop.getProduct", json!({"productId": "p-7", "X-Shop-Locale": "fr"})),
        ("shop.listProducts", json!({"limit": 2, "tag": ["lamp", "desk"]})),
        (
            "shop.createCharge",
            json!({"body": {"price": {"amount": 1200, "currency": "EUR"}, "source": "tok_visa", "note": "a b&c"}}),
        ),
    ];
    let shaped = |method: &str, result: &Value| match method {
        "shop.getProduct" => result["name"].is_string(),
        "shop.listProducts" => result.as_array().is_some_and(|a| a[0]["id"].is_string()),
        _ => result["status"] == "succeeded",
    };
    for (n, (method, args)) in calls.iter().enumerate() {
        let command = *method == "shop.createCharge";
        let key = |door: &str| format!("order-{door}-{n}");
        // /rpc: the key, for the command, in the params.
        let mut params = args.clone();
        if command {
            params["idempotency_key"] = json!(key("rpc"));
        }
        let got = srv.call(json!({"jsonrpc":"2.0","id":n,"method":method,"params":params})).await;
        assert!(shaped(method, &got["result"]), "/rpc {method}: {got}");
        // The flows door: the key in Idempotency-Key.
        let k = key("flows");
        let headers: Vec<(&str, &str)> = if command { vec![("Idempotency-Key", &k)] } else { vec![] };
        let answer =
            srv.post_path(&format!("/v2/flows/{method}?sync=true"), args.to_string(), &headers).await;
        assert_eq!(answer.status, 200, "flows door {method}: {}", answer.body);
        assert!(shaped(method, &answer.json()), "flows door {method}: {}", answer.body);
        // MCP: the key in _meta.
        let mut params = json!({"name": method.replace('.', "_"), "arguments": args});
        if command {
            params["_meta"] = json!({"io.oncerpc/idempotency-key": key("mcp")});
        }
        let called =
            mcp(&srv, &mut session, json!({"jsonrpc":"2.0","id":n,"method":"tools/call","params":params}))
                .await;
        assert_eq!(called["result"]["isError"], false, "MCP {method}: {called}");
        let structured = &called["result"]["structuredContent"];
        let result = if structured["result"].is_null() { structured } else { &structured["result"] };
        assert!(shaped(method, result), "MCP {method}: {called}");
    }
    srv.stop().await;
}

/// Prism answers a declared `402` when asked (`Prefer: code=402`, sent as a configured
/// header): the API's own answer reaches the caller under `data`, and is the stored outcome.
#[tokio::test]
async fn a_4xx_is_the_apis_answer_under_data_and_the_stored_outcome() {
    let Some(prism) = Prism::start(&fixture("shop.yaml")).await else { return };
    let srv = server(shop(&prism.url(), "headers = { Prefer = \"code=402\" }")).await;
    let body =
        json!({"jsonrpc":"2.0","id":1,"method":"shop.createCharge","params":{"idempotency_key":"k-declined",
        "body":{"price":{"amount":5,"currency":"EUR"},"source":"tok"}}})
        .to_string();
    let first = srv.post(body.clone()).await;
    let error = &first.json()["error"];
    assert_eq!(error["code"], -32006, "{}", first.body);
    assert_eq!(error["data"]["status"], 402, "{}", first.body);
    assert!(error["data"]["body"]["title"].is_string(), "the Problem body, as JSON: {}", first.body);
    let message = error["message"].as_str().unwrap();
    assert!(message.starts_with("The API refused the request (HTTP 402): {"), "{message}");
    assert!(message.contains("correct the arguments and use a new idempotency key"), "{message}");
    let again = srv.post(body).await;
    assert_eq!(again.header("x-idempotency-status"), Some("duplicate"), "{}", again.body);
    assert_eq!(again.body, first.body);
    // A model reads the same through MCP: the API's answer and what to do.
    let mut session = None;
    let call = json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"shop_createCharge",
        "arguments":{"body":{"price":{"amount":5,"currency":"EUR"},"source":"tok"}},
        "_meta":{"io.oncerpc/idempotency-key":"k-declined-mcp"}}});
    let answer = mcp(&srv, &mut session, call).await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("HTTP 402") && text.contains("new idempotency key"), "{text}");
    assert_eq!(answer["result"]["structuredContent"]["data"]["status"], 402, "{answer}");
    srv.stop().await;
}

/// The tests' own upstream serves the document's `POST /charges` (as its step `charges`) and
/// counts what reaches it.
fn counted(up: &Upstream, more: &str) -> OpenApiConfig {
    shop(&format!("http://{}", up.addr), &format!("operations = [\"createCharge\"]\n{more}"))
}

fn charge(key: &str) -> String {
    json!({"jsonrpc":"2.0","id":1,"method":"shop.createCharge","params":{"idempotency_key":key,
        "body":{"price":{"amount":700,"currency":"EUR"},"source":"tok_visa"}}})
    .to_string()
}

#[tokio::test]
async fn the_charge_retried_with_one_key_reaches_the_upstream_once_and_a_5xx_is_retried_with_that_key() {
    let up = Upstream::start().await;
    let srv = server(counted(&up, "retry = { attempts = 3, backoff_ms = 1 }")).await;
    up.script("charges", &[(503, None)]);
    let first = srv.post(charge("order-1")).await;
    assert!(first.json()["result"]["input"]["price"]["amount"] == 700, "{}", first.body);
    let calls = up.calls();
    assert_eq!(calls.len(), 2, "one 503, one success: {calls:?}");
    let expected =
        oncerpc_core::idempotency::upstream_key("default", "shop.createCharge", "order-1", "createCharge");
    for c in &calls {
        assert_eq!(c.key.as_deref(), Some(expected.as_str()), "the same Idempotency-Key on every attempt");
        assert_eq!(c.request, "POST /charges");
        assert_eq!(
            c.body,
            json!({"price":{"amount":700,"currency":"EUR"},"source":"tok_visa"}),
            "only the body"
        );
    }
    for _ in 0..3 {
        let again = srv.post(charge("order-1")).await;
        assert_eq!(again.body, first.body);
    }
    assert_eq!(up.count("charges"), 2, "retries with the key are answered from the store");
    srv.stop().await;
}

#[tokio::test]
async fn a_4xx_is_a_stored_failure_never_sent_again() {
    let up = Upstream::start().await;
    let srv = server(counted(&up, "retry = { attempts = 3, backoff_ms = 1 }")).await;
    up.script("charges", &[(409, None)]);
    let first = srv.post(charge("order-2")).await;
    let error = &first.json()["error"];
    assert_eq!(
        (error["code"].as_i64(), error["data"]["status"].as_i64()),
        (Some(-32006), Some(409)),
        "{}",
        first.body
    );
    assert_eq!(error["data"]["body"], "scripted 409", "{}", first.body);
    let again = srv.post(charge("order-2")).await;
    assert_eq!(again.body, first.body);
    assert_eq!(up.count("charges"), 1, "a 4xx is not retried, and its retry is answered from the store");
    srv.stop().await;
}

async fn refused(doc: OpenApiConfig) -> String {
    let mut cfg = test_config();
    cfg.openapi.push(doc);
    match oncerpc::App::new(cfg).await {
        Err(ConfigError::Invalid(e)) => e,
        Err(e) => e.to_string(),
        Ok(_) => panic!("the document was accepted"),
    }
}

fn doc_at(dir: &common::process::TempDir, name: &str, text: &str) -> OpenApiConfig {
    let path = dir.file(name);
    std::fs::write(&path, text).unwrap();
    toml::from_str(&format!(
        "name = \"bad\"\nspec = {:?}\nbase_url = \"http://127.0.0.1:9\"",
        path.display().to_string()
    ))
    .unwrap()
}

#[tokio::test]
async fn bad_documents_are_config_errors_naming_the_document_and_the_place() {
    let dir = common::process::TempDir::new("openapi-bad");
    let missing = refused(toml::from_str("name = \"bad\"\nspec = \"/nonexistent/x.yaml\"").unwrap()).await;
    assert!(missing.contains("openapi \"bad\"") && missing.contains("/nonexistent/x.yaml"), "{missing}");
    let swagger =
        refused(doc_at(&dir, "s.yaml", "swagger: \"2.0\"\ninfo: {title: x, version: \"1\"}\npaths: {}\n"))
            .await;
    assert!(swagger.contains("Swagger 2.0") && swagger.contains("/swagger"), "{swagger}");
    let garbage = refused(doc_at(&dir, "g.yaml", "openapi: [\n")).await;
    assert!(garbage.contains("openapi \"bad\"") && garbage.contains("YAML"), "{garbage}");
    let unknown_ref = refused(doc_at(
        &dir,
        "r.yaml",
        "openapi: 3.0.3\ninfo: {title: x, version: \"1\"}\npaths:\n  /a:\n    post:\n      operationId: a\n      requestBody:\n        content:\n          application/json:\n            schema: {$ref: \"#/components/schemas/Gone\"}\n      responses: {\"200\": {description: ok}}\n",
    ))
    .await;
    assert!(
        unknown_ref.contains("unknown $ref") && unknown_ref.contains("/paths/~1a/post/requestBody"),
        "{unknown_ref}"
    );
    // Two operations without operationId whose derived names are one.
    let clash = refused(doc_at(
        &dir,
        "c.yaml",
        "openapi: 3.1.0\ninfo: {title: x, version: \"1\"}\npaths:\n  /a-b:\n    get: {responses: {\"200\": {description: ok}}}\n  /a_b:\n    get: {responses: {\"200\": {description: ok}}}\n",
    ))
    .await;
    assert!(clash.contains("bad.get_a_b") && clash.contains("operationId"), "{clash}");
}

#[tokio::test]
async fn a_spec_url_down_at_start_is_an_error_in_production_and_absent_methods_in_dev() {
    let down: OpenApiConfig = toml::from_str(
        "name = \"down\"\nspec = \"http://127.0.0.1:9/openapi.yaml\"\nbase_url = \"http://127.0.0.1:9\"",
    )
    .unwrap();
    let mut cfg = test_config();
    cfg.openapi.push(down.clone());
    let app = oncerpc::App::new(cfg).await.expect("dev mode starts without the document");
    assert!(app.dispatcher.registry().names().iter().all(|n| !n.starts_with("down.")));
    let mut cfg = test_config();
    cfg.mode = oncerpc::Mode::Production;
    cfg.openapi.push(down);
    let client = common::http_client();
    let e = oncerpc::openapi::expand(&mut cfg, &client).await.err().expect("production refuses");
    assert!(e.to_string().contains("cannot fetch spec http://127.0.0.1:9/openapi.yaml"), "{e}");
    // A credential in the URL never reaches the error (nor the log).
    let mut cfg = test_config();
    cfg.mode = oncerpc::Mode::Production;
    cfg.openapi.push(
        toml::from_str("name = \"down\"\nspec = \"http://docs:s3cr3t-spec@127.0.0.1:9/openapi.yaml\"\nbase_url = \"http://127.0.0.1:9\"")
            .unwrap(),
    );
    let e = oncerpc::openapi::expand(&mut cfg, &client).await.err().expect("production refuses").to_string();
    assert!(e.contains("cannot fetch spec") && !e.contains("s3cr3t"), "{e}");
}
