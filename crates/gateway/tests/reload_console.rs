//! `[console]` reloads like the rest of the file (SPEC "Reloading the configuration"): a real
//! `oncerpc serve`, its file rewritten and `SIGHUP` sent. A changed `redact` applies to the
//! next page, `enabled = false` takes `/console` away and turning it on again finds the
//! operator still signed in (sessions outlive reloads); the status page shows the served
//! configuration and the last reload's outcome, a failed one included.

mod common;

use common::process::unique;
use common::reload::Reloadable;
use common::upstream::Upstream;
use serde_json::json;

const KEY: &str = "acme-console-key-0123456789";
const CARD: &str = "4111111111111111";

fn config(up: &Upstream, console: &str) -> String {
    format!(
        r#"
[store]
url = "memory://"

[console]
{console}

[[tenants]]
name = "acme"
api_keys = ["{KEY}"]

[[methods]]
name = "orders.create"
kind = "command"

  [[methods.steps]]
  name = "charge"
  url = "{charge}"
"#,
        charge = up.url("charge"),
    )
}

/// A client that keeps no cookies and follows no redirects: every header is the test's own.
fn client() -> reqwest::Client {
    common::http_client_builder().redirect(reqwest::redirect::Policy::none()).build().unwrap()
}

/// `GET path` with the session cookie: status and body.
async fn page(c: &reqwest::Client, base: &str, path: &str, cookie: &str) -> (u16, String) {
    let resp = c.get(format!("{base}{path}")).header("cookie", cookie).send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_reloads_keeps_its_sessions_and_shows_the_last_reload() {
    let up = Upstream::start().await;
    let mut gw = Reloadable::start("reload-console", &config(&up, ""), &[]);
    let base = gw.gw.url("");
    let c = client();
    let cookie = common::console::session(&gw.gw.http(), KEY).await;

    let body = json!({"sku": "A", "card": {"number": CARD}});
    let key = unique("console-order");
    let a = gw
        .gw
        .http()
        .post("/v2/flows/orders.create", body.to_string(), &[("X-API-Key", KEY), ("Idempotency-Key", &key)])
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    let event = format!("/console/events/{}", a.json()["event_id"].as_str().expect("an event id"));
    let (status, shown) = page(&c, &base, &event, &cookie).await;
    assert_eq!(status, 200);
    assert!(shown.contains(CARD), "nothing is redacted yet");
    let (_, status_page) = page(&c, &base, "/console/status", &cookie).await;
    assert!(status_page.contains("none since start"), "{status_page}");

    // redact changes: the next page hides the card, and the operator is still signed in.
    // The card is in the params and in the step's output (the upstream echoes its input).
    let last = gw.reload(&config(&up, "redact = [\"/card/number\", \"/input/card/number\"]")).await;
    assert_eq!(last["outcome"], "ok", "{last}");
    let (status, shown) = page(&c, &base, &event, &cookie).await;
    assert_eq!(status, 200, "the session outlived the reload");
    assert!(shown.contains("[redacted]") && !shown.contains(CARD), "the new redact applies");
    let (_, status_page) = page(&c, &base, "/console/status", &cookie).await;
    let hash = gw.config().await["hash"].as_str().unwrap().to_owned();
    assert!(status_page.contains(&hash[..12]), "the served config's hash: {status_page}");
    let reload_card = status_page.split("id=\"last-reload\"").nth(1).expect("the last reload");
    assert!(reload_card.contains("ok") && reload_card.contains("#1 at"), "{reload_card}");
    assert!(!gw.gw.log().join("\n").contains("need a restart"), "[console] is not restart-only any more");

    // Off: /console is gone. On again: the same session still works.
    assert_eq!(gw.reload(&config(&up, "enabled = false")).await["outcome"], "ok");
    assert_eq!(page(&c, &base, &event, &cookie).await.0, 404);
    assert_eq!(page(&c, &base, "/console/login", "").await.0, 404);
    assert_eq!(gw.reload(&config(&up, "")).await["outcome"], "ok");
    let (status, shown) = page(&c, &base, &event, &cookie).await;
    assert_eq!(status, 200, "signed in still");
    assert!(shown.contains(CARD), "redact is empty again");

    // A file that fails changes nothing, and the status page says so.
    let broken = config(&up, "").replace("[console]", "[console");
    let last = gw.reload(&broken).await;
    assert_eq!(last["outcome"], "failed", "{last}");
    let (_, status_page) = page(&c, &base, "/console/status", &cookie).await;
    let reload_card = status_page.split("id=\"last-reload\"").nth(1).expect("the last reload");
    assert!(reload_card.contains("failed") && reload_card.contains("parse"), "{reload_card}");
    assert!(reload_card.contains("#4 at") && reload_card.contains("nothing changed"), "{reload_card}");
}
