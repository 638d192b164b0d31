//! Upstream hygiene (SPEC §12): a step's answer is read up to `[upstream]
//! max_response_bytes`, redirects are not followed unless `follow_redirects = true`, and in
//! production mode a failed step's `error.data` keeps only `step` and `status`.
//!
//! The three attacks of issue "hold the edge" (a 50 MiB answer, a redirect to a server that
//! must never be called, a stack trace in production mode) run against the real `oncerpc`
//! binary on loopback; the hostile upstreams run in the test process. The other tests use an
//! in-process server.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use common::process::{Gateway, Http, TempDir};
use common::upstream::Upstream;
use common::{Answer, TestServer, test_config};
use futures::StreamExt;
use oncerpc::Config;
use oncerpc::config::{MethodConfig, StepConfig, Tenant};
use serde_json::{Value, json};

const API_KEY: &str = "acme-upstream-hygiene-key";
const BIG: usize = 50 * 1024 * 1024;
const CHUNK: usize = 64 * 1024;
const STACK_TRACE: &str = "Traceback (most recent call last):\n  File \"/srv/billing/app/handlers.py\", \
    line 42, in charge\n    db.connect(\"postgres://billing:password=hunter2@db.internal/billing\")\n\
    ConnectionError: password=hunter2 rejected\n";

/// Special upstream routes: `/big` (50 MiB, streamed, chunked), `/big-cl` (announces 50 MiB
/// in its `Content-Length`, then stalls), `/redirect` (`307` to the counting server's `/target`) and `/leak` (500
/// with a stack trace and a password).
struct Special {
    addr: SocketAddr,
    /// Set when a `/big*` stream produced its last chunk: the whole answer was sent.
    big_sent_fully: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct SpecialState {
    target: SocketAddr,
    big_sent_fully: Arc<AtomicBool>,
}

fn big_stream(done: Arc<AtomicBool>) -> Body {
    let n = BIG / CHUNK;
    let chunk = Bytes::from(vec![b' '; CHUNK]);
    Body::from_stream(futures::stream::iter(0..n).map(move |i| {
        if i + 1 == n {
            done.store(true, Ordering::SeqCst);
        }
        Ok::<_, Infallible>(chunk.clone())
    }))
}

async fn big(State(st): State<SpecialState>) -> Response {
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(big_stream(st.big_sent_fully.clone()))
        .unwrap()
}

/// Announces 50 MiB, sends a few bytes, then stalls: only a refusal on the `Content-Length`
/// fails the step at once (reading would wait for the method's deadline, `-32005`).
async fn big_with_length() -> Response {
    let first = futures::stream::once(async { Ok::<_, Infallible>(Bytes::from_static(b"{\"a\":")) });
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, BIG.to_string())
        .body(Body::from_stream(first.chain(futures::stream::pending())))
        .unwrap()
}

async fn redirect(State(st): State<SpecialState>) -> Response {
    Response::builder()
        .status(StatusCode::TEMPORARY_REDIRECT)
        .header(header::LOCATION, format!("http://{}/target", st.target))
        .body(Body::empty())
        .unwrap()
}

async fn leak() -> impl IntoResponse {
    (StatusCode::INTERNAL_SERVER_ERROR, STACK_TRACE)
}

impl Special {
    async fn start(target: SocketAddr) -> Special {
        let big_sent_fully = Arc::new(AtomicBool::new(false));
        let state = SpecialState { target, big_sent_fully: big_sent_fully.clone() };
        let app = Router::new()
            .route("/big", post(big))
            .route("/big-cl", post(big_with_length))
            .route("/redirect", post(redirect))
            .route("/leak", post(leak))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Special { addr, big_sent_fully, task }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for Special {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The redirect target: counts its calls.
struct Target {
    addr: SocketAddr,
    calls: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Target {
    async fn start() -> Target {
        let calls = Arc::new(AtomicUsize::new(0));
        let app = Router::new()
            .route(
                "/target",
                post(|State(calls): State<Arc<AtomicUsize>>, body: String| async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    let input: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                    json!({ "redirected": true, "input": input }).to_string()
                }),
            )
            .with_state(calls.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Target { addr, calls, task }
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn method(name: &str, url: String) -> MethodConfig {
    MethodConfig {
        name: name.into(),
        kind: oncerpc_core::Kind::Command,
        notification_allowed: false,
        timeout_ms: Some(10_000),
        params_schema: None,
        description: None,
        steps: vec![StepConfig { name: "fetch".into(), url, ..Default::default() }],
        ..Default::default()
    }
}

/// The gateway under test: in this process, or the real binary (with its config directory).
enum Server {
    InProcess { _s: TestServer },
    Binary { gw: Gateway, _dir: TempDir },
}

/// A gateway with one flow per special route, `normal` on the echo upstream and `dead` on a
/// refused port.
struct Setup {
    h: Http,
    server: Server,
    special: Special,
    target: Target,
    _echo: Upstream,
}

impl Setup {
    /// The binary's process, for its log.
    fn gateway(&self) -> &Gateway {
        match &self.server {
            Server::Binary { gw, .. } => gw,
            Server::InProcess { .. } => panic!("an in-process server has no process log"),
        }
    }
}

/// The flows of every setup: (name, step URL).
fn flows(special: &Special, echo: &Upstream) -> Vec<(&'static str, String)> {
    vec![
        ("big", special.url("/big")),
        ("big_cl", special.url("/big-cl")),
        ("redirected", special.url("/redirect")),
        ("leaky", special.url("/leak")),
        ("normal", echo.url("fetch")),
        ("dead", "http://127.0.0.1:9/fetch".into()),
    ]
}

/// An in-process gateway with the configuration `edit` makes.
async fn setup(edit: impl FnOnce(&mut Config)) -> Setup {
    let target = Target::start().await;
    let special = Special::start(target.addr).await;
    let echo = Upstream::start().await;
    let mut cfg = test_config();
    cfg.methods = flows(&special, &echo).into_iter().map(|(name, url)| method(name, url)).collect();
    cfg.tenants = vec![Tenant { name: "acme".into(), api_keys: vec![API_KEY.into()], ..Tenant::default() }];
    edit(&mut cfg);
    let s = TestServer::start_with(cfg).await;
    Setup { h: Http::new(s.url("")), server: Server::InProcess { _s: s }, special, target, _echo: echo }
}

/// The real binary on loopback, from a TOML file: `top` (top-level keys, e.g. `mode`), the
/// in-memory store, the tenant and the flows.
async fn setup_binary(top: &str) -> Setup {
    let target = Target::start().await;
    let special = Special::start(target.addr).await;
    let echo = Upstream::start().await;
    let mut toml = format!(
        "{top}\n[store]\nurl = \"memory://\"\n\n[[tenants]]\nname = \"acme\"\napi_keys = [\"{API_KEY}\"]\n"
    );
    for (name, url) in flows(&special, &echo) {
        toml.push_str(&format!(
            "\n[[methods]]\nname = \"{name}\"\nkind = \"command\"\ntimeout_ms = 10000\n\n  \
             [[methods.steps]]\n  name = \"fetch\"\n  url = \"{url}\"\n"
        ));
    }
    let dir = TempDir::new("upstream-hygiene");
    let gw = Gateway::with_config(&dir, &toml);
    Setup { h: gw.http(), server: Server::Binary { gw, _dir: dir }, special, target, _echo: echo }
}

async fn flow(u: &Setup, name: &str, key: &str) -> Answer {
    let h = [("X-API-Key", API_KEY), ("X-Idempotency-Key", key)];
    u.h.post(&format!("/v2/flows/{name}?sync=true"), r#"{"sku":"A"}"#, &h).await
}

async fn rpc(u: &Setup, name: &str, key: &str) -> Answer {
    let body = json!({"jsonrpc":"2.0","method":name,"params":{"sku":"A","idempotency_key":key},"id":1});
    u.h.rpc(body.to_string(), &[("X-API-Key", API_KEY)]).await
}

/// The flows door's `502` for `-32006`; its `data`.
fn upstream_failed(a: &Answer) -> Value {
    assert_eq!(a.status, 502, "{}", a.body);
    let v = a.json();
    assert_eq!(v["rpc_code"], -32006, "{}", a.body);
    v["data"].clone()
}

/// `/rpc`'s `-32006`; its `error.data`.
fn rpc_upstream_failed(a: &Answer) -> Value {
    let v = a.json();
    assert_eq!(v["error"]["code"], -32006, "{}", a.body);
    v["error"]["data"].clone()
}

async fn assert_still_healthy(u: &Setup, key: &str) {
    let ok = flow(u, "normal", key).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(ok.json()["step"], "fetch");
    assert_eq!(u.h.get("/healthz", &[]).await.status, 200);
}

#[tokio::test]
async fn a_50_mib_answer_fails_the_step_quickly_and_the_gateway_stays_healthy() {
    let u = setup_binary("").await;
    let started = Instant::now();
    let a = flow(&u, "big", "big-1").await;
    let data = upstream_failed(&a);
    assert_eq!(data, json!({"step":"fetch","status":200,"reason":"response larger than 1048576 bytes"}));
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    // Reading stopped: the upstream never got to send its last chunk.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!u.special.big_sent_fully.load(Ordering::SeqCst), "the whole 50 MiB was read");

    let r = rpc(&u, "big", "big-rpc").await;
    assert_eq!(rpc_upstream_failed(&r)["reason"], "response larger than 1048576 bytes");
    assert_still_healthy(&u, "after-big").await;
}

#[tokio::test]
async fn a_content_length_over_the_cap_is_refused_before_reading() {
    let u = setup(|cfg| cfg.upstream.max_response_bytes = 4096).await;
    let started = Instant::now();
    let a = flow(&u, "big_cl", "cl-1").await;
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    assert_eq!(
        upstream_failed(&a),
        json!({"step":"fetch","status":200,"reason":"response larger than 4096 bytes"})
    );
    // The cap applies to ordinary answers too; small ones pass.
    assert_still_healthy(&u, "after-cl").await;
}

#[tokio::test]
async fn a_redirect_fails_the_step_and_its_target_is_never_called() {
    let u = setup_binary("").await;
    let a = flow(&u, "redirected", "redir-1").await;
    let data = upstream_failed(&a);
    assert_eq!(data["step"], "fetch");
    assert_eq!(data["status"], 307);
    let r = rpc(&u, "redirected", "redir-rpc").await;
    assert_eq!(rpc_upstream_failed(&r)["status"], 307);
    assert_eq!(u.target.calls(), 0, "the redirect target was called");
}

#[tokio::test]
async fn with_follow_redirects_the_redirect_is_followed() {
    let u = setup(|cfg| cfg.upstream.follow_redirects = true).await;
    let a = flow(&u, "redirected", "follow-1").await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.json(), json!({"redirected": true, "input": {"sku": "A"}}), "307 re-posts the body");
    assert_eq!(u.target.calls(), 1);
}

#[tokio::test]
async fn production_mode_shows_clients_only_the_step_and_status() {
    let u = setup_binary("mode = \"production\"\n").await;
    let port = u.special.addr.port().to_string();
    let leaks = ["hunter2", "Traceback", "handlers.py", "/srv/billing", "127.0.0.1", port.as_str()];

    let a = flow(&u, "leaky", "prod-leak-1").await;
    assert_eq!(upstream_failed(&a), json!({"step":"fetch","status":500}));
    let r = rpc(&u, "leaky", "prod-leak-rpc").await;
    assert_eq!(rpc_upstream_failed(&r), json!({"step":"fetch","status":500}));
    // The stored outcome, replayed, is the same.
    let replay = flow(&u, "leaky", "prod-leak-1").await;
    assert_eq!(replay.header("x-idempotency-status"), Some("duplicate"));
    assert_eq!(replay.body, a.body);

    let big = flow(&u, "big", "prod-big").await;
    assert_eq!(upstream_failed(&big), json!({"step":"fetch","status":200}));
    let redirected = flow(&u, "redirected", "prod-redir").await;
    assert_eq!(upstream_failed(&redirected), json!({"step":"fetch","status":307}));
    // No answer at all: no status, and neither the URL nor the OS error.
    let dead = flow(&u, "dead", "prod-dead").await;
    assert_eq!(upstream_failed(&dead), json!({"step":"fetch"}));
    let dead_rpc = rpc(&u, "dead", "prod-dead-rpc").await;
    assert_eq!(rpc_upstream_failed(&dead_rpc), json!({"step":"fetch"}));

    for answer in [&a, &r, &replay, &big, &redirected, &dead, &dead_rpc] {
        for leak in leaks {
            assert!(!answer.body.contains(leak), "{leak:?} leaked: {}", answer.body);
        }
        assert!(!answer.body.to_lowercase().contains("refused"), "{}", answer.body);
    }
    assert_eq!(u.target.calls(), 0);
    assert_still_healthy(&u, "prod-after").await;

    // What the client was not shown is in the gateway's log, under the call's correlation id.
    let cid = a.header("x-correlation-id").expect("a correlation id");
    let gw = u.gateway();
    let line = gw
        .wait_log(Duration::from_secs(10), |l| l.contains("upstream step failed") && l.contains(cid))
        .await
        .unwrap_or_else(|| panic!("no log line for {cid}: {:#?}", gw.log()));
    for detail in ["Traceback (most recent call last):", "handlers.py", "status=500"] {
        assert!(line.contains(detail), "{detail:?} not in {line}");
    }
}

#[tokio::test]
async fn dev_mode_keeps_the_details_with_a_bounded_body() {
    let u = setup(|_| {}).await;
    let a = flow(&u, "leaky", "dev-leak-1").await;
    let data = upstream_failed(&a);
    assert_eq!((&data["step"], &data["status"]), (&json!("fetch"), &json!(500)));
    assert_eq!(data["body"], STACK_TRACE, "dev mode quotes the upstream body");
    let r = rpc(&u, "leaky", "dev-leak-rpc").await;
    assert!(rpc_upstream_failed(&r)["body"].as_str().unwrap().contains("hunter2"));

    let dead = flow(&u, "dead", "dev-dead").await;
    let err = upstream_failed(&dead)["error"].as_str().unwrap().to_lowercase();
    assert!(err.contains("refused"), "{err}");
    assert!(err.contains("127.0.0.1:9"), "{err}");
}

#[tokio::test]
async fn dev_mode_quotes_at_most_512_bytes_of_an_error_body() {
    // The 50 MiB answer as an error: a 500 with a huge body.
    async fn huge_error() -> Response {
        Response::builder()
            .status(StatusCode::INTERNAL_SERVER_ERROR)
            .body(big_stream(Arc::new(AtomicBool::new(false))))
            .unwrap()
    }
    let app = Router::new().route("/huge-error", post(huge_error));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    let u = setup(|cfg| cfg.methods.push(method("huge_error", format!("http://{addr}/huge-error")))).await;
    let a = flow(&u, "huge_error", "huge-1").await;
    let data = upstream_failed(&a);
    assert_eq!(data["status"], 500);
    assert_eq!(data["body"].as_str().unwrap().len(), 512);
    assert_still_healthy(&u, "after-huge").await;
    server.abort();
}

#[test]
fn the_upstream_section_has_defaults_refuses_unknown_keys_and_a_zero_cap() {
    let cfg = Config::from_toml("").unwrap();
    assert_eq!(cfg.upstream.max_response_bytes, 1_048_576);
    assert!(!cfg.upstream.follow_redirects);
    let cfg = Config::from_toml("[upstream]\nmax_response_bytes = 10\nfollow_redirects = true\n").unwrap();
    assert_eq!(cfg.upstream.max_response_bytes, 10);
    assert!(cfg.upstream.follow_redirects);
    let err = Config::from_toml("[upstream]\nmax_response_byte = 10\n").unwrap_err().to_string();
    assert!(err.contains("max_response_byte"), "{err}");
    let err = Config::from_toml("[upstream]\nmax_response_bytes = 0\n").unwrap_err().to_string();
    assert!(err.contains("upstream.max_response_bytes"), "{err}");
}
