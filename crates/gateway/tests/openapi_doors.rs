//! `GET /openapi.json` (SPEC §21): the REST doors as an OpenAPI 3.1 document generated from
//! the registry — every method's `POST /v2/flows/{method}` with its params schema as the body,
//! the events API, the idempotency headers and the error bodies. `@apidevtools/swagger-parser`
//! validates it, and Schemathesis (PyPI) runs its stateless checks against the flows and events
//! doors it describes: no server error, no status, content type, header or body the document
//! does not allow. Outside CI a missing tool skips with a printed reason; in CI it fails.

mod common;

use std::process::Command;

use common::mcp_clients::skip;
use common::prism::{fixture, tools_dir};
use common::upstream::Upstream;
use common::{TestServer, test_config};
use serde_json::{Value, json};

/// The shop's charge (sent to the counting upstream, which answers every `POST`) and
/// `rpc.discover`'s twin: the methods the document describes.
async fn server(up: &Upstream) -> TestServer {
    let mut cfg = test_config();
    cfg.openapi.push(
        toml::from_str(&format!(
            "name = \"shop\"\nspec = {:?}\nbase_url = \"http://{}\"\noperations = [\"createCharge\"]",
            fixture("shop.yaml").display().to_string(),
            up.addr
        ))
        .unwrap(),
    );
    TestServer::start_with(cfg).await
}

#[tokio::test]
async fn openapi_json_describes_the_rest_doors_and_swagger_parser_validates_it() {
    let up = Upstream::start().await;
    let srv = server(&up).await;
    let answer = srv.get("/openapi.json").await;
    assert_eq!(answer.status, 200);
    let doc = answer.json();
    assert_eq!(doc["openapi"], "3.1.0");
    let charge = &doc["paths"]["/v2/flows/shop.createCharge"]["post"];
    let body = &charge["requestBody"]["content"]["application/json"]["schema"];
    assert_eq!(
        body["properties"]["body"]["properties"]["price"]["properties"]["currency"]["enum"],
        json!(["EUR", "USD"])
    );
    assert!(charge["description"].as_str().unwrap().starts_with("Charge a card"), "{charge}");
    let refs: Vec<&str> =
        charge["parameters"].as_array().unwrap().iter().filter_map(|p| p["$ref"].as_str()).collect();
    assert!(refs.contains(&"#/components/parameters/IdempotencyKey"), "{refs:?}");
    let return_step = charge["parameters"].as_array().unwrap().iter().find(|p| p["name"] == "return_step");
    assert_eq!(return_step.unwrap()["schema"]["enum"], json!(["createCharge"]), "the flow's steps");
    // Every status of the error-code table is described, with the error body.
    for status in ["400", "401", "403", "404", "409", "413", "429", "502", "503", "504"] {
        assert_eq!(charge["responses"][status]["$ref"], "#/components/responses/Error", "{status}");
    }
    assert!(charge["responses"]["200"]["headers"]["x-idempotency-status"].is_object());
    for path in ["/v2/events", "/v2/events/{event_id}", "/v2/events/{event_id}/retry"] {
        assert!(doc["paths"][path].is_object(), "{path}");
    }
    assert!(doc["paths"].as_object().unwrap().keys().all(|p| !p.contains("rpc.")));
    assert_eq!(srv.get("/openapi.json").await.body, answer.body, "made once, answered the same");

    let Some(dir) = tools_dir() else { return };
    let file = common::process::TempDir::new("openapi-doc");
    let path = file.file("openapi.json");
    std::fs::write(&path, &answer.body).unwrap();
    let script = "require('@apidevtools/swagger-parser').validate(process.argv[1])\
        .then(() => console.log('valid'), (e) => { console.error(e.message); process.exit(1); })";
    let mut cmd = Command::new(dir.join("node_modules/.bin/node"));
    let out =
        cmd.env("NODE_PATH", dir.join("node_modules")).args(["-e", script]).arg(&path).output().unwrap();
    assert!(
        out.status.success(),
        "swagger-parser: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    srv.stop().await;
}

fn schemathesis() -> Option<Command> {
    let python = std::env::var_os("ONCERPC_PYTHON");
    let ok = python.as_ref().is_some_and(|p| {
        Command::new(p).args(["-c", "import schemathesis"]).output().is_ok_and(|o| o.status.success())
    });
    if !ok {
        skip("Schemathesis (ONCERPC_PYTHON with schemathesis)");
        return None;
    }
    let mut cmd = Command::new(python.unwrap());
    cmd.args(["-m", "schemathesis.cli"]);
    Some(cmd)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn schemathesis_finds_no_server_error_and_nothing_the_document_does_not_allow() {
    let Some(mut st) = schemathesis() else { return };
    let up = Upstream::start().await;
    let srv = server(&up).await;
    let url = srv.url("/openapi.json");
    // Its example database goes in a folder of the test's own, not in the checkout.
    let work = common::process::TempDir::new("schemathesis");
    let cwd = work.0.clone();
    let out = tokio::task::spawn_blocking(move || {
        st.current_dir(cwd).args(["run", &url])
            .args([
                "--checks",
                "not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance",
                "--max-examples",
                "25",
                "--seed",
                "46",
                "--no-color",
            ])
            .env("SCHEMATHESIS_HOOKS", "")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    common::process::keep_output(&out);
    eprintln!("{text}");
    assert!(out.status.success(), "schemathesis:\n{text}");
    // The flow and the three operations of the events API.
    assert!(text.contains("Tested: 4"), "every operation was tested:\n{text}");
    let answered: Value = srv.get("/v2/events?limit=1").await.json();
    assert!(answered["events"].is_array(), "{answered}");
    srv.stop().await;
}
