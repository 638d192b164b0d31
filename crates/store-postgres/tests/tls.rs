//! The store over real TLS to a real PostgreSQL (`ssl = on`, a server certificate for
//! `localhost` / `127.0.0.1` from a private CA): `ONCERPC_TEST_POSTGRES_TLS_URL` (verify-full),
//! `ONCERPC_TEST_POSTGRES_URL` (the same server, no TLS parameters) and `ONCERPC_TEST_TLS_CA`
//! (the CA's PEM). libpq's `sslmode` meanings, checked from the server's side in `pg_stat_ssl`.
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use oncerpc_core::Store;
use oncerpc_core::testkit::service_url;
use oncerpc_store_postgres::PgStore;

async fn make_store() -> Option<Arc<dyn Store>> {
    let url = service_url("ONCERPC_TEST_POSTGRES_TLS_URL", "PostgreSQL with TLS")?;
    Some(Arc::new(PgStore::connect(&url).await.expect("connect to PostgreSQL over TLS (verify-full)")))
}

oncerpc_core::store_suite!(make_store);

/// The plain URL (no TLS parameters) and the test CA's PEM file; `None`: skip.
fn env() -> Option<(String, String)> {
    let plain = service_url("ONCERPC_TEST_POSTGRES_URL", "PostgreSQL")?;
    let ca = service_url("ONCERPC_TEST_TLS_CA", "the test TLS CA")?;
    Some((plain, ca))
}

/// `url` with `params` added to its query.
fn with(url: &str, params: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{params}")
}

/// An `application_name` no other test uses.
fn unique_app(what: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!("oncerpc_tls_{what}_{}_{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// A CA the server's certificate is not signed by, as a PEM file.
fn wrong_ca() -> tempfile::NamedTempFile {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.distinguished_name.push(rcgen::DnType::CommonName, "not the oncerpc test CA");
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), cert.pem()).unwrap();
    file
}

/// `ssl` of every backend of `app` (`pg_stat_ssl`), asked over a separate plain connection.
async fn ssl_of(plain: &str, app: &str) -> Vec<bool> {
    let (client, conn) =
        tokio_postgres::connect(plain, tokio_postgres::NoTls).await.expect("plain connection");
    let conn = tokio::spawn(conn);
    let rows = client
        .query(
            "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.application_name = $1",
            &[&app],
        )
        .await
        .expect("pg_stat_ssl");
    drop(client);
    let _ = conn.await;
    rows.iter().map(|r| r.get(0)).collect()
}

/// Connect with `url` (which names `app`), use the store once, and say whether its
/// connections are TLS (all of them agree).
async fn store_uses_tls(plain: &str, url: &str, app: &str) -> bool {
    let store = PgStore::connect(url).await.unwrap_or_else(|e| panic!("connect: {e}"));
    store.ping().await.expect("ping");
    let ssl = ssl_of(plain, app).await;
    drop(store);
    assert!(!ssl.is_empty(), "no backend with application_name {app}");
    assert!(ssl.iter().all(|&s| s == ssl[0]), "mixed TLS and plaintext connections: {ssl:?}");
    ssl[0]
}

async fn connect_error(url: &str) -> String {
    match PgStore::connect(url).await {
        Ok(_) => panic!("connect should fail"),
        Err(e) => e.0,
    }
}

/// `host=… hostaddr=… port=… user=… dbname=…` for the server of `plain`, with `host` as the
/// name the certificate is checked against.
async fn key_values_with_host(plain: &str, host: &str) -> String {
    let config: tokio_postgres::Config = plain.parse().expect("plain url");
    let tokio_postgres::config::Host::Tcp(server) = &config.get_hosts()[0] else {
        panic!("the test server is reached over TCP");
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let addr: IpAddr = match server.parse() {
        Ok(ip) => ip,
        Err(_) => tokio::net::lookup_host((server.as_str(), port)).await.unwrap().next().unwrap().ip(),
    };
    format!(
        "host={host} hostaddr={addr} port={port} user={} dbname={}",
        config.get_user().unwrap_or("postgres"),
        config.get_dbname().unwrap_or("postgres")
    )
}

#[tokio::test]
async fn store_connections_are_tls_unless_disabled() {
    let Some((plain, _)) = env() else { return };
    let Some(tls_url) = service_url("ONCERPC_TEST_POSTGRES_TLS_URL", "PostgreSQL with TLS") else { return };
    let app = unique_app("verify_full");
    assert!(store_uses_tls(&plain, &with(&tls_url, &format!("application_name={app}")), &app).await);
    let app = unique_app("disable");
    assert!(
        !store_uses_tls(&plain, &with(&plain, &format!("application_name={app}&sslmode=disable")), &app)
            .await
    );
    // No sslmode: libpq's `prefer`, and this server offers TLS.
    let app = unique_app("prefer");
    assert!(store_uses_tls(&plain, &with(&plain, &format!("application_name={app}")), &app).await);
}

#[tokio::test]
async fn verify_full_with_the_wrong_ca_fails_naming_the_certificate_problem() {
    let Some((plain, _)) = env() else { return };
    let ca = wrong_ca();
    let app = unique_app("wrong_ca");
    let url = with(
        &plain,
        &format!("sslmode=verify-full&sslrootcert={}&application_name={app}", ca.path().display()),
    );
    let e = connect_error(&url).await;
    assert!(e.contains("invalid peer certificate") && e.contains("UnknownIssuer"), "{e}");
    assert!(e.contains(&format!("sslrootcert {}", ca.path().display())), "{e}");
    // The handshake failed, so no session ever ran a statement under that name.
    assert!(ssl_of(&plain, &app).await.is_empty());
}

#[tokio::test]
async fn verify_full_checks_the_host_name_and_verify_ca_does_not() {
    let Some((plain, ca)) = env() else { return };
    let wrong = key_values_with_host(&plain, "wrong.example").await;
    let e = connect_error(&format!("{wrong} sslmode=verify-full sslrootcert={ca}")).await;
    assert!(
        e.contains("invalid peer certificate") && e.contains("not valid for name \"wrong.example\""),
        "{e}"
    );

    let app = unique_app("verify_ca");
    let url = format!("{wrong} sslmode=verify-ca sslrootcert={ca} application_name={app}");
    assert!(store_uses_tls(&plain, &url, &app).await, "verify-ca over TLS");

    // The right name (the certificate has DNS:localhost) passes verify-full.
    let app = unique_app("verify_full_name");
    let right = key_values_with_host(&plain, "localhost").await;
    let url = format!("{right} sslmode=verify-full sslrootcert={ca} application_name={app}");
    assert!(store_uses_tls(&plain, &url, &app).await, "verify-full with the right name");

    // verify-ca still checks the chain.
    let other = wrong_ca();
    let e = connect_error(&format!("{wrong} sslmode=verify-ca sslrootcert={}", other.path().display())).await;
    assert!(e.contains("UnknownIssuer"), "{e}");
}

#[tokio::test]
async fn require_does_not_verify_unless_given_a_root_certificate() {
    let Some((plain, _)) = env() else { return };
    // No sslrootcert: the private CA is unknown here, yet `require` connects, over TLS.
    let app = unique_app("require");
    assert!(
        store_uses_tls(&plain, &with(&plain, &format!("sslmode=require&application_name={app}")), &app).await
    );
    // `hostaddr` without `host` (the address names the server).
    let hostaddr = key_values_with_host(&plain, "unused").await.replace("host=unused ", "");
    assert!(hostaddr.starts_with("hostaddr="), "{hostaddr}");
    let app = unique_app("require_hostaddr");
    assert!(
        store_uses_tls(&plain, &format!("{hostaddr} sslmode=require application_name={app}"), &app).await
    );
    // libpq's rule: with sslrootcert, `require` is `verify-ca`.
    let ca = wrong_ca();
    let e =
        connect_error(&with(&plain, &format!("sslmode=require&sslrootcert={}", ca.path().display()))).await;
    assert!(e.contains("invalid peer certificate") && e.contains("UnknownIssuer"), "{e}");
}

#[tokio::test]
async fn errors_never_contain_the_password() {
    let Some((plain, _)) = env() else { return };
    let password = "Sup3r-s3cret-pw";
    let config: tokio_postgres::Config = plain.parse().expect("plain url");
    let user = config.get_user().unwrap_or("postgres");
    let tokio_postgres::config::Host::Tcp(host) = &config.get_hosts()[0] else { panic!("tcp") };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config.get_dbname().unwrap_or("postgres");
    let base = format!("postgres://{user}:{password}@{host}:{port}/{db}");
    let ca = wrong_ca();
    let urls = [
        // A certificate failure.
        format!("{base}?sslmode=verify-full&sslrootcert={}", ca.path().display()),
        // A bad URL (for the parser and for us).
        format!("{base}?sslmode=verify-everything"),
        format!("{base}?sslmode=require&no_such_option=1"),
        // A missing root file.
        format!("{base}?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem"),
        // Nobody listening.
        format!("postgres://{user}:{password}@127.0.0.1:1/{db}?sslmode=require"),
        // The key=value form.
        format!("host={host} port={port} user={user} dbname={db} password={password} sslmode=bogus"),
        format!(
            "host={host} port={port} user={user} password={password} sslmode=verify-full sslrootcert={}",
            ca.path().display()
        ),
    ];
    for url in urls {
        let e = connect_error(&url).await;
        assert!(!e.contains(password), "{e}");
        assert!(e.starts_with("postgres: "), "{e}");
    }
}
