//! Webhooks (SPEC §15, issue 15) against the real `oncerpc` binary on loopback: keys and
//! fingerprints taken from the payload, and signatures made by the providers' own libraries
//! (`tests/clients/webhook_sign.py`: PyPI `standardwebhooks` and `stripe`; GitHub's documented
//! example and algorithm). Every upstream call is counted, so "nothing ran" is checked, not
//! assumed.
//!
//! Outside CI a Python without `standardwebhooks` / `stripe` skips the signed cases with a
//! printed reason; in CI (`CI=true`, where `scripts/test.sh` installs them) it is a failure.

mod common;

use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::Answer;
use common::process::{Gateway, Http, TempDir};
use common::upstream::Upstream;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

const API_KEY: &str = "hooks-s3cr3t-api-key-0123";
/// Standard Webhooks secrets: the current one, the one being rotated out, one never configured.
const SW_NEW: &str = "whsec_s3cr3tOncerpcWebhookTestKey2026xABCD";
const SW_OLD: &str = "whsec_s3cr3tOncerpcRotatedTestKey2026xABCD";
const SW_UNKNOWN: &str = "whsec_s3cr3tOncerpcUnknownTestKey2026xABCD";
const STRIPE_SECRET: &str = "whsec_s3cr3t_stripe_test";
const GH_SECRET: &str = "gh-s3cr3t-2026";
/// GitHub's documented example ("Validating webhook deliveries").
const GH_DOC_SECRET: &str = "It's a Secret to Everybody";
const GH_DOC_SIGNATURE: &str = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The Python that has the providers' libraries, or `None` (skip; a failure in CI).
fn python() -> Option<String> {
    let python = std::env::var("ONCERPC_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = std::process::Command::new(&python)
        .args(["-c", "import standardwebhooks, stripe"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(python);
    }
    assert!(!in_ci(), "{python} cannot import standardwebhooks and stripe (scripts/test.sh installs them)");
    eprintln!("SKIPPED: {python} cannot import standardwebhooks and stripe (run ./scripts/test.sh)");
    None
}

/// examples/webhooks.toml, as shipped.
fn shipped_example() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/webhooks.toml"))
        .expect("examples/webhooks.toml")
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

/// One delivery to sign: scheme, secret, delivery id, timestamp, body.
fn delivery(scheme: &str, secret: &str, id: &str, timestamp: u64, body: &str) -> Value {
    json!({"scheme": scheme, "secret": secret, "id": id, "timestamp": timestamp, "body": body})
}

/// The headers the providers' libraries put on each delivery.
async fn sign(python: &str, deliveries: &[Value]) -> Vec<Vec<(String, String)>> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/webhook_sign.py");
    let mut child = tokio::process::Command::new(python)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python");
    let input = serde_json::to_vec(deliveries).unwrap();
    child.stdin.take().unwrap().write_all(&input).await.unwrap();
    let out = child.wait_with_output().await.expect("python ran");
    assert!(out.status.success(), "webhook_sign.py failed: {}", String::from_utf8_lossy(&out.stderr));
    let signed: Vec<serde_json::Map<String, Value>> = serde_json::from_slice(&out.stdout).unwrap();
    signed
        .into_iter()
        .map(|h| h.into_iter().map(|(k, v)| (k, v.as_str().unwrap().to_owned())).collect())
        .collect()
}

/// Every method of this file: three signed receivers served as tenant `hooks` without an API
/// key, and one unsigned method deriving its key from the params.
fn config(up: &Upstream, dir: &TempDir) -> String {
    format!(
        r#"
[store]
url = "sqlite://{db}"

[[tenants]]
name = "hooks"
api_keys = ["{API_KEY}"]

[[methods]]
name = "sw.payments"
kind = "command"
key_header = "webhook-id"
fingerprint_from = ["/data/id", "/data/amount"]
verify = {{ scheme = "standard-webhooks", secret = ["{SW_NEW}", "{SW_OLD}"] }}
tenant = "hooks"
  [[methods.steps]]
  name = "sw"
  url = "{sw}"

[[methods]]
name = "stripe.events"
kind = "command"
key_from = "/id"
fingerprint_from = ["/data/object/id", "/data/object/amount"]
verify = {{ scheme = "stripe", secret = "{STRIPE_SECRET}", tolerance_secs = 300 }}
tenant = "hooks"
  [[methods.steps]]
  name = "stripe"
  url = "{stripe}"

[[methods]]
name = "github.push"
kind = "command"
key_from = ""
verify = {{ scheme = "github", secret = ["{GH_SECRET}", "{GH_DOC_SECRET}"] }}
tenant = "hooks"
  [[methods.steps]]
  name = "github"
  url = "{github}"

[[methods]]
name = "orders.derive"
kind = "command"
key_from = "/order/id"
  [[methods.steps]]
  name = "orders"
  url = "{orders}"
"#,
        db = dir.file("webhooks.db").display(),
        sw = up.url("sw"),
        stripe = up.url("stripe"),
        github = up.url("github"),
        orders = up.url("orders"),
    )
}

async fn post_signed(http: &Http, path: &str, body: &str, headers: &[(String, String)]) -> Answer {
    let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    http.post(path, body.to_owned(), &h).await
}

fn without(headers: &[(String, String)], name: &str) -> Vec<(String, String)> {
    headers.iter().filter(|(k, _)| !k.eq_ignore_ascii_case(name)).cloned().collect()
}

/// The HTTP status and `X-Idempotency-Status` of an answer.
fn status(a: &Answer) -> (u16, String) {
    (a.status, a.header("x-idempotency-status").unwrap_or("-").to_owned())
}

fn st(code: u16, idempotency_status: &str) -> (u16, String) {
    (code, idempotency_status.to_owned())
}

/// `oncerpc_webhook_refusals_total{method,reason}` as /metrics shows it (0 when absent).
async fn refusals(http: &Http, method: &str, reason: &str) -> u64 {
    let text = http.get("/metrics", &[]).await.body;
    let series = format!("oncerpc_webhook_refusals_total{{method=\"{method}\",reason=\"{reason}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(&series)).map_or(0, |n| n.trim().parse().unwrap())
}

/// The log lines of refused deliveries to `method`, once the log writer has caught up.
async fn refusal_lines(gw: &Gateway, method: &str, expected: usize) -> usize {
    let matches = |l: &str| l.contains("webhook delivery refused") && l.contains(method);
    for _ in 0..100 {
        if gw.log().iter().filter(|l| matches(l)).count() >= expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    gw.log().iter().filter(|l| matches(l)).count()
}

fn assert_no_secret_in(log: &[String]) {
    for line in log {
        for secret in ["s3cr3t", "MfKQ9r8", "Secret to Everybody"] {
            assert!(!line.contains(secret), "a secret reached the log: {line}");
        }
    }
}

#[tokio::test]
async fn standard_webhooks_deliveries_signed_by_the_standardwebhooks_package() {
    let Some(py) = python() else { return };
    let up = Upstream::start().await;
    let dir = TempDir::new("webhooks-sw");
    let gw = Gateway::with_config(&dir, &config(&up, &dir));
    let http = gw.http();
    let path = "/v2/flows/sw.payments?sync=true";
    let t = now();
    let body = |attempt: u32, amount: &str| {
        format!(
            r#"{{"type":"payment.succeeded","attempt":{attempt},"sent_at":"{}","data":{{"id":"pay_1","amount":{amount}}}}}"#,
            t + u64::from(attempt)
        )
    };
    let first = body(1, "100000000000000000001");
    let envelope = body(2, "100000000000000000001");
    let amount = body(3, "100000000000000000002");
    let signed = sign(
        &py,
        &[
            delivery("standard-webhooks", SW_NEW, "msg_1", t, &first),
            delivery("standard-webhooks", SW_NEW, "msg_1", t + 60, &envelope),
            delivery("standard-webhooks", SW_NEW, "msg_1", t + 120, &amount),
            delivery("standard-webhooks", SW_OLD, "msg_2", t, &first),
            delivery("standard-webhooks", SW_NEW, "msg_3", t, &first),
            delivery("standard-webhooks", SW_NEW, "msg_4", t - 3600, &first),
            delivery("standard-webhooks", SW_UNKNOWN, "msg_5", t, &first),
            delivery("standard-webhooks", SW_NEW, "msg_6", t, &first),
        ],
    )
    .await;

    // The same delivery three times: one execution, then the stored answer twice.
    let answers = [
        post_signed(&http, path, &first, &signed[0]).await,
        post_signed(&http, path, &first, &signed[0]).await,
        post_signed(&http, path, &first, &signed[0]).await,
    ];
    let statuses: Vec<_> = answers.iter().map(status).collect();
    assert_eq!(statuses, [st(200, "new"), st(200, "duplicate"), st(200, "duplicate")], "{}", answers[0].body);
    assert_eq!(answers[0].body, answers[2].body, "the stored outcome, byte for byte");
    assert_eq!(answers[0].header("x-idempotency-key"), Some("msg_1"), "the key is the webhook-id");
    assert_eq!(answers[0].header("x-idempotency-key-source"), Some("derived"));
    assert_eq!(up.count("sw"), 1);

    // A redelivery whose envelope changed (attempt, sent_at, signature time): a duplicate.
    let a = post_signed(&http, path, &envelope, &signed[1]).await;
    assert_eq!(status(&a), st(200, "duplicate"), "{}", a.body);
    // The same id with another amount (one unit in 10^20): 422, nothing runs.
    let a = post_signed(&http, path, &amount, &signed[2]).await;
    assert_eq!(a.status, 422, "{}", a.body);
    assert_eq!(up.count("sw"), 1);

    // Signed with the secret being rotated out: accepted, it is still configured.
    let a = post_signed(&http, path, &first, &signed[3]).await;
    assert_eq!(status(&a), st(200, "new"), "{}", a.body);
    assert_eq!(up.count("sw"), 2);

    // A tampered body: 401, nothing runs, nothing is recorded (the genuine one is then new).
    let tampered = first.replace("100000000000000000001", "900000000000000000001");
    let a = post_signed(&http, path, &tampered, &signed[4]).await;
    assert_eq!(a.status, 401, "{}", a.body);
    assert_eq!(a.json()["code"], "401");
    assert!(a.json()["message"].as_str().unwrap().contains("no signature matches"), "{}", a.body);
    assert_eq!(up.count("sw"), 2);
    let a = post_signed(&http, path, &first, &signed[4]).await;
    assert_eq!(status(&a), st(200, "new"), "no record was left by the refused delivery: {}", a.body);
    assert_eq!(up.count("sw"), 3);

    // A stale timestamp (an hour old, tolerance 300 s), a secret never configured, a missing
    // signature header: 401 each, nothing runs.
    let a = post_signed(&http, path, &first, &signed[5]).await;
    assert_eq!(a.status, 401, "{}", a.body);
    assert!(a.body.contains("outside the tolerance"), "{}", a.body);
    let a = post_signed(&http, path, &first, &signed[6]).await;
    assert_eq!(a.status, 401, "{}", a.body);
    let a = post_signed(&http, path, &first, &without(&signed[7], "webhook-signature")).await;
    assert_eq!(a.status, 401, "{}", a.body);
    assert!(a.body.contains("webhook-signature header is missing"), "{}", a.body);
    assert_eq!(up.count("sw"), 3);

    // A signed method is not callable around its signature: /rpc refuses it (-32600).
    let rpc = json!({"jsonrpc": "2.0", "method": "sw.payments", "params": {"data": {"id": "x"}}, "id": 1});
    let a = http.rpc(rpc.to_string(), &[("X-API-Key", API_KEY), ("X-Idempotency-Key", "rpc-1")]).await;
    assert_eq!(a.json()["error"]["code"], -32600, "{}", a.body);
    assert_eq!(up.count("sw"), 3);

    // Each refusal is counted and logged once, without a secret.
    assert_eq!(refusals(&http, "sw.payments", "mismatch").await, 2);
    assert_eq!(refusals(&http, "sw.payments", "stale").await, 1);
    assert_eq!(refusals(&http, "sw.payments", "missing").await, 1);
    assert_eq!(refusal_lines(&gw, "sw.payments", 4).await, 4);
    assert_no_secret_in(&gw.log());
}

#[tokio::test]
async fn async_deliveries_share_one_event_of_the_methods_tenant() {
    let Some(py) = python() else { return };
    let up = Upstream::start().await;
    let dir = TempDir::new("webhooks-async");
    let gw = Gateway::with_config(&dir, &config(&up, &dir));
    let http = gw.http();
    let body = r#"{"type":"payment.succeeded","data":{"id":"pay_7","amount":5}}"#;
    let signed = sign(&py, &[delivery("standard-webhooks", SW_NEW, "msg_7", now(), body)]).await;
    // What a provider does: POST without ?sync (the default, async) — three times.
    let mut ids = Vec::new();
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let a = post_signed(&http, "/v2/flows/sw.payments", body, &signed[0]).await;
        assert_eq!(a.status, 200, "{}", a.body);
        ids.push(a.json()["event_id"].as_str().unwrap().to_owned());
        statuses.push(a.header("x-idempotency-status").unwrap().to_owned());
    }
    assert!(ids.iter().all(|id| *id == ids[0]), "one event: {ids:?}");
    assert_eq!(statuses[0], "new");
    // The event belongs to the method's tenant: its API key reads it, after one execution.
    let mut event = Value::Null;
    for _ in 0..200 {
        event = http.get(&format!("/v2/events/{}", ids[0]), &[("X-API-Key", API_KEY)]).await.json();
        if event["status"] == "succeeded" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(event["status"], "succeeded", "{event}");
    assert_eq!(up.count("sw"), 1);
    let a = post_signed(&http, "/v2/flows/sw.payments", body, &signed[0]).await;
    assert_eq!(a.header("x-idempotency-status"), Some("duplicate"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(up.count("sw"), 1, "four deliveries, one execution");
}

#[tokio::test]
async fn stripe_deliveries_signed_by_the_stripe_package() {
    let Some(py) = python() else { return };
    let up = Upstream::start().await;
    let dir = TempDir::new("webhooks-stripe");
    let gw = Gateway::with_config(&dir, &config(&up, &dir));
    let http = gw.http();
    let path = "/v2/flows/stripe.events?sync=true";
    let t = now();
    let event = |pending: u32, amount: u64| {
        format!(
            r#"{{"id":"evt_1NG8Du2eZvKYlo2CUI79vXWy","object":"event","created":{},"pending_webhooks":{pending},"type":"payment_intent.succeeded","data":{{"object":{{"id":"pi_3","object":"payment_intent","amount":{amount},"currency":"eur"}}}}}}"#,
            t + u64::from(pending)
        )
    };
    let first = event(1, 2000);
    let envelope = event(2, 2000);
    let amount = event(1, 2001);
    let signed = sign(
        &py,
        &[
            delivery("stripe", STRIPE_SECRET, "", t, &first),
            delivery("stripe", STRIPE_SECRET, "", t + 30, &envelope),
            delivery("stripe", STRIPE_SECRET, "", t, &amount),
            delivery("stripe", STRIPE_SECRET, "", t - 600, &first),
            delivery("stripe", "whsec_another", "", t, &first),
        ],
    )
    .await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        let a = post_signed(&http, path, &first, &signed[0]).await;
        seen.push(status(&a));
        assert_eq!(a.header("x-idempotency-key"), Some("evt_1NG8Du2eZvKYlo2CUI79vXWy"), "key_from /id");
    }
    assert_eq!(seen, [st(200, "new"), st(200, "duplicate"), st(200, "duplicate")]);
    assert_eq!(up.count("stripe"), 1);
    let a = post_signed(&http, path, &envelope, &signed[1]).await;
    assert_eq!(status(&a), st(200, "duplicate"), "changed envelope: {}", a.body);
    let a = post_signed(&http, path, &amount, &signed[2]).await;
    assert_eq!(a.status, 422, "changed amount: {}", a.body);
    // An explicit key: the derived one is accepted, another one is 400.
    let mut with_key = signed[0].clone();
    with_key.push(("X-Idempotency-Key".into(), "evt_1NG8Du2eZvKYlo2CUI79vXWy".into()));
    assert_eq!(status(&post_signed(&http, path, &first, &with_key).await), st(200, "duplicate"));
    with_key.last_mut().unwrap().1 = "some-other-key".into();
    let a = post_signed(&http, path, &first, &with_key).await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(a.body.contains("differs"), "{}", a.body);
    // Refusals: tampered, stale (10 minutes, tolerance 300 s), another secret, no header.
    let tampered = first.replace("2000", "20");
    assert_eq!(post_signed(&http, path, &tampered, &signed[0]).await.status, 401);
    let a = post_signed(&http, path, &first, &signed[3]).await;
    assert_eq!(a.status, 401);
    assert!(a.body.contains("outside the tolerance"), "{}", a.body);
    assert_eq!(post_signed(&http, path, &first, &signed[4]).await.status, 401);
    let a = http.post(path, first.clone(), &[]).await;
    assert_eq!(a.status, 401);
    assert!(a.body.contains("Stripe-Signature header is missing"), "{}", a.body);
    assert_eq!(up.count("stripe"), 1, "one execution in all");
    assert_eq!(refusals(&http, "stripe.events", "mismatch").await, 2);
    assert_eq!(refusals(&http, "stripe.events", "stale").await, 1);
    assert_eq!(refusals(&http, "stripe.events", "missing").await, 1);
    assert_eq!(refusal_lines(&gw, "stripe.events", 4).await, 4);
    assert_no_secret_in(&gw.log());
}

#[tokio::test]
async fn github_deliveries_and_the_documented_example() {
    let up = Upstream::start().await;
    let dir = TempDir::new("webhooks-github");
    let gw = Gateway::with_config(&dir, &config(&up, &dir));
    let http = gw.http();
    let path = "/v2/flows/github.push?sync=true";
    // GitHub's documented example verifies (with the second, rotated-in secret); its payload is
    // not JSON, so the flows door then refuses it with 400 — after the signature, not 401.
    let doc = [("X-Hub-Signature-256", GH_DOC_SIGNATURE), ("X-GitHub-Delivery", "doc-1")];
    let a = http.post(path, "Hello, World!", &doc).await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert!(a.body.contains("Parse error"), "verified, then parsed: {}", a.body);
    let a = http.post(path, "Hello, World?", &doc).await;
    assert_eq!(a.status, 401, "{}", a.body);

    // JSON deliveries signed as GitHub documents (HMAC-SHA256 hex), computed by Python's hmac.
    let Some(py) = python() else { return };
    let push = r#"{"ref":"refs/heads/main","after":"6113728f27ae82c7b1a177c8d03f9e96e0adf246","repository":{"full_name":"octo/hello"}}"#;
    let signed =
        sign(&py, &[delivery("github", GH_SECRET, "72d3162e-cc78-11e3-81ab-4c9367dc0958", 0, push)]).await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(status(&post_signed(&http, path, push, &signed[0]).await));
    }
    assert_eq!(seen, [st(200, "new"), st(200, "duplicate"), st(200, "duplicate")]);
    assert_eq!(up.count("github"), 1);
    let a = post_signed(&http, path, push, &signed[0]).await;
    assert_eq!(a.header("x-idempotency-key-source"), Some("hashed"), "the key is the signed body's digest");
    // GitHub signs the body only, not X-GitHub-Delivery: a captured delivery replayed under a
    // new delivery id (or none) verifies, and is a duplicate of the first, not a new run.
    let captured = without(&signed[0], "X-GitHub-Delivery");
    let mut replayed = captured.clone();
    replayed.push(("X-GitHub-Delivery".into(), "00000000-0000-4000-8000-000000000001".into()));
    for replay in [&replayed, &captured] {
        assert_eq!(status(&post_signed(&http, path, push, replay).await), st(200, "duplicate"));
    }
    assert_eq!(up.count("github"), 1, "a replay with a new delivery id runs nothing");
    // Another signed body is another delivery.
    let other = push.replace("6113728f", "7113728f");
    let signed_other = sign(&py, &[delivery("github", GH_SECRET, "other-delivery", 0, &other)]).await;
    assert_eq!(status(&post_signed(&http, path, &other, &signed_other[0]).await), st(200, "new"));
    assert_eq!(up.count("github"), 2);
    // No signature: 401.
    let a = post_signed(&http, path, push, &without(&signed[0], "X-Hub-Signature-256")).await;
    assert_eq!(a.status, 401, "{}", a.body);
    assert_eq!(up.count("github"), 2);
    assert_no_secret_in(&gw.log());
}

/// examples/webhooks.toml as shipped (only its addresses and secrets replaced): a captured
/// GitHub delivery re-sent under a new `X-GitHub-Delivery` (GitHub does not sign it) is a
/// duplicate, and the flow runs once. With the example's former `key_header =
/// "X-GitHub-Delivery"` the replay ran the flow again.
#[tokio::test]
async fn the_shipped_example_runs_a_replayed_github_delivery_once() {
    let Some(py) = python() else { return };
    let up = Upstream::start().await;
    let dir = TempDir::new("webhooks-example");
    let db = format!("sqlite://{}", dir.file("example.db").display());
    let mut toml = shipped_example();
    for (from, to) in [
        ("${ACME_API_KEY}", API_KEY),
        ("${GITHUB_WEBHOOK_SECRET}", GH_SECRET),
        ("${PAYMENTS_WEBHOOK_SECRET}", SW_NEW),
        ("sqlite://webhooks.db", &db),
        ("http://127.0.0.1:9000/", &up.url("")),
    ] {
        assert!(toml.contains(from), "the example has {from}");
        toml = toml.replace(from, to);
    }
    let gw = Gateway::with_config(&dir, &toml);
    let http = gw.http();
    let path = "/v2/flows/github.push?sync=true";
    let push = r#"{"ref":"refs/heads/main","after":"0d1a26e67d8f5eaf1f6ba5c57fc3c7d91ac0fd1c","repository":{"full_name":"octo/hello"}}"#;
    let ids = ["72d3162e-cc78-11e3-81ab-4c9367dc0958", "d1f0c5a0-0000-4000-8000-00000000beef"];
    let signed = sign(&py, &ids.map(|id| delivery("github", GH_SECRET, id, 0, push))).await;
    let signature = |h: &[(String, String)]| h.iter().find(|(k, _)| k == "X-Hub-Signature-256").cloned();
    assert_eq!(signature(&signed[0]), signature(&signed[1]), "GitHub signs the body only");
    assert_eq!(status(&post_signed(&http, path, push, &signed[0]).await), st(200, "new"));
    let replay = post_signed(&http, path, push, &signed[1]).await;
    assert_eq!(status(&replay), st(200, "duplicate"), "{}", replay.body);
    assert_eq!(up.count("ci"), 1, "the replay under a new delivery id ran nothing");
    assert_no_secret_in(&gw.log());
}

#[tokio::test]
async fn derived_keys_on_rpc_and_the_flows_door() {
    let up = Upstream::start().await;
    let dir = TempDir::new("webhooks-derived");
    let gw = Gateway::with_config(&dir, &config(&up, &dir));
    let http = gw.http();
    let auth = ("X-API-Key", API_KEY);
    let rpc = |params: Value| {
        json!({"jsonrpc": "2.0", "method": "orders.derive", "params": params, "id": 1}).to_string()
    };

    // /rpc: the key is params.order.id.
    let a = http.rpc(rpc(json!({"order": {"id": "ord-1", "sku": "a"}})), &[auth]).await;
    assert!(a.json().get("result").is_some(), "{}", a.body);
    assert_eq!(a.header("x-idempotency-key"), Some("ord-1"));
    assert_eq!(a.header("x-idempotency-key-source"), Some("derived"));
    assert_eq!(a.header("x-idempotency-status"), Some("new"));
    let a = http.rpc(rpc(json!({"order": {"id": "ord-1", "sku": "a"}})), &[auth]).await;
    assert_eq!(a.header("x-idempotency-status"), Some("duplicate"));
    // An explicit key equal to the derived one (params or header) is the same request.
    let a = http
        .rpc(rpc(json!({"order": {"id": "ord-1", "sku": "a"}, "idempotency_key": "ord-1"})), &[auth])
        .await;
    assert_eq!(a.header("x-idempotency-status"), Some("duplicate"), "{}", a.body);
    let a = http
        .rpc(rpc(json!({"order": {"id": "ord-1", "sku": "a"}})), &[auth, ("X-Idempotency-Key", "ord-1")])
        .await;
    assert_eq!(a.header("x-idempotency-status"), Some("duplicate"), "{}", a.body);
    // One that differs is -32602, in the params or in a header.
    let a = http
        .rpc(rpc(json!({"order": {"id": "ord-1", "sku": "a"}, "idempotency_key": "ord-2"})), &[auth])
        .await;
    assert_eq!(a.json()["error"]["code"], -32602, "{}", a.body);
    let a = http
        .rpc(rpc(json!({"order": {"id": "ord-1", "sku": "a"}})), &[auth, ("X-Idempotency-Key", "ord-2")])
        .await;
    assert_eq!(a.json()["error"]["code"], -32602, "{}", a.body);
    // No value at the pointer: -32602 (the method says where its key is).
    let a = http.rpc(rpc(json!({"sku": "a"})), &[auth]).await;
    assert_eq!(a.json()["error"]["code"], -32602, "{}", a.body);
    assert!(a.body.contains("/order/id"), "{}", a.body);
    assert_eq!(up.count("orders"), 1);

    // A value that breaks the key format is hashed, not refused, and the answer says so.
    let a = http.rpc(rpc(json!({"order": {"id": "order #7 (retry)"}})), &[auth]).await;
    assert!(a.json().get("result").is_some(), "{}", a.body);
    let key = a.header("x-idempotency-key").unwrap().to_owned();
    assert!(key.starts_with("sha256-") && key.len() == 64, "{key}");
    assert_eq!(a.header("x-idempotency-key-source"), Some("hashed"));
    let a = http.rpc(rpc(json!({"order": {"id": "order #7 (retry)"}})), &[auth]).await;
    assert_eq!(a.header("x-idempotency-status"), Some("duplicate"));
    assert_eq!(a.header("x-idempotency-key"), Some(key.as_str()));
    assert_eq!(up.count("orders"), 2);

    // The flows door: the body is the params, the same rules and the same records.
    let path = "/v2/flows/orders.derive?sync=true";
    let a = http.post(path, r#"{"order":{"id":"ord-1","sku":"a"}}"#, &[auth]).await;
    assert_eq!(status(&a), st(200, "duplicate"), "the record /rpc made: {}", a.body);
    let a = http.post(path, r#"{"order":{"id":"ord-9"}}"#, &[auth, ("X-Idempotency-Key", "ord-1")]).await;
    assert_eq!(a.status, 400, "{}", a.body);
    let a = http.post(path, r#"{"order":{"id":"ord 9"}}"#, &[auth]).await;
    assert_eq!(status(&a), st(200, "new"));
    assert_eq!(a.header("x-idempotency-key-source"), Some("hashed"));
    let a = http.post(path, r#"{"order":{}}"#, &[auth]).await;
    assert_eq!(a.status, 400, "{}", a.body);
    assert_eq!(up.count("orders"), 3);
}

#[test]
fn check_config_shows_no_secret_and_names_what_is_wrong() {
    let dir = TempDir::new("webhooks-check");
    let check = |toml: &str, env: &[(&str, &str)]| {
        let path = dir.file("check.toml");
        std::fs::write(&path, toml).unwrap();
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_oncerpc"));
        cmd.arg("check-config").arg(&path);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("run check-config");
        common::process::keep_output(&out);
        let text =
            format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.success(), text)
    };
    let method = |extra: &str| {
        format!(
            "[[tenants]]\nname = \"hooks\"\napi_keys = [\"{API_KEY}\"]\n\n[[methods]]\nname = \"gh\"\nkind = \"command\"\n{extra}\n  [[methods.steps]]\n  name = \"s\"\n  url = \"http://127.0.0.1:9/s\"\n"
        )
    };
    let good = method(
        "key_from = \"\"\nverify = { scheme = \"github\", secret = \"${GH_HOOK_SECRET}\" }\ntenant = \"hooks\"",
    );
    let (ok, text) = check(&good, &[("GH_HOOK_SECRET", "gh-s3cr3t-from-env")]);
    assert!(ok, "{text}");
    assert!(text.contains("verify=github (1 secret(s))"), "{text}");
    assert!(text.contains("key_from=\"\" (the whole body)"), "{text}");
    assert!(!text.contains("s3cr3t-from-env"), "{text}");
    let (ok, text) = check(&good, &[]);
    assert!(!ok && text.contains("GH_HOOK_SECRET"), "a missing variable is named: {text}");

    // The example of the webhooks guide (docs/guide/webhooks.md) is valid, and shows none of its secrets.
    let example = shipped_example();
    let env = [
        ("ACME_API_KEY", "acme-s3cr3t-api-key-0001"),
        ("GITHUB_WEBHOOK_SECRET", "gh-s3cr3t-example"),
        ("PAYMENTS_WEBHOOK_SECRET", "whsec_s3cr3tOncerpcWebhookTestKey2026xABCD"),
    ];
    let (ok, text) = check(&example, &env);
    assert!(ok, "{text}");
    assert!(text.contains("verify=standard-webhooks (1 secret(s))"), "{text}");
    assert!(!text.contains("s3cr3t"), "{text}");

    for (extra, expected) in [
        ("verify = { scheme = \"gitlab\", secret = \"x\" }", "unknown scheme"),
        ("verify = { scheme = \"standard-webhooks\", secret = \"whsec_not base64!\" }", "whsec_"),
        ("verify = { scheme = \"github\", secret = \"x\", tolerance_secs = 60 }", "no timestamp"),
        ("verify = { scheme = \"github\", secret = [] }", "at least one secret"),
        ("tenant = \"hooks\"", "only a method with verify"),
        (
            "verify = { scheme = \"github\", secret = \"x\" }\ntenant = \"nobody\"",
            "not one of the [[tenants]]",
        ),
        ("key_from = \"/id\"\nkey_header = \"webhook-id\"", "not both"),
        // A key from a header the signature does not cover: a replay with a new value runs again.
        (
            "key_header = \"X-GitHub-Delivery\"\nverify = { scheme = \"github\", secret = \"x\" }",
            "methods[0].key_header (\"gh\"): the github signature covers no header, not X-GitHub-Delivery",
        ),
        (
            "key_header = \"X-Request-Id\"\nverify = { scheme = \"stripe\", secret = \"x\" }",
            "methods[0].key_header (\"gh\"): the stripe signature covers no header",
        ),
        (
            "key_header = \"X-Request-Id\"\nverify = { scheme = \"standard-webhooks\", secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\" }",
            "covers webhook-id, webhook-timestamp, not X-Request-Id",
        ),
        ("key_from = \"id\"", "JSON pointer"),
        ("key_header = \"bad header\"", "not a header name"),
        ("fingerprint_from = []", "methods[0].fingerprint_from (\"gh\"): name at least one JSON pointer"),
        // Each pointer would be one member of the fingerprint document, named twice: every
        // request would be 400.
        (
            "fingerprint_from = [\"/a\", \"/b\", \"/a\"]",
            "methods[0].fingerprint_from (\"gh\"): \"/a\" is listed twice",
        ),
    ] {
        let (ok, text) = check(&method(extra), &[]);
        assert!(!ok, "{extra} was accepted: {text}");
        assert!(text.contains(expected), "{extra}: expected {expected:?} in {text}");
        assert!(
            text.contains("methods.gh") || text.contains("(\"gh\")"),
            "the error names the method: {text}"
        );
    }
    // A pointer inside another is its own member of the fingerprint: accepted.
    let (ok, text) = check(&method("fingerprint_from = [\"/a\", \"/a/b\"]"), &[]);
    assert!(ok, "{text}");
}
