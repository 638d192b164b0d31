//! `[[openapi]]` across a crash: `kill -9` of a real `oncerpc serve` while an imported
//! operation's request is at the upstream; the retry after the dead owner's lease sends the
//! request again with the same `Idempotency-Key`, so an API that honours the key charges once.
//! And `oncerpc check-config` prints the methods a document yields.

mod common;

use std::time::Duration;

use common::prism::fixture;
use common::process::{Gateway, TempDir, post};
use common::upstream::Upstream;
use serde_json::json;

fn config(dir: &TempDir, up: &Upstream) -> String {
    format!(
        "[store]\nurl = \"sqlite://{}\"\nlease_ms = 2000\n\n[limits]\ndefault_timeout_ms = 1000\n\n\
         [[openapi]]\nname = \"shop\"\nspec = {:?}\nbase_url = \"http://{}\"\noperations = [\"createCharge\"]\n",
        dir.file("o.db").display(),
        fixture("shop.yaml").display().to_string(),
        up.addr
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn after_kill_9_mid_call_the_request_sent_again_carries_the_same_idempotency_key() {
    let up = Upstream::start().await;
    let dir = TempDir::new("openapi-kill");
    let toml = config(&dir, &up);
    let client = common::http_client();
    let body =
        json!({"jsonrpc":"2.0","id":1,"method":"shop.createCharge","params":{"idempotency_key":"order-kill",
        "body":{"price":{"amount":900,"currency":"USD"},"source":"tok_visa"}}})
        .to_string();

    // The upstream holds the first request: the gateway dies while it is out.
    up.set_delay(30_000, &["charges"]);
    let mut gw = Gateway::with_config(&dir, &toml);
    let url = gw.url("");
    let (c, b) = (client.clone(), body.clone());
    let in_flight = tokio::spawn(async move { c.post(format!("{url}/rpc")).body(b).send().await });
    for _ in 0..500 {
        if up.count("charges") == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(up.count("charges"), 1, "the request reached the upstream");
    gw.kill9();
    assert!(in_flight.await.unwrap().is_err(), "the crashed gateway never answered");

    up.set_delay(0, &[]);
    let gw = Gateway::with_config(&dir, &toml);
    // Past the dead owner's lease (2 s from its claim), a retry takes the execution over.
    tokio::time::sleep(Duration::from_millis(2300)).await;
    let (status, _, text) = post(&client, &gw.url(""), &body).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(r#""amount":900"#), "{text}");
    let calls = up.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    let expected =
        oncerpc_core::idempotency::upstream_key("default", "shop.createCharge", "order-kill", "createCharge");
    assert_eq!(calls[0].key.as_deref(), Some(expected.as_str()));
    assert_eq!(calls[1].key, calls[0].key, "the same Idempotency-Key after the crash");
    let (_, idem, again) = post(&client, &gw.url(""), &body).await;
    assert_eq!((idem.as_deref(), again), (Some("duplicate"), text));
    assert_eq!(up.count("charges"), 2);
}

#[tokio::test]
async fn check_config_prints_the_methods_a_document_yields() {
    let up = Upstream::start().await;
    let dir = TempDir::new("openapi-check");
    let path = dir.file("oncerpc.toml");
    std::fs::write(&path, config(&dir, &up).replace("operations = [\"createCharge\"]\n", "")).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_oncerpc"))
        .args(["check-config", &path.display().to_string()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("openapi     shop (3 methods)"), "{stdout}");
    for line in ["shop.listProducts", "GET /products/{productId}", "shop.createCharge", "POST /charges"] {
        assert!(stdout.contains(line), "{line} in {stdout}");
    }
    assert!(stdout.contains("method      shop.getProduct kind=query"), "{stdout}");
    assert!(stdout.contains("method      shop.createCharge kind=command"), "{stdout}");
}
