//! The console in a real browser (SPEC §18): headless Chromium driven over WebDriver
//! (Debian's `chromium` and `chromium-driver`, installed by `scripts/test.sh`), against a real
//! oncerpc server and a real upstream on loopback. An operator logs in, filters to the failed
//! events, opens one, sees its steps, re-drives it and sees it succeed without a reload;
//! another tenant's event is not found, a wrong key cannot log in, and a form posted without
//! its CSRF token is refused.
//!
//! Outside CI a missing browser skips the test with a printed reason; in CI it is a failure.
//! `ONCERPC_CONSOLE_SCREENSHOTS=<dir>` saves screenshots of the main pages there (the ones in
//! `docs/` were made so).

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::process::TempDir;
use common::upstream::{Upstream, flow};
use common::{TestServer, test_config};
use fantoccini::{Client, ClientBuilder, Locator};
use oncerpc::config::Tenant;
use serde_json::{Value, json};

const ACME_KEY: &str = "acme-console-key-0001";
const BETA_KEY: &str = "beta-console-key-0002";
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// chromedriver, stopped when dropped.
struct Driver {
    child: Child,
    port: u16,
    _profile: TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Driver {
    /// Start chromedriver on a free loopback port; `None` (skipped) when it is not installed
    /// outside CI.
    async fn start() -> Option<Driver> {
        let present = std::path::Path::new(CHROMEDRIVER).exists() && std::path::Path::new(CHROMIUM).exists();
        if !present {
            assert!(!in_ci(), "chromium and chromedriver are required in CI (scripts/test.sh installs them)");
            eprintln!(
                "SKIPPED: {CHROMIUM} or {CHROMEDRIVER} is missing (run ./scripts/test.sh to install them)"
            );
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let driver = Driver { child, port, _profile: TempDir::new("chromium") };
        for _ in 0..300 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
                return Some(driver);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("chromedriver did not listen on {port}");
    }

    async fn browser(&self) -> Client {
        let caps = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1280,900", format!("--user-data-dir={}", self._profile.0.display())],
            },
        });
        let Value::Object(caps) = caps else { unreachable!() };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        ClientBuilder::new(connector)
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{}", self.port))
            .await
            .expect("a WebDriver session")
    }
}

async fn submit(s: &TestServer, query: &str, body: Value, key: &str) -> String {
    let a = s
        .post_path(&format!("/v2/flows/orders.create{query}"), body.to_string(), &[("X-API-Key", key)])
        .await;
    assert_eq!(a.status, 200, "{}", a.body);
    a.json()["event_id"].as_str().expect("an event id").to_owned()
}

async fn finished(s: &TestServer, id: &str, key: &str) -> String {
    for _ in 0..400 {
        let v = s.get_with(&format!("/v2/events/{id}"), &[("X-API-Key", key)]).await.json();
        if v["status"] != "processing" {
            return v["status"].as_str().unwrap().to_owned();
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("event {id} did not finish");
}

async fn created_at(s: &TestServer, id: &str) -> String {
    let v = s.get_with(&format!("/v2/events/{id}"), &[("X-API-Key", ACME_KEY)]).await.json();
    v["created_at"].as_str().unwrap().to_owned()
}

async fn text(b: &Client, css: &str) -> String {
    b.find(Locator::Css(css)).await.unwrap_or_else(|e| panic!("{css}: {e}")).text().await.unwrap()
}

/// Wait (bounded) until the element's text is `want`.
async fn wait_text(b: &Client, css: &str, want: &str) {
    for _ in 0..300 {
        if let Ok(e) = b.find(Locator::Css(css)).await
            && e.text().await.is_ok_and(|t| t.trim() == want)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{css} never read {want:?}; page: {}", b.source().await.unwrap_or_default());
}

async fn screenshot(b: &Client, name: &str) {
    if let Ok(dir) = std::env::var("ONCERPC_CONSOLE_SCREENSHOTS") {
        let png = b.screenshot().await.expect("a screenshot");
        std::fs::write(std::path::Path::new(&dir).join(name), png).expect("screenshot written");
    }
}

/// A `POST` from the logged-in page itself (same origin, with its cookie): the status.
async fn post_from_page(b: &Client, path: &str, body: &str) -> u64 {
    let script = r#"
        const [path, body, done] = arguments;
        fetch(path, {method: 'POST', headers: {'content-type': 'application/x-www-form-urlencoded'}, body})
            .then(r => done(r.status), e => done(String(e)));
    "#;
    let status = b.execute_async(script, vec![json!(path), json!(body)]).await.expect("the script ran");
    status.as_u64().unwrap_or_else(|| panic!("fetch failed: {status}"))
}

/// Submit the login form and wait (bounded) for the answer page.
async fn log_in(b: &Client, s: &TestServer, key: &str) {
    b.goto(&s.url("/console/login")).await.unwrap();
    b.find(Locator::Css("#api_key")).await.unwrap().send_keys(key).await.unwrap();
    click_and_load(b, "form button[type=submit]").await;
}

/// Click what starts a navigation and wait (bounded) for the new page: a click does not wait for
/// the navigation it starts, so the old document is watched until it is gone. Without this, the
/// old page can answer the next look-up.
async fn click_and_load(b: &Client, css: &str) {
    let old = b.find(Locator::Css("html")).await.unwrap();
    b.find(Locator::Css(css)).await.unwrap().click().await.unwrap();
    for _ in 0..300 {
        if old.tag_name().await.is_err() {
            b.wait().for_element(Locator::Css("body")).await.expect("the new page loaded");
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("clicking {css} never led to a new page; page: {}", b.source().await.unwrap_or_default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_finds_a_failed_event_and_redrives_it_in_a_real_browser() {
    let Some(driver) = Driver::start().await else { return };
    let up = Upstream::start().await;
    let mut cfg = test_config();
    cfg.methods = vec![flow("orders.create", &up, &["reserve", "confirm"])];
    cfg.tenants = vec![
        Tenant { name: "acme".into(), api_keys: vec![ACME_KEY.into()], ..Tenant::default() },
        Tenant { name: "beta".into(), api_keys: vec![BETA_KEY.into()], ..Tenant::default() },
    ];
    cfg.console.redact = vec!["/card/number".into()];
    let s = TestServer::start_with(cfg).await;

    // One succeeded event, one failed (its tag holds HTML), and one of another tenant.
    let ok = submit(&s, "?tags=web", json!({"sku": "A"}), ACME_KEY).await;
    assert_eq!(finished(&s, &ok, ACME_KEY).await, "succeeded");
    up.set_fail(true);
    let card = json!({"sku": "B", "card": {"number": "4111111111111111", "holder": "Ada"}});
    let failed = submit(&s, "?tags=eu,%3Cb%3Ebold%3C%2Fb%3E", card, ACME_KEY).await;
    assert_eq!(finished(&s, &failed, ACME_KEY).await, "failed");
    let foreign = submit(&s, "", json!({"sku": "C"}), BETA_KEY).await;
    assert_eq!(finished(&s, &foreign, BETA_KEY).await, "failed");
    up.set_fail(false);

    let b = driver.browser().await;

    // Without a session every page leads to the login; a wrong key cannot log in.
    b.goto(&s.url("/console/events")).await.unwrap();
    assert_eq!(b.current_url().await.unwrap().path(), "/console/login");
    screenshot(&b, "console-login.png").await;
    log_in(&b, &s, "not-the-key").await;
    assert_eq!(text(&b, "p.error").await, "That API key is not valid.");
    b.goto(&s.url("/console/events")).await.unwrap();
    assert_eq!(b.current_url().await.unwrap().path(), "/console/login", "no session was opened");

    // The right key: the tenant's events, newest first, with live counts per status.
    log_in(&b, &s, ACME_KEY).await;
    assert_eq!(b.current_url().await.unwrap().path(), "/console/events");
    assert!(!b.source().await.unwrap().contains(ACME_KEY), "the key never reaches a page");
    let listed: Vec<String> = futures::future::join_all(
        b.find_all(Locator::Css("a.event")).await.unwrap().iter().map(|a| a.text()),
    )
    .await
    .into_iter()
    .map(Result::unwrap)
    .collect();
    assert_eq!(listed, vec![failed.clone(), ok.clone()], "newest first, the other tenant's not listed");
    assert_eq!(text(&b, ".count.failed .n").await, "1");
    assert_eq!(text(&b, ".count.succeeded .n").await, "1");
    // A tag holding HTML is shown as text.
    let tags = text(&b, "td.tags").await;
    assert!(tags.contains("<b>bold</b>"), "{tags}");
    assert!(b.find_all(Locator::Css("td.tags b")).await.unwrap().is_empty(), "no element was made of it");

    // The time range: up to the first event's creation, or from the second's.
    let (ok_at, failed_at) = (created_at(&s, &ok).await, created_at(&s, &failed).await);
    assert_ne!(ok_at, failed_at, "{ok_at}");
    b.goto(&s.url(&format!("/console/events?to={ok_at}"))).await.unwrap();
    assert_eq!(text(&b, "a.event").await, ok);
    assert_eq!(b.find_all(Locator::Css("a.event")).await.unwrap().len(), 1);
    b.goto(&s.url(&format!("/console/events?from={failed_at}"))).await.unwrap();
    assert_eq!(text(&b, "a.event").await, failed);
    assert_eq!(b.find_all(Locator::Css("a.event")).await.unwrap().len(), 1);
    b.goto(&s.url("/console/events")).await.unwrap();

    // Filter to the failed ones.
    b.find(Locator::Css("select[name=status] option[value=failed]")).await.unwrap().click().await.unwrap();
    click_and_load(&b, "#filter").await;
    wait_text(&b, "a.event", &failed).await;
    assert_eq!(b.find_all(Locator::Css("a.event")).await.unwrap().len(), 1);
    assert_eq!(
        b.current_url().await.unwrap().query_pairs().find(|(k, _)| k == "status").unwrap().1,
        "failed"
    );
    screenshot(&b, "console-events.png").await;

    // Open it: params redacted, each step with its status, attempts and step key.
    click_and_load(&b, "a.event").await;
    wait_text(&b, "#status", "failed").await;
    let page = b.source().await.unwrap();
    assert!(page.contains("[redacted]") && !page.contains("4111111111111111"), "the card number is redacted");
    assert!(page.contains("Ada"), "the rest of the params is shown");
    assert_eq!(text(&b, "tr.step[data-step=reserve] td:nth-child(2)").await, "failed");
    assert_eq!(text(&b, "tr.step[data-step=reserve] td.attempts").await, "1");
    assert!(b.find(Locator::Css("tr.step[data-step=reserve] code.key")).await.is_ok(), "its step key");
    assert!(b.find_all(Locator::Css("tr.step[data-step=confirm]")).await.unwrap().is_empty());

    // A form posted without its CSRF token is refused, and nothing ran.
    let redrive_path = format!("/console/events/{failed}/redrive");
    assert_eq!(post_from_page(&b, &redrive_path, "").await, 403);
    assert_eq!(post_from_page(&b, &redrive_path, "csrf=forged").await, 403);
    assert_eq!(finished(&s, &failed, ACME_KEY).await, "failed");

    // Re-drive it, with the confirmation; the outcome appears without a reload.
    b.execute("window.__same_page = true", vec![]).await.unwrap();
    b.find(Locator::Css("#redrive")).await.unwrap().click().await.unwrap();
    screenshot(&b, "console-event.png").await;
    b.find(Locator::Css("#confirm-redrive")).await.unwrap().click().await.unwrap();
    wait_text(&b, "#status", "succeeded").await;
    assert_eq!(b.execute("return window.__same_page === true", vec![]).await.unwrap(), json!(true));
    assert_eq!(text(&b, "tr.step[data-step=confirm] td:nth-child(2)").await, "succeeded");
    assert!(b.find(Locator::Css("#result pre.json")).await.is_ok(), "the result is shown");
    assert_eq!(finished(&s, &failed, ACME_KEY).await, "succeeded");
    screenshot(&b, "console-event-redriven.png").await;

    // A succeeded event offers no re-drive, and one forced is refused (409).
    assert!(b.find_all(Locator::Css("#redrive")).await.unwrap().is_empty());
    let csrf =
        b.find(Locator::Css("header form input[name=csrf]")).await.unwrap().attr("value").await.unwrap();
    let body = format!("csrf={}", csrf.expect("the session's token"));
    assert_eq!(post_from_page(&b, &redrive_path, &body).await, 409);

    // Another tenant's event is not found.
    b.goto(&s.url(&format!("/console/events/{foreign}"))).await.unwrap();
    assert_eq!(text(&b, "h1").await, "404 Not Found");
    assert_eq!(post_from_page(&b, &format!("/console/events/{foreign}/redrive"), &body).await, 404);

    // The status page.
    b.goto(&s.url("/console/status")).await.unwrap();
    assert_eq!(text(&b, "#store-health").await, "ok");
    assert!(text(&b, "#background").await.ends_with("/ 1024"));
    screenshot(&b, "console-status.png").await;

    // Back on the events: the counts follow the re-drive.
    b.goto(&s.url("/console/events")).await.unwrap();
    assert_eq!(text(&b, ".count.succeeded .n").await, "2");
    assert_eq!(text(&b, ".count.failed .n").await, "0");

    // Logging out ends the session.
    click_and_load(&b, "header form button").await;
    b.goto(&s.url("/console/events")).await.unwrap();
    assert_eq!(b.current_url().await.unwrap().path(), "/console/login");

    b.close().await.unwrap();
    s.stop().await;
}

/// Sign-in with the identity provider (`[console.oidc]`) in the real browser, against a real
/// OpenID provider (oidc-provider) and its development login and consent pages. The console is
/// opened at `localhost` and the provider at `127.0.0.1`: two sites, as in production, so the
/// way back from the provider is a cross-site navigation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_signs_in_with_the_identity_provider_in_a_real_browser() {
    let dir = TempDir::new("console-browser-oidc");
    let Some(mut idp) = common::oidc::Provider::new(&dir.0) else { return };
    let Some(driver) = Driver::start().await else { return };
    let port = common::mcp_upstream::free_port();
    let redirect = format!("http://localhost:{port}/console/oidc/callback");
    idp.keygen("k1");
    idp.serve_console(&["k1"], &redirect).await;
    let mut cfg = test_config();
    cfg.listen = format!("127.0.0.1:{port}");
    cfg.tenants = vec![
        Tenant { name: "acme".into(), api_keys: vec![ACME_KEY.into()], ..Tenant::default() },
        Tenant { name: "beta".into(), api_keys: vec![BETA_KEY.into()], ..Tenant::default() },
    ];
    let (client_id, client_secret) = common::oidc::CONSOLE_CLIENT;
    cfg.console.oidc = Some(oncerpc::console_oidc::ConsoleOidc {
        issuer: idp.issuer(),
        client_id: client_id.into(),
        client_secret: client_secret.into(),
        redirect_url: redirect,
        name: Some("Test IdP".into()),
        scopes: vec!["org".into()],
        tenant: None,
        tenant_claim: Some("org_id".into()),
    });
    let s = TestServer::start_with(cfg).await;
    let console = |path: &str| format!("http://localhost:{port}{path}");

    let b = driver.browser().await;
    b.goto(&console("/console/login")).await.unwrap();
    assert_eq!(text(&b, "#oidc").await, "Sign in with Test IdP");
    assert!(b.find(Locator::Css("#api_key")).await.is_ok(), "the API-key form stays");
    click_and_load(&b, "#oidc").await;

    // The provider's own pages: any login, any password; then consent.
    let at = b.current_url().await.unwrap();
    assert_eq!(at.port(), Some(idp.port), "at the provider: {at}");
    b.find(Locator::Css("input[name=login]")).await.unwrap().send_keys("beta-ops@beta").await.unwrap();
    b.find(Locator::Css("input[name=password]")).await.unwrap().send_keys("any password").await.unwrap();
    click_and_load(&b, "button[type=submit]").await;
    click_and_load(&b, "button[type=submit]").await;

    // Back at the console, signed in as the ID token's tenant.
    for _ in 0..100 {
        if b.current_url().await.unwrap().path() == "/console/events" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(b.current_url().await.unwrap().path(), "/console/events", "{}", b.source().await.unwrap());
    b.goto(&console("/console/status")).await.unwrap();
    assert_eq!(text(&b, "#store-health").await, "ok");
    assert_eq!(text(&b, "span.tenant strong").await, "beta");
    assert!(!b.source().await.unwrap().contains("eyJ"), "no token reaches a page");

    // Logging out ends that session like any other.
    click_and_load(&b, "header form button").await;
    b.goto(&console("/console/events")).await.unwrap();
    assert_eq!(b.current_url().await.unwrap().path(), "/console/login");

    b.close().await.unwrap();
    s.stop().await;
}
