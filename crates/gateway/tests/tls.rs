//! TLS (SPEC §13) against the real `oncerpc` binary, with certificates the tests make
//! (a private CA, a server certificate, an expired one, one for another name, one from an
//! unknown CA, a client certificate):
//! - flow steps over `https://`, verified through `[upstream] ca_file`; an mTLS upstream that
//!   refuses clients without the certificate; each bad certificate a failed step whose log
//!   line says why, while a production client sees only `{step}`;
//! - `oncerpc serve` with `[tls]` answered by reqwest and by `curl --cacert`, and a `SIGHUP`
//!   after the certificate files are replaced: new connections get the new certificate, a
//!   connection opened before keeps working, and a broken replacement keeps the old one;
//! - the stores over TLS through the binary (`rediss://` with `store.ca_file`, PostgreSQL
//!   with `sslmode=verify-full`), and a wrong CA refusing to start with the reason;
//! - `check-config` for the new keys.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::pki::{Kind, Pair, Pki, client_config, server_config};
use common::process::{Gateway, Http, TempDir};
use common::upstream::Upstream;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const API_KEY: &str = "acme-tls-s3cr3t-api-key";

fn method(name: &str, steps: &[(&str, String)]) -> String {
    let mut out = format!("\n[[methods]]\nname = \"{name}\"\nkind = \"command\"\ntimeout_ms = 10000\n");
    for (step, url) in steps {
        out.push_str(&format!("\n  [[methods.steps]]\n  name = \"{step}\"\n  url = \"{url}\"\n"));
    }
    out
}

async fn call(h: &Http, method: &str, key: &str) -> common::Answer {
    h.post(
        &format!("/v2/flows/{method}?sync=true"),
        json!({"order": key}).to_string(),
        &[("x-api-key", API_KEY), ("x-idempotency-key", key), ("content-type", "application/json")],
    )
    .await
}

/// The upstreams of the flow tests, each a real HTTPS server on loopback.
struct Upstreams {
    pki: Pki,
    client: Pair,
    good: Upstream,
    mtls: Upstream,
    expired: Upstream,
    wrong_name: Upstream,
    unknown: Upstream,
}

impl Upstreams {
    async fn start() -> Upstreams {
        let pki = Pki::new("upstream");
        let stranger = Pki::new("stranger");
        let server = pki.issue(Kind::Server, "server");
        let client = pki.issue(Kind::Client, "client");
        Upstreams {
            good: Upstream::start_tls(server_config(&server, None)).await,
            mtls: Upstream::start_tls(server_config(&server, Some(&pki.ca_file))).await,
            expired: Upstream::start_tls(server_config(&pki.issue(Kind::Expired, "expired"), None)).await,
            wrong_name: Upstream::start_tls(server_config(&pki.issue(Kind::WrongName, "wrong-name"), None))
                .await,
            unknown: Upstream::start_tls(server_config(&stranger.issue(Kind::Server, "stranger"), None))
                .await,
            client,
            pki,
        }
    }

    /// A production gateway whose `[upstream]` is `upstream_section`, with one flow per case.
    fn gateway(&self, dir: &TempDir, upstream_section: &str) -> Gateway {
        let mut toml = format!(
            "mode = \"production\"\n[store]\nurl = \"memory://\"\n\n[upstream]\n{upstream_section}\n\n\
             [[tenants]]\nname = \"acme\"\napi_keys = [\"{API_KEY}\"]\n"
        );
        toml.push_str(&method(
            "orders.create",
            &[("charge", self.good.url("charge")), ("ship", self.mtls.url("ship"))],
        ));
        toml.push_str(&method("mtls.only", &[("ship", self.mtls.url("ship"))]));
        toml.push_str(&method("expired", &[("fetch", self.expired.url("fetch"))]));
        toml.push_str(&method("wrong.name", &[("fetch", self.wrong_name.url("fetch"))]));
        toml.push_str(&method("unknown.issuer", &[("fetch", self.unknown.url("fetch"))]));
        Gateway::with_config(dir, &toml)
    }
}

/// The log line of the failed step of the call whose answer is `a`.
async fn failed_step_line(gw: &Gateway, a: &common::Answer) -> String {
    let cid = a.header("x-correlation-id").expect("a correlation id").to_owned();
    gw.wait_log(Duration::from_secs(10), |l| l.contains("upstream step failed") && l.contains(&cid))
        .await
        .unwrap_or_else(|| panic!("no failed-step line for {cid}: {:#?}", gw.log()))
}

fn error_data(a: &common::Answer) -> Value {
    let v: Value = serde_json::from_str(&a.body).unwrap_or_else(|_| panic!("not JSON: {}", a.body));
    assert_eq!(v["rpc_code"], -32006, "{}", a.body);
    v["data"].clone()
}

#[tokio::test]
async fn https_steps_are_verified_through_ca_file_and_each_bad_certificate_is_named_in_the_log() {
    let up = Upstreams::start().await;
    let dir = TempDir::new("tls-upstream");
    let section = format!(
        "ca_file = \"{}\"\nclient_cert_file = \"{}\"\nclient_key_file = \"{}\"",
        up.pki.ca_file.display(),
        up.client.cert.display(),
        up.client.key.display()
    );
    let gw = up.gateway(&dir, &section);
    let h = gw.http();

    // Both steps over HTTPS, the second one to an upstream that requires the client certificate.
    let a = call(&h, "orders.create", "tls-order-1").await;
    assert_eq!(a.status, 200, "{}", a.body);
    let v: Value = serde_json::from_str(&a.body).unwrap();
    assert_eq!(v["step"], "ship", "{v}");
    assert_eq!(v["input"]["step"], "charge", "the second step got the first one's output: {v}");
    assert_eq!((up.good.count("charge"), up.mtls.count("ship")), (1, 1));
    assert!(up.mtls.calls()[0].idempotency_key.is_some(), "the step key travels over TLS too");

    // The three bad certificates: a failed step each, nothing reached, the reason in the log.
    for (flow, upstream, reason) in [
        ("expired", &up.expired, "expired"),
        ("wrong.name", &up.wrong_name, "wrong name"),
        ("unknown.issuer", &up.unknown, "unknown issuer"),
    ] {
        let a = call(&h, flow, &format!("tls-{flow}")).await;
        assert_eq!(a.status, 502, "{flow}: {}", a.body);
        assert_eq!(error_data(&a), json!({"step": "fetch"}), "{flow}: production shows only the step");
        assert!(!a.body.contains("127.0.0.1") && !a.body.contains("certificate"), "{}", a.body);
        assert_eq!(upstream.calls().len(), 0, "{flow}: no request crossed the bad handshake");
        let line = failed_step_line(&gw, &a).await;
        assert!(
            line.contains(&format!("tls=\"{reason}\"")) || line.contains(&format!("tls={reason}")),
            "{flow}: {line}"
        );
    }
}

#[tokio::test]
async fn an_mtls_upstream_refuses_a_gateway_without_the_client_certificate() {
    let up = Upstreams::start().await;
    let dir = TempDir::new("tls-no-client-cert");
    let gw = up.gateway(&dir, &format!("ca_file = \"{}\"", up.pki.ca_file.display()));
    let a = call(&gw.http(), "mtls.only", "tls-no-cert").await;
    assert_eq!(a.status, 502, "{}", a.body);
    assert_eq!(error_data(&a), json!({"step": "ship"}));
    assert_eq!(up.mtls.count("ship"), 0, "the upstream never took a request");
    assert!(up.mtls.handshakes_failed() >= 1, "the upstream refused the handshake");
    let line = failed_step_line(&gw, &a).await;
    assert!(line.contains("client certificate"), "the reason names the client certificate: {line}");
}

#[tokio::test]
async fn without_ca_file_a_private_ca_is_an_unknown_issuer() {
    // The platform's roots do not include the test CA: the same upstream that passes with
    // `ca_file` fails, by name.
    let up = Upstreams::start().await;
    let dir = TempDir::new("tls-no-ca-file");
    let gw = up.gateway(&dir, "");
    let a = call(&gw.http(), "orders.create", "tls-platform-roots").await;
    assert_eq!(error_data(&a), json!({"step": "charge"}));
    let line = failed_step_line(&gw, &a).await;
    assert!(line.contains("unknown issuer"), "{line}");
    assert_eq!(up.good.count("charge"), 0);
}

// --- the listener ----------------------------------------------------------------------

/// One HTTP/1.1 exchange on an open (TLS) stream: `GET path`, the status and body.
async fn exchange<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    s: &mut S,
    path: &str,
) -> (u16, String) {
    s.write_all(format!("GET {path} HTTP/1.1\r\nhost: localhost\r\n\r\n").as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut chunk))
            .await
            .expect("an answer")
            .unwrap();
        assert!(n > 0, "the connection closed: {}", String::from_utf8_lossy(&buf));
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).into_owned();
        let Some((head, body)) = text.split_once("\r\n\r\n") else { continue };
        let len: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap())
            })
            .expect("a content-length");
        if body.len() >= len {
            let status = head.split(' ').nth(1).unwrap().parse().unwrap();
            return (status, body[..len].to_owned());
        }
    }
}

/// A TLS connection to the gateway trusting only `ca`, and the certificate it was shown.
async fn connect(port: u16, ca: &Path) -> (tokio_rustls::client::TlsStream<tokio::net::TcpStream>, Vec<u8>) {
    let connector = tokio_rustls::TlsConnector::from(client_config(&ca.to_owned()));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let tls = connector.connect(name, tcp).await.expect("handshake");
    let shown = tls.get_ref().1.peer_certificates().expect("a certificate")[0].to_vec();
    (tls, shown)
}

fn install(pair: &Pair, at: &Pair) {
    // Written beside, then renamed: a reload never reads half a file.
    for (from, to) in [(&pair.cert, &at.cert), (&pair.key, &at.key)] {
        let tmp = to.with_extension("new");
        std::fs::copy(from, &tmp).unwrap();
        std::fs::rename(&tmp, to).unwrap();
    }
}

fn sighup(gw: &Gateway) {
    let ok = Command::new("kill").args(["-HUP", &gw.pid().to_string()]).status().unwrap().success();
    assert!(ok, "kill -HUP");
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .map_or(0.0, |v| v.parse().unwrap())
}

#[tokio::test]
async fn serve_with_tls_answers_https_clients_and_reloads_the_certificate_on_sighup() {
    let pki = Pki::new("listener");
    let first = pki.issue(Kind::Server, "first");
    let second = pki.issue(Kind::Server, "second");
    let dir = TempDir::new("tls-listener");
    let live = Pair { cert: dir.file("live.pem"), key: dir.file("live.key") };
    install(&first, &live);
    let gw = Gateway::with_config(
        &dir,
        &format!(
            "[store]\nurl = \"memory://\"\n[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
            live.cert.display(),
            live.key.display()
        ),
    );
    let port = gw.addr.port();
    let base = format!("https://localhost:{port}");

    // reqwest, trusting the test CA only.
    let ca = reqwest::Certificate::from_pem(&std::fs::read(&pki.ca_file).unwrap()).unwrap();
    let client = common::http_client_builder().tls_certs_only([ca]).build().unwrap();
    let r = client
        .post(format!("{base}/rpc"))
        .header("content-type", "application/json")
        .body(r#"{"jsonrpc":"2.0","method":"sum","params":[1,2],"id":7}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), r#"{"jsonrpc":"2.0","result":3,"id":7}"#);

    // curl, trusting the test CA.
    let curl = |ca: &Path| {
        Command::new("curl")
            .args([
                "-sS",
                "--max-time",
                "10",
                "--cacert",
                &ca.display().to_string(),
                &format!("{base}/healthz"),
            ])
            .output()
            .expect("curl (scripts/test.sh installs it)")
    };
    let out = curl(&pki.ca_file);
    assert!(out.status.success(), "curl: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok"), "{}", String::from_utf8_lossy(&out.stdout));
    // ... and refusing a server it cannot verify.
    let stranger = Pki::new("curl-stranger");
    assert!(!curl(&stranger.ca_file).status.success(), "curl verified the server against the wrong CA");

    // Plain HTTP on the TLS port is a failed handshake, counted.
    let plain = common::http_client().get(format!("http://127.0.0.1:{port}/healthz")).send().await;
    assert!(plain.is_err() || plain.unwrap().status() != 200);

    // A connection opened before the reload.
    let (mut before, shown) = connect(port, &pki.ca_file).await;
    assert_eq!(shown, common::pki::cert_der(&first.cert));
    assert_eq!(exchange(&mut before, "/healthz").await.0, 200);

    install(&second, &live);
    sighup(&gw);
    gw.wait_log(Duration::from_secs(10), |l| l.contains("TLS certificate reloaded"))
        .await
        .unwrap_or_else(|| panic!("no reload line: {:#?}", gw.log()));
    let (mut after, shown) = connect(port, &pki.ca_file).await;
    assert_eq!(shown, common::pki::cert_der(&second.cert), "a new connection gets the new certificate");
    assert_eq!(exchange(&mut after, "/healthz").await.0, 200);
    assert_eq!(exchange(&mut before, "/healthz").await.0, 200, "the old connection keeps working");

    // A broken replacement: logged, counted, and the certificate in use stays.
    std::fs::write(&live.cert, "not a certificate").unwrap();
    sighup(&gw);
    gw.wait_log(Duration::from_secs(10), |l| l.contains("not reloaded"))
        .await
        .unwrap_or_else(|| panic!("no failed-reload line: {:#?}", gw.log()));
    let (mut again, shown) = connect(port, &pki.ca_file).await;
    assert_eq!(shown, common::pki::cert_der(&second.cert));
    let (status, metrics) = exchange(&mut again, "/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(metric(&metrics, "oncerpc_tls_reloads_total{outcome=\"ok\"}"), 1.0, "{metrics}");
    assert_eq!(metric(&metrics, "oncerpc_tls_reloads_total{outcome=\"failed\"}"), 1.0, "{metrics}");
    assert!(metric(&metrics, "oncerpc_tls_handshakes_failed_total{reason=\"error\"}") >= 1.0, "{metrics}");
}

#[tokio::test]
async fn a_tls_handshake_that_never_finishes_is_closed_by_the_header_timeout() {
    let pki = Pki::new("listener-slow");
    let pair = pki.issue(Kind::Server, "server");
    let dir = TempDir::new("tls-slow");
    let gw = Gateway::with_config(
        &dir,
        &format!(
            "[store]\nurl = \"memory://\"\n[limits]\nheader_timeout_ms = 300\n[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n",
            pair.cert.display(),
            pair.key.display()
        ),
    );
    // Connect and say nothing: the server closes the connection after the header timeout.
    let mut tcp = tokio::net::TcpStream::connect(gw.addr).await.unwrap();
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(10), tcp.read(&mut buf)).await.expect("closed in time");
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    let (mut s, _) = connect(gw.addr.port(), &pki.ca_file).await;
    let (_, metrics) = exchange(&mut s, "/metrics").await;
    assert_eq!(metric(&metrics, "oncerpc_tls_handshakes_failed_total{reason=\"timeout\"}"), 1.0, "{metrics}");
}

// --- the stores over TLS, through the binary ----------------------------------------------

/// The binary on the store `store` (TOML lines of `[store]`), serving the demo methods.
fn store_gateway(dir: &TempDir, store: &str) -> Gateway {
    Gateway::with_config(
        dir,
        &format!("[store]\n{store}\nredis_prefix = \"{}\"\n", common::process::unique("tls-store")),
    )
}

async fn runs_once(gw: &Gateway) {
    let h = gw.http();
    let body = r#"{"jsonrpc":"2.0","method":"counter.increment","params":{},"id":1}"#;
    let key = common::process::unique("tls-key");
    let first = h.rpc(body, &[("x-idempotency-key", &key)]).await;
    let again = h.rpc(body, &[("x-idempotency-key", &key)]).await;
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.header("x-idempotency-status"), Some("new"), "{}", first.body);
    assert_eq!(again.header("x-idempotency-status"), Some("duplicate"));
    assert_eq!(first.body, again.body);
}

#[tokio::test]
async fn the_gateway_keeps_its_records_in_redis_over_tls_with_store_ca_file() {
    let Some(url) = oncerpc_core::testkit::service_url("ONCERPC_TEST_REDIS_TLS_URL", "Redis with TLS") else {
        return;
    };
    let ca = oncerpc_core::testkit::service_url("ONCERPC_TEST_TLS_CA", "the test CA").unwrap();
    let dir = TempDir::new("tls-redis");
    let gw = store_gateway(&dir, &format!("url = \"{url}\"\nca_file = \"{ca}\""));
    runs_once(&gw).await;
}

#[tokio::test]
async fn the_gateway_keeps_its_records_in_postgres_with_verify_full() {
    let Some(url) =
        oncerpc_core::testkit::service_url("ONCERPC_TEST_POSTGRES_TLS_URL", "PostgreSQL with TLS")
    else {
        return;
    };
    let dir = TempDir::new("tls-pg");
    let gw = store_gateway(&dir, &format!("url = \"{url}\""));
    runs_once(&gw).await;
}

#[test]
fn a_store_behind_a_certificate_from_the_wrong_ca_fails_closed_with_the_reason() {
    let Some(url) =
        oncerpc_core::testkit::service_url("ONCERPC_TEST_POSTGRES_TLS_URL", "PostgreSQL with TLS")
    else {
        return;
    };
    let stranger = Pki::new("pg-stranger");
    let (base, _) = url.split_once("sslrootcert=").unwrap();
    let wrong = format!("{base}sslrootcert={}", stranger.ca_file.display());
    let password = url
        .split_once("://")
        .unwrap()
        .1
        .split_once('@')
        .unwrap()
        .0
        .split_once(':')
        .map(|(_, p)| p.to_owned());
    let dir = TempDir::new("tls-pg-wrong-ca");
    let path = dir.file("oncerpc.toml");
    std::fs::write(&path, format!("[store]\nurl = \"{wrong}\"\n")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_oncerpc"))
        .args(["serve", "--config", &path.display().to_string(), "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    common::process::keep_output(&out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "refused to start: {stderr}");
    assert!(stderr.to_lowercase().contains("unknownissuer") || stderr.contains("unknown issuer"), "{stderr}");
    if let Some(p) = password {
        assert!(!stderr.contains(&p), "the password leaked: {stderr}");
    }
}

// --- check-config ------------------------------------------------------------------------

fn check_config(dir: &TempDir, toml: &str) -> (bool, String) {
    let path = dir.file("check.toml");
    std::fs::write(&path, toml).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_oncerpc"))
        .args(["check-config", &path.display().to_string()])
        .output()
        .unwrap();
    common::process::keep_output(&out);
    (
        out.status.success(),
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
    )
}

#[test]
fn check_config_reads_every_certificate_file_and_names_the_bad_one() {
    let pki = Pki::new("check");
    let pair = pki.issue(Kind::Server, "server");
    let other = pki.issue(Kind::Server, "other");
    let dir = TempDir::new("tls-check");
    let tls = |cert: &Path, key: &Path| {
        format!("[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n", cert.display(), key.display())
    };

    let (ok, out) = check_config(
        &dir,
        &format!("{}[upstream]\nca_file = \"{}\"\n", tls(&pair.cert, &pair.key), pki.ca_file.display()),
    );
    assert!(ok, "{out}");
    assert!(
        out.contains("tls         cert_file=") && out.contains(&pki.ca_file.display().to_string()),
        "{out}"
    );

    let missing = dir.file("missing.pem");
    for (toml, names) in [
        (tls(&missing, &pair.key), vec!["tls.cert_file", "missing.pem"]),
        (tls(&pair.cert, &other.key), vec!["tls.key_file", "does not belong"]),
        (format!("[upstream]\nca_file = \"{}\"\n", pair.key.display()), vec!["upstream.ca_file"]),
        (format!("[upstream]\nclient_cert_file = \"{}\"\n", pair.cert.display()), vec!["client_key_file"]),
        (
            "[store]\nurl = \"postgres://127.0.0.1/x\"\nca_file = \"/x.pem\"\n".to_owned(),
            vec!["store.ca_file", "sslrootcert"],
        ),
    ] {
        let (ok, out) = check_config(&dir, &toml);
        assert!(!ok, "accepted: {toml}");
        for name in names {
            assert!(out.contains(name), "{name:?} not in: {out}");
        }
    }
}
