//! TLS on the listener (SPEC §13): `[tls] cert_file`, `key_file` (PEM), terminated with
//! rustls (ring provider: no OpenSSL to install, no C toolchain beyond `cc`).
//!
//! The certificate lives behind a resolver that [`ListenerTls::reload`] swaps: a handshake
//! reads whichever certificate is current, so a reload (on `SIGHUP`, see
//! [`ListenerTls::reload_on_sighup`]) changes what *new* connections get and never touches
//! an open one. A reload that fails (missing file, bad PEM, a key that does not match the
//! certificate) is logged and counted, and the previous certificate stays.
//!
//! ALPN offers `http/1.1` only: the server speaks HTTP/1.1 (see docs/ARCHITECTURE.md).
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Why a certificate or key could not be loaded; names the file, never its contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsError(String);

impl std::fmt::Display for TlsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsError {}

/// The listener's TLS: an acceptor whose certificate can be replaced while serving.
pub struct ListenerTls {
    cert_file: PathBuf,
    key_file: PathBuf,
    provider: Arc<CryptoProvider>,
    current: Arc<RwLock<Arc<CertifiedKey>>>,
    acceptor: tokio_rustls::TlsAcceptor,
    metrics: Option<oncerpc_core::metrics::Metrics>,
}

/// Hands every handshake the certificate current at that moment.
#[derive(Debug)]
struct Current(Arc<RwLock<Arc<CertifiedKey>>>);

impl ResolvesServerCert for Current {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.read().unwrap_or_else(|e| e.into_inner()).clone())
    }
}

impl ListenerTls {
    /// Load `cert_file` (the chain, leaf first) and `key_file` (PKCS#8, PKCS#1 or SEC1).
    pub fn load(
        cert_file: &Path,
        key_file: &Path,
        metrics: Option<oncerpc_core::metrics::Metrics>,
    ) -> Result<Arc<ListenerTls>, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = certified_key(cert_file, key_file, &provider)?;
        let current = Arc::new(RwLock::new(Arc::new(key)));
        let mut config = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError(format!("tls: {e}")))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Current(current.clone())));
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(ListenerTls {
            cert_file: cert_file.to_owned(),
            key_file: key_file.to_owned(),
            provider,
            current,
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            metrics,
        }))
    }

    /// Read the files again; on success new handshakes get the new certificate, on failure
    /// the previous one stays.
    pub fn reload(&self) -> Result<(), TlsError> {
        let loaded = certified_key(&self.cert_file, &self.key_file, &self.provider);
        if let Some(m) = &self.metrics {
            m.tls_reload(if loaded.is_ok() { "ok" } else { "failed" });
        }
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(loaded?);
        Ok(())
    }

    /// Reload on every `SIGHUP` for as long as the runtime runs (Unix; elsewhere a no-op).
    /// The handler is installed before this returns.
    pub fn reload_on_sighup(self: &Arc<Self>) {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let mut hup = match signal(SignalKind::hangup()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot install the SIGHUP handler: the certificate will not be reloaded");
                    return;
                }
            };
            let tls = self.clone();
            tokio::spawn(async move {
                while hup.recv().await.is_some() {
                    match tls.reload() {
                        Ok(()) => {
                            tracing::info!(cert_file = %tls.cert_file.display(), "SIGHUP: TLS certificate reloaded")
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "SIGHUP: TLS certificate not reloaded, the previous one stays")
                        }
                    }
                }
            });
        }
    }

    pub(crate) fn acceptor(&self) -> &tokio_rustls::TlsAcceptor {
        &self.acceptor
    }
}

fn certified_key(
    cert_file: &Path,
    key_file: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let certs = CertificateDer::pem_file_iter(cert_file)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| TlsError(format!("tls.cert_file {}: {e}", cert_file.display())))?;
    if certs.is_empty() {
        return Err(TlsError(format!("tls.cert_file {}: no certificate in the file", cert_file.display())));
    }
    let key = PrivateKeyDer::from_pem_file(key_file)
        .map_err(|e| TlsError(format!("tls.key_file {}: {e}", key_file.display())))?;
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| TlsError(format!("tls.key_file {}: {e}", key_file.display())))?;
    let certified = CertifiedKey::new(certs, signing);
    certified.keys_match().map_err(|e| {
        TlsError(format!(
            "tls.key_file {} does not belong to tls.cert_file {}: {e}",
            key_file.display(),
            cert_file.display()
        ))
    })?;
    Ok(certified)
}
