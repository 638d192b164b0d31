//! Who did it (SPEC §14, §20): an async event records the subject of the credential that
//! submitted it — a token's `sub` from a real authorization server (oidc-provider, as in
//! `auth_tokens.rs`), a scoped key's `name` — as `created_by` in the events API and on the
//! console's event page; a plain API key names nobody (`null`). A re-drive keeps it. The
//! token itself is nowhere.
//!
//! Outside CI a missing authorization server skips the test with a printed reason; in CI it is
//! a failure.

mod common;

use std::time::Duration;

use common::oidc::{Provider, RESOURCE};
use common::process::{Gateway, Http, TempDir, unique};
use common::upstream::Upstream;
use serde_json::Value;

const PLAIN_KEY: &str = "acme-creator-plain-s3cr3t-01";
const SCOPED_KEY: &str = "acme-creator-scoped-s3cr3t-02";

fn config(dir: &TempDir, issuer: &str, up: &Upstream) -> String {
    format!(
        r#"
[store]
url = "sqlite://{db}"

[[auth.issuers]]
issuer = "{issuer}"
audience = "{RESOURCE}"
tenant_claim = "org_id"

[[tenants]]
name = "acme"
api_keys = ["{PLAIN_KEY}"]
  [[tenants.keys]]
  key = "{SCOPED_KEY}"
  name = "billing-job"
  scopes = ["orders:read", "orders:write"]
[[tenants]]
name = "beta"
{methods}"#,
        db = dir.file("o.db").display(),
        methods = common::oidc::scoped_methods(up),
    )
}

/// Submit `orders.create` asynchronously with `auth` (a header); the event id.
async fn submit(http: &Http, auth: (&str, &str)) -> String {
    let answer = http
        .post("/v2/flows/orders.create", r#"{"sku":"C-1"}"#, &[auth, ("Idempotency-Key", &unique("by"))])
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.json()["event_id"].as_str().unwrap().to_owned()
}

/// `GET /v2/events/{id}` once the event has finished.
async fn finished(http: &Http, id: &str, auth: (&str, &str)) -> Value {
    for _ in 0..600 {
        let answer = http.get(&format!("/v2/events/{id}"), &[auth]).await;
        assert_eq!(answer.status, 200, "{}", answer.body);
        let event = answer.json();
        if event["status"] != "processing" {
            return event;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("event {id} never finished");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_names_who_submitted_it_and_never_the_token() {
    let dir = TempDir::new("event-creator");
    let Some(mut idp) = Provider::new(&dir.0) else { return };
    idp.keygen("k1");
    idp.serve(&["k1"]).await;
    let up = Upstream::start().await;
    let gw = Gateway::with_config(&dir, &config(&dir, &idp.issuer(), &up));
    let http = gw.http();
    let token = idp.token("acme-service", "acme-client-s3cr3t-0001", "orders:read orders:write").await;
    let bearer = format!("Bearer {token}");
    let by_token = ("Authorization", bearer.as_str());
    let plain = ("X-API-Key", PLAIN_KEY);
    let scoped = ("X-API-Key", SCOPED_KEY);

    // The token: its `sub` (the client's id under client credentials). The gateway may still
    // be fetching the issuer's keys: 503 until it has them.
    let mut token_event = None;
    for _ in 0..400 {
        let answer = http
            .post(
                "/v2/flows/orders.create",
                r#"{"sku":"C-1"}"#,
                &[by_token, ("Idempotency-Key", &unique("by"))],
            )
            .await;
        if answer.status != 503 {
            assert_eq!(answer.status, 200, "{}", answer.body);
            token_event = answer.json()["event_id"].as_str().map(str::to_owned);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let token_event = token_event.expect("the gateway never fetched the issuer's keys");
    let event = finished(&http, &token_event, by_token).await;
    assert_eq!(
        (&event["status"], &event["created_by"]),
        (&Value::from("succeeded"), &Value::from("acme-service"))
    );
    // Any credential of the tenant reads the same record.
    assert_eq!(finished(&http, &token_event, plain).await["created_by"], "acme-service");

    // A scoped key: its `name`. A plain API key: nobody (`null`, present).
    let scoped_event = submit(&http, scoped).await;
    assert_eq!(finished(&http, &scoped_event, plain).await["created_by"], "billing-job");
    let plain_event = submit(&http, plain).await;
    let event = finished(&http, &plain_event, plain).await;
    assert!(event.as_object().unwrap().get("created_by").is_some_and(Value::is_null), "{event}");

    // The listing shows the same.
    let list = http.get("/v2/events?flow=orders.create&limit=200", &[plain]).await.json();
    let by_id = |id: &str| list["events"].as_array().unwrap().iter().find(|e| e["event_id"] == id).cloned();
    assert_eq!(by_id(&token_event).unwrap()["created_by"], "acme-service");
    assert_eq!(by_id(&scoped_event).unwrap()["created_by"], "billing-job");
    assert!(by_id(&plain_event).unwrap()["created_by"].is_null());

    // A re-drive by someone else keeps who created the event; the log names who re-drove it.
    up.set_fail(true);
    let failing = submit(&http, by_token).await;
    assert_eq!(finished(&http, &failing, plain).await["status"], "failed");
    up.set_fail(false);
    let redrive = http.post(&format!("/v2/events/{failing}/retry"), "", &[scoped]).await;
    assert_eq!(redrive.status, 202, "{}", redrive.body);
    let event = finished(&http, &failing, plain).await;
    assert_eq!(
        (&event["status"], &event["created_by"]),
        (&Value::from("succeeded"), &Value::from("acme-service"))
    );
    let line = gw
        .wait_log(Duration::from_secs(5), |l| l.contains("re-driving a failed event") && l.contains(&failing))
        .await
        .expect("the re-drive's log line");
    assert!(line.contains("redriven_by=billing-job"), "{line}");

    // The console's event page names the creator; an event without one shows a dash.
    let cookie = common::console::session(&http, PLAIN_KEY).await;
    let page = http.get(&format!("/console/events/{token_event}"), &[("cookie", &cookie)]).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains(r#"<dd id="created-by"><code>acme-service</code></dd>"#), "{}", page.body);
    let page = http.get(&format!("/console/events/{plain_event}"), &[("cookie", &cookie)]).await;
    assert!(page.body.contains(r#"<dd id="created-by"><span class="empty">—</span></dd>"#), "{}", page.body);

    // The subject, never the credential.
    for id in [&token_event, &scoped_event, &plain_event, &failing] {
        let body = http.get(&format!("/v2/events/{id}"), &[plain]).await.body;
        assert!(!body.contains(&token) && !body.contains(SCOPED_KEY) && !body.contains(PLAIN_KEY), "{body}");
    }
    let logged = gw.log().join("\n");
    assert!(!logged.contains(&token), "the token reached the log");
}
