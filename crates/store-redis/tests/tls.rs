//! The Redis store over real TLS (`ONCERPC_TEST_REDIS_TLS_URL`, a password-protected server
//! with a certificate from the private test CA `ONCERPC_TEST_TLS_CA`, both set by
//! `scripts/test.sh`): the behaviour suite with `ca_file`, and every way verification or
//! authentication fails — each with a clear error that never contains the password.
use std::path::PathBuf;
use std::sync::Arc;

use oncerpc_core::Store;
use oncerpc_store_redis::{RedisOptions, RedisStore};

/// The TLS URL and the CA that signed the server's certificate.
fn service() -> Option<(String, PathBuf)> {
    let url = oncerpc_core::testkit::service_url("ONCERPC_TEST_REDIS_TLS_URL", "Redis with TLS")?;
    let ca = oncerpc_core::testkit::service_url("ONCERPC_TEST_TLS_CA", "the test TLS CA")?;
    Some((url, PathBuf::from(ca)))
}

/// The password in the test URL (`rediss://user:password@host…`).
fn password(url: &str) -> String {
    let userinfo = url.split_once("://").unwrap().1.rsplit_once('@').expect("a password in the URL").0;
    userinfo.split_once(':').expect("user:password").1.to_owned()
}

fn prefix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "oncerpc-tlstest-{}-{}-{}",
        std::process::id(),
        oncerpc_core::store::now_ms(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn with_ca(ca: &std::path::Path) -> RedisOptions {
    RedisOptions { ca_file: Some(ca.to_owned()), ..RedisOptions::new(prefix()) }
}

async fn make_store() -> Option<Arc<dyn Store>> {
    let (url, ca) = service()?;
    let store = RedisStore::connect_with(&url, with_ca(&ca)).await.expect("connect to Redis over TLS");
    assert!(!store.is_cluster(), "ONCERPC_TEST_REDIS_TLS_URL must be a standalone server");
    Some(Arc::new(store))
}

oncerpc_core::store_suite!(make_store);

/// `connect_with` must fail; its error, which must not contain `secret`.
async fn refused(url: &str, options: RedisOptions, secret: &str) -> String {
    let e = match RedisStore::connect_with(url, options).await {
        Ok(_) => panic!("connected, but it should have been refused"),
        Err(e) => e.to_string(),
    };
    assert!(!e.contains(secret), "the error shows the password: {e}");
    eprintln!("refused: {e}");
    e
}

#[tokio::test]
async fn ping_over_tls_with_the_private_ca() {
    let Some((url, ca)) = service() else { return };
    let store = RedisStore::connect_with(&url, with_ca(&ca)).await.expect("connect");
    store.ping().await.expect("PING over TLS");
    // `localhost` is in the certificate too: the name is checked, not only the chain.
    let by_name = url.replace("@127.0.0.1:", "@localhost:");
    let store = RedisStore::connect_with(&by_name, with_ca(&ca)).await.expect("connect by name");
    store.ping().await.expect("PING over TLS");
}

/// The test CA is not among the platform's roots: without `ca_file` the certificate is refused,
/// and the error says so.
#[tokio::test]
async fn platform_roots_refuse_the_private_ca() {
    let Some((url, _)) = service() else { return };
    let e = refused(&url, RedisOptions::new(prefix()), &password(&url)).await;
    let lower = e.to_lowercase();
    assert!(lower.contains("unknownissuer") || lower.contains("unknown issuer"), "{e}");
    assert!(lower.contains("certificate") && e.contains("ca_file"), "names the fix: {e}");
    assert!(e.contains("127.0.0.1:6390"), "names the server: {e}");
}

#[tokio::test]
async fn wrong_password_is_an_auth_error_without_it() {
    let Some((url, ca)) = service() else { return };
    let right = password(&url);
    let wrong = "not-the-right-pw-0xdeadbeef";
    let bad = url.replacen(&format!(":{right}@"), &format!(":{wrong}@"), 1);
    assert_ne!(bad, url);
    let e = refused(&bad, with_ca(&ca), wrong).await;
    assert!(!e.contains(&right), "{e}");
    let upper = e.to_uppercase();
    assert!(upper.contains("WRONGPASS") || upper.contains("AUTH"), "an authentication error: {e}");
    // No password at all: refused too.
    let none = url.replacen(&format!("default:{right}@"), "", 1);
    let e = refused(&none, with_ca(&ca), &right).await;
    assert!(e.to_uppercase().contains("NOAUTH") || e.to_uppercase().contains("AUTH"), "{e}");
}

/// A CA that did not sign the server's certificate.
#[tokio::test]
async fn another_ca_is_an_unknown_issuer() {
    let Some((url, _)) = service() else { return };
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, "oncerpc unrelated test CA");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
    let cert = params.self_signed(&key).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("other-ca.pem");
    std::fs::write(&other, cert.pem()).unwrap();
    let e = refused(&url, with_ca(&other), &password(&url)).await;
    let lower = e.to_lowercase();
    assert!(lower.contains("unknownissuer") || lower.contains("unknown issuer"), "{e}");
    assert!(e.contains("ca_file"), "points at the CA: {e}");
}

#[tokio::test]
async fn ca_file_needs_rediss() {
    let Some((url, ca)) = service() else { return };
    let plain = url.replacen("rediss://", "redis://", 1);
    let e = refused(&plain, with_ca(&ca), &password(&url)).await;
    assert!(e.contains("rediss://"), "{e}");
    assert!(e.contains(&ca.display().to_string()), "names the file: {e}");
    assert!(e.contains("***"), "the URL is shown redacted: {e}");
}

#[tokio::test]
async fn ca_file_that_is_not_pem_is_named() {
    let Some((url, _)) = service() else { return };
    let dir = tempfile::tempdir().unwrap();
    let secret = password(&url);
    let not_pem = dir.path().join("not-a-ca.txt");
    std::fs::write(&not_pem, "this is not a certificate\n").unwrap();
    let e = refused(&url, with_ca(&not_pem), &secret).await;
    assert!(e.contains(&not_pem.display().to_string()) && e.contains("PEM"), "{e}");
    // A PEM block whose content is not base64.
    let broken = dir.path().join("broken.pem");
    std::fs::write(&broken, "-----BEGIN CERTIFICATE-----\n!!not base64!!\n-----END CERTIFICATE-----\n")
        .unwrap();
    let e = refused(&url, with_ca(&broken), &secret).await;
    assert!(e.contains(&broken.display().to_string()), "{e}");
    // A file that does not exist.
    let missing = dir.path().join("missing.pem");
    let e = refused(&url, with_ca(&missing), &secret).await;
    assert!(e.contains(&missing.display().to_string()) && e.contains("cannot read"), "{e}");
}
