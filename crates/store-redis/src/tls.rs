//! The client side of `rediss://`: which roots verify the server, and the errors that say why
//! a configuration is refused (never with the URL's password in them).

use std::path::Path;

use oncerpc_core::store::StoreError;
use redis::{ConnectionAddr, IntoConnectionInfo, TlsCertificates};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// A parsed store URL and, with a `ca_file`, the certificates that replace the platform roots.
pub(crate) struct Target {
    /// The standalone client (also used to ask whether the server is a cluster node).
    pub client: redis::Client,
    /// `Some` with a `ca_file`: given to the cluster client too.
    pub certs: Option<TlsCertificates>,
    /// `host:port` for messages.
    pub server: String,
    /// The URL's password, scrubbed from every connect error.
    password: Option<String>,
}

impl Target {
    /// Parse `url`; with `ca_file` (which needs `rediss://`) read its PEM as the only trust root.
    pub fn new(url: &str, ca_file: Option<&Path>) -> Result<Target, StoreError> {
        let redacted = oncerpc_core::redact_url(url);
        let info =
            url.into_connection_info().map_err(|e| StoreError::new(format!("redis url {redacted}: {e}")))?;
        let password = info.redis_settings().password().map(str::to_owned);
        let server = info.addr().to_string();
        let tls = matches!(info.addr(), ConnectionAddr::TcpTls { .. });
        if tls {
            // redis builds its rustls config with the process default: ring, the only provider
            // this workspace compiles (a no-op when one is installed already).
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let Some(ca_file) = ca_file else {
            let client = redis::Client::open(info).map_err(|e| {
                StoreError::new(scrub(format!("redis url {redacted}: {e}"), password.as_deref()))
            })?;
            return Ok(Target { client, certs: None, server, password });
        };
        if !tls {
            return Err(StoreError::new(format!(
                "redis ca_file {}: needs a TLS URL (rediss://…), but the store URL is {redacted}",
                ca_file.display()
            )));
        }
        let certs = TlsCertificates { client_tls: None, root_cert: Some(read_ca(ca_file)?) };
        let client = redis::Client::build_with_tls(info, certs.clone()).map_err(|e| {
            StoreError::new(scrub(format!("redis ca_file {}: {e}", ca_file.display()), password.as_deref()))
        })?;
        Ok(Target { client, certs: Some(certs), server, password })
    }

    /// A connect error as a [`StoreError`]: `what` (e.g. `redis 127.0.0.1:6390`), the cause,
    /// a hint when the certificate's issuer is not trusted, and never the password.
    pub fn error(&self, what: &str, e: &redis::RedisError) -> StoreError {
        let mut msg = format!("{what}: {e}");
        if msg.contains("UnknownIssuer") {
            msg.push_str(if self.certs.is_some() {
                " (the server's certificate is not signed by the CA in store ca_file)"
            } else {
                " (verified against the platform's root certificates: set store ca_file to the PEM of a \
                 private CA)"
            });
        }
        StoreError::new(scrub(msg, self.password.as_deref()))
    }
}

/// The PEM certificates of `path`, checked: at least one, each parseable.
fn read_ca(path: &Path) -> Result<Vec<u8>, StoreError> {
    let named = |what: String| StoreError::new(format!("redis ca_file {}: {what}", path.display()));
    let pem = std::fs::read(path).map_err(|e| named(format!("cannot read it: {e}")))?;
    let mut count = 0usize;
    for cert in CertificateDer::pem_slice_iter(&pem) {
        cert.map_err(|e| named(format!("not a valid PEM certificate file: {e}")))?;
        count += 1;
    }
    if count == 0 {
        return Err(named("no PEM certificate in it (expected -----BEGIN CERTIFICATE-----)".into()));
    }
    Ok(pem)
}

/// `msg` with every occurrence of `password` replaced by `***` (belt and braces: redis's own
/// errors are not expected to carry it).
fn scrub(msg: String, password: Option<&str>) -> String {
    match password {
        Some(p) if !p.is_empty() && msg.contains(p) => msg.replace(p, "***"),
        _ => msg,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrub_hides_the_password() {
        assert_eq!(scrub("auth pw1 failed".into(), Some("pw1")), "auth *** failed");
        assert_eq!(scrub("nothing".into(), Some("")), "nothing");
        assert_eq!(scrub("nothing".into(), None), "nothing");
    }

    #[test]
    fn ca_file_needs_rediss() {
        let e = Target::new("redis://:pw@127.0.0.1:6379", Some(Path::new("/nonexistent/ca.pem")))
            .err()
            .expect("refused");
        assert!(e.0.contains("needs a TLS URL (rediss://"), "{e}");
        assert!(e.0.contains("/nonexistent/ca.pem") && !e.0.contains("pw@"), "{e}");
    }

    #[test]
    fn missing_ca_file_is_named() {
        let e = Target::new("rediss://:pw@127.0.0.1:6390", Some(Path::new("/nonexistent/ca.pem")))
            .err()
            .expect("refused");
        assert!(e.0.contains("redis ca_file /nonexistent/ca.pem: cannot read it"), "{e}");
    }
}
