//! Console sign-in with the identity provider (`[console.oidc]`, SPEC §20), against a real
//! OpenID provider (oidc-provider, `tests/clients/oidc_provider.mjs`) and the real binary,
//! driven by a plain HTTP client that keeps cookies and follows redirects by hand (no script
//! runs on these pages; `console_browser.rs` drives the same in Chromium). A sign-in opens the
//! tenant's session; a tampered or replayed `state`, a code used twice, a callback in another
//! browser, an account of no tenant and a provider that is down or hangs are each a page with
//! its status, counted, logged once, and no code or token is ever logged.

mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::mcp_upstream::free_port;
use common::oidc::{CONSOLE_CLIENT, Provider};
use common::process::{Gateway, TempDir};
use reqwest::Url;

const SECRET_ENV: &str = "ONCERPC_TEST_CONSOLE_OIDC_SECRET";

/// The gateway on `port` (the provider's redirect URL names it), tenants acme and beta, the
/// console's sign-in with `issuer` whose `org_id` claim names the tenant.
fn start_gateway(dir: &TempDir, port: u16, issuer: &str) -> Gateway {
    let (client_id, _) = CONSOLE_CLIENT;
    let toml = format!(
        r#"
[console.oidc]
issuer = "{issuer}"
client_id = "{client_id}"
client_secret = "${{{SECRET_ENV}}}"
redirect_url = "http://127.0.0.1:{port}/console/oidc/callback"
name = "Test IdP"
scopes = ["org"]
tenant_claim = "org_id"

[[tenants]]
name = "acme"
api_keys = ["acme-console-oidc-key-01"]
[[tenants]]
name = "beta"
api_keys = ["beta-console-oidc-key-02"]
"#
    );
    let path = dir.file("oncerpc.toml");
    std::fs::write(&path, toml).unwrap();
    let listen = format!("127.0.0.1:{port}");
    Gateway::start_as(
        &["--config", &path.display().to_string(), "--listen", &listen],
        &[(SECRET_ENV, CONSOLE_CLIENT.1)],
    )
}

/// A browser without scripts: cookies by host (as browsers keep them: not by port), redirects
/// followed by hand.
struct Agent {
    http: reqwest::Client,
    jar: HashMap<(String, String), String>,
}

struct Page {
    status: u16,
    url: Url,
    location: Option<Url>,
    body: String,
}

impl Agent {
    fn new() -> Agent {
        let http = common::http_client_builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        Agent { http, jar: HashMap::new() }
    }

    fn cookies(&self, url: &Url) -> String {
        let host = url.host_str().unwrap_or_default();
        self.jar
            .iter()
            .filter(|((h, _), _)| h == host)
            .map(|((_, n), v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    async fn send(&mut self, req: reqwest::RequestBuilder, url: Url) -> Page {
        let resp = req.header("cookie", self.cookies(&url)).send().await.unwrap();
        let host = url.host_str().unwrap_or_default().to_owned();
        for c in resp.headers().get_all("set-cookie") {
            let c = c.to_str().unwrap();
            let (pair, attrs) = c.split_once(';').unwrap_or((c, ""));
            let (name, value) = pair.split_once('=').unwrap();
            let key = (host.clone(), name.trim().to_owned());
            if value.is_empty() || attrs.to_ascii_lowercase().contains("max-age=0") {
                self.jar.remove(&key);
            } else {
                self.jar.insert(key, value.to_owned());
            }
        }
        let status = resp.status().as_u16();
        let location = resp.headers().get("location").map(|l| url.join(l.to_str().unwrap()).unwrap());
        Page { status, url, location, body: resp.text().await.unwrap() }
    }

    async fn get(&mut self, url: &str) -> Page {
        let url = Url::parse(url).unwrap();
        self.send(self.http.get(url.clone()), url).await
    }

    async fn post_form(&mut self, url: &Url, fields: &[(&str, &str)]) -> Page {
        let mut encoded = Url::parse("http://form.invalid/").unwrap();
        encoded.query_pairs_mut().extend_pairs(fields);
        let body = encoded.query().unwrap_or_default().to_owned();
        let req = self
            .http
            .post(url.clone())
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        self.send(req, url.clone()).await
    }

    /// Follow redirects from `page` until a page that is not one, or one to `stop_at`'s origin
    /// and path (not followed: its URL is returned).
    async fn follow(&mut self, mut page: Page, stop_at: &str) -> Result<Page, Url> {
        for _ in 0..10 {
            let Some(to) = page.location.clone() else { return Ok(page) };
            if to.as_str().starts_with(stop_at) {
                return Err(to);
            }
            page = self.get(to.as_str()).await;
        }
        panic!("too many redirects");
    }
}

/// Start a sign-in at the gateway, log in at the provider's development pages as `login` and
/// consent (each when the provider asks: it remembers a browser it signed in): the callback URL
/// the provider sends the browser to (not yet followed).
async fn to_callback(agent: &mut Agent, gw: &Gateway, login: &str) -> Url {
    let callback = gw.url("/console/oidc/callback");
    let start = agent.get(&gw.url("/console/oidc/start")).await;
    assert_eq!(start.status, 303, "{}", start.body);
    let mut page = agent.follow(start, &callback).await;
    for _ in 0..2 {
        let Ok(p) = page else { break };
        let fields: &[(&str, &str)] = if p.body.contains(r#"name="login""#) {
            &[("prompt", "login"), ("login", login), ("password", "any")]
        } else if p.body.contains(r#"value="consent""#) {
            &[("prompt", "consent")]
        } else {
            panic!("not the provider's login or consent page: {} {}", p.status, p.body)
        };
        let done = agent.post_form(&p.url, fields).await;
        page = agent.follow(done, &callback).await;
    }
    match page {
        Err(to) => to,
        Ok(p) => panic!("the provider did not send the browser back: {} {}", p.status, p.body),
    }
}

async fn refusals(gw: &Gateway, reason: &str) -> u64 {
    let metrics = gw.http().get("/metrics", &[]).await.body;
    let line = format!("oncerpc_console_refusals_total{{reason=\"{reason}\"}} ");
    metrics.lines().find_map(|l| l.strip_prefix(&line)).map_or(0, |n| n.parse().unwrap())
}

fn param(url: &Url, name: &str) -> String {
    url.query_pairs().find(|(k, _)| k == name).map(|(_, v)| v.into_owned()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_in_opens_the_tenants_session_and_its_state_and_code_work_once() {
    let dir = TempDir::new("console-oidc");
    let Some(mut idp) = Provider::new(&dir.0) else { return };
    let port = free_port();
    idp.keygen("k1");
    idp.serve_console(&["k1"], &format!("http://127.0.0.1:{port}/console/oidc/callback")).await;
    let gw = start_gateway(&dir, port, &idp.issuer());

    // The login page offers the provider beside the API key.
    let mut agent = Agent::new();
    let login = agent.get(&gw.url("/console/login")).await;
    assert!(login.body.contains("Sign in with Test IdP") && login.body.contains("api_key"), "{}", login.body);

    // A sign-in: the session is acme's, as the ID token's org_id says.
    let callback = to_callback(&mut agent, &gw, "ada@acme").await;
    let (code, state) = (param(&callback, "code"), param(&callback, "state"));
    assert!(!code.is_empty() && !state.is_empty(), "{callback}");
    let signed_in = agent.get(callback.as_str()).await;
    assert_eq!(signed_in.status, 200, "{}", signed_in.body);
    assert!(signed_in.body.contains(r#"url=/console/events"#), "{}", signed_in.body);
    let status = agent.get(&gw.url("/console/status")).await;
    assert_eq!(status.status, 200, "signed in: {}", status.body);
    assert!(status.body.contains("<strong>acme</strong>"), "{}", status.body);
    assert!(!signed_in.body.contains("eyJ") && !status.body.contains("eyJ"), "no token reaches a page");

    // The same callback again (a replayed state and code): refused, the session it would open
    // is not opened.
    let before = refusals(&gw, "oidc_state").await;
    let mut other = Agent::new();
    let replay = other.get(callback.as_str()).await;
    assert_eq!(replay.status, 400, "{}", replay.body);
    assert!(replay.body.contains("sign in again"), "{}", replay.body);
    let replay = agent.get(callback.as_str()).await;
    assert_eq!(replay.status, 400, "{}", replay.body);
    assert_eq!(refusals(&gw, "oidc_state").await, before + 2);

    // A tampered or unknown state: refused.
    let tampered = agent.get(&gw.url(&format!("/console/oidc/callback?code={code}&state={state}x"))).await;
    assert_eq!(tampered.status, 400);
    assert_eq!(agent.get(&gw.url("/console/oidc/callback?code=x")).await.status, 400, "no state");

    // The code used twice, under a fresh state of this browser: the provider refuses it.
    let start = agent.get(&gw.url("/console/oidc/start")).await;
    let fresh = param(start.location.as_ref().unwrap(), "state");
    let again = agent.get(&gw.url(&format!("/console/oidc/callback?code={code}&state={fresh}"))).await;
    assert_eq!(again.status, 401, "{}", again.body);
    assert!(again.body.contains("refused the sign-in code"), "{}", again.body);
    assert_eq!(refusals(&gw, "oidc_code").await, 1);

    // A sign-in finished in another browser than the one that started it: refused.
    let callback = to_callback(&mut agent, &gw, "ada@acme").await;
    let elsewhere = Agent::new().get(callback.as_str()).await;
    assert_eq!(elsewhere.status, 400, "{}", elsewhere.body);
    assert_eq!(agent.get(callback.as_str()).await.status, 400, "and then it is used up");

    // An account of no tenant of this gateway: refused, no session.
    let mut stranger = Agent::new();
    let callback = to_callback(&mut stranger, &gw, "eve@gamma").await;
    let refused = stranger.get(callback.as_str()).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert!(refused.body.contains("not linked to a tenant"), "{}", refused.body);
    assert_eq!(stranger.get(&gw.url("/console/status")).await.status, 303, "to the login page");
    assert_eq!(refusals(&gw, "oidc_tenant").await, 1);

    // Declined at the provider (its error comes back): refused.
    let start = stranger.get(&gw.url("/console/oidc/start")).await;
    let state = param(start.location.as_ref().unwrap(), "state");
    let declined =
        stranger.get(&gw.url(&format!("/console/oidc/callback?error=access_denied&state={state}"))).await;
    assert_eq!(declined.status, 403);
    assert!(declined.body.contains("(access_denied)"), "{}", declined.body);

    // Each refusal logged once; no code, token, state or secret in the log.
    let log = gw.log().join("\n");
    assert!(log.contains("console sign-in with the identity provider"), "{log}");
    assert_eq!(
        log.matches("reason=\"oidc_tenant\"").count() + log.matches("reason=oidc_tenant").count(),
        1,
        "{log}"
    );
    for secret in [code.as_str(), state.as_str(), fresh.as_str(), "eyJ", CONSOLE_CLIENT.1] {
        assert!(!log.contains(secret), "{secret:?} in the log: {log}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_is_down_or_hangs_is_a_clear_page_within_a_bound() {
    let dir = TempDir::new("console-oidc-down");
    // Down: nothing listens there.
    let down = free_port();
    let gw = start_gateway(&dir, free_port(), &format!("http://127.0.0.1:{down}"));
    let mut agent = Agent::new();
    let t = Instant::now();
    let page = agent.get(&gw.url("/console/oidc/start")).await;
    assert_eq!(page.status, 503, "{}", page.body);
    assert!(page.body.contains("cannot be reached"), "{}", page.body);
    assert!(t.elapsed() < Duration::from_secs(2), "at once: {:?}", t.elapsed());
    assert_eq!(refusals(&gw, "oidc_unavailable").await, 1);
    // The API-key form still works.
    assert_eq!(agent.get(&gw.url("/console/login")).await.status, 200);
    drop(gw);

    // Hanging: it takes the connection and never answers.
    let hang = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let issuer = format!("http://{}", hang.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((c, _)) = hang.accept().await {
            conns.push(c);
        }
    });
    let gw = start_gateway(&dir, free_port(), &issuer);
    let t = Instant::now();
    let page = agent.get(&gw.url("/console/oidc/start")).await;
    assert_eq!(page.status, 503, "{}", page.body);
    assert!(t.elapsed() < Duration::from_secs(8), "bounded: {:?}", t.elapsed());
    held.abort();
}
