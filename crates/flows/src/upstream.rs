//! The HTTP client every flow step shares (SPEC §12, §13): one connection pool, redirects
//! off unless asked for, and `https://` with rustls (ring provider): the platform's roots plus
//! `[upstream] ca_file`, and a client certificate for upstreams that require mTLS.
//!
//! When a step fails in the handshake, [`tls_reason`] names why in a word a reader can act on
//! (`expired`, `unknown issuer`, `wrong name`, …); it goes to the log line of the failed
//! step, never to a production client.
use std::path::Path;
use std::time::Duration;

use crate::config::UpstreamConfig;

/// Make rustls's ring provider the process default (reqwest, built without a provider of its
/// own, takes the default). Idempotent.
pub fn install_crypto_provider() {
    // Err means a provider is already installed: by an earlier call, or by an embedder.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The client of every flow of an app. Redirects are not followed unless
/// `[upstream] follow_redirects = true`: a `3xx` then fails the step like any non-2xx.
/// Unreadable or invalid certificate files are a config error naming the key and the file.
pub fn client(upstream: &UpstreamConfig) -> Result<reqwest::Client, String> {
    install_crypto_provider();
    let redirect = if upstream.follow_redirects {
        reqwest::redirect::Policy::default()
    } else {
        reqwest::redirect::Policy::none()
    };
    let mut builder = reqwest::Client::builder()
        .pool_idle_timeout(Duration::from_secs(90))
        .connect_timeout(Duration::from_secs(5))
        .redirect(redirect)
        .https_only(false);
    if let Some(path) = &upstream.ca_file {
        let pem = read("upstream.ca_file", path)?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| invalid_file("upstream.ca_file", path, e))?;
        if certs.is_empty() {
            return Err(invalid_file("upstream.ca_file", path, "no certificate in the file"));
        }
        for cert in certs {
            builder = builder.add_root_certificate(cert);
        }
    }
    if let (Some(cert), Some(key)) = (&upstream.client_cert_file, &upstream.client_key_file) {
        let mut pem = read("upstream.client_cert_file", cert)?;
        pem.push(b'\n');
        pem.extend(read("upstream.client_key_file", key)?);
        let identity = reqwest::Identity::from_pem(&pem)
            .map_err(|e| invalid_file("upstream.client_cert_file/client_key_file", cert, e))?;
        builder = builder.identity(identity);
    }
    builder.build().map_err(|e| format!("upstream: the HTTP client cannot be built: {e}"))
}

fn read(key: &str, path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| invalid_file(key, path, e))
}

fn invalid_file(key: &str, path: &Path, e: impl std::fmt::Display) -> String {
    format!("{key} {}: {e}", path.display())
}

/// Why a TLS handshake with an upstream failed, when it did: found in the error's source
/// chain. rustls's error sits inside `io::Error`s (one per layer), whose `source()` skips
/// the error they wrap, so those are opened with `get_ref`.
pub fn tls_reason(e: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return Some(describe(tls));
        }
        cur = match err.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
            Some(inner) => Some(inner as &(dyn std::error::Error + 'static)),
            None => err.source(),
        };
    }
    None
}

fn describe(e: &rustls::Error) -> &'static str {
    use rustls::{AlertDescription as A, CertificateError as C, Error as E};
    match e {
        E::InvalidCertificate(c) => match c {
            C::Expired | C::ExpiredContext { .. } => "expired",
            C::NotValidYet | C::NotValidYetContext { .. } => "not valid yet",
            C::UnknownIssuer => "unknown issuer",
            C::NotValidForName | C::NotValidForNameContext { .. } => "wrong name",
            C::Revoked => "revoked",
            C::BadSignature => "bad signature",
            C::InvalidPurpose | C::InvalidPurposeContext { .. } => "not a server certificate",
            _ => "invalid certificate",
        },
        E::AlertReceived(A::CertificateRequired | A::BadCertificate | A::HandshakeFailure) => {
            "refused by the upstream (client certificate required or not accepted)"
        }
        E::AlertReceived(_) => "alert from the upstream",
        E::NoCertificatesPresented => "no certificate presented",
        E::InvalidMessage(_) | E::InappropriateMessage { .. } | E::InappropriateHandshakeMessage { .. } => {
            "not TLS or a broken handshake"
        }
        _ => "handshake failed",
    }
}
