//! libpq's `sslmode` and `sslrootcert` for `tokio-postgres` with rustls (ring provider): a
//! connection URL becomes a [`tokio_postgres::Config`] and the [`MakeRustlsConnect`] that
//! verifies the server as the mode asks.
//!
//! `tokio-postgres` itself knows only `disable`, `prefer` and `require`, and no `sslrootcert`:
//! both are taken out of the URL here (the rest is parsed by `tokio-postgres` unchanged), and
//! the verifying modes run as its `require` with a verifier that does the checking.
//!
//! | `sslmode`          | TLS                          | certificate checked               |
//! |--------------------|------------------------------|-----------------------------------|
//! | `disable`          | never                        | –                                 |
//! | `prefer` (default) | if the server offers it      | no                                |
//! | `require`          | always                       | no; with `sslrootcert` as `verify-ca` (libpq's rule) |
//! | `verify-ca`        | always                       | chain to the roots, not the name  |
//! | `verify-full`      | always                       | chain to the roots and host name  |
//!
//! Roots: `sslrootcert=PATH` (PEM, one or more certificates), `sslrootcert=system` (the OS
//! roots; as in libpq it implies `verify-full` and refuses weaker modes), else libpq's default
//! `~/.postgresql/root.crt`, which the verifying modes need to exist.
//!
//! "No verification" still checks the handshake signatures (the server holds the key of the
//! certificate it sent); it only skips the question of who issued that certificate.
//!
//! Differences from libpq: `prefer` never verifies and never retries in plaintext after a
//! failed handshake; `allow`, client certificates (`sslcert`, `sslkey`), CRLs and the `PGSSL*`
//! environment variables are not supported. The TLS host name is `host`; with `hostaddr`
//! alone it is the address, except in `verify-full`, which needs a `host` to check.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio_postgres_rustls::MakeRustlsConnect;

/// libpq's `sslmode` values (`allow` excepted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<SslMode, String> {
        Ok(match value {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            "allow" => return Err("sslmode `allow` is not supported (use `disable` or `prefer`)".into()),
            other => {
                return Err(format!(
                    "unknown sslmode `{other}` (expected disable, prefer, require, verify-ca or verify-full)"
                ));
            }
        })
    }

    fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    fn verifies(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyFull)
    }
}

/// Where the roots that verify the server come from (`sslrootcert`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum RootCert {
    /// A PEM file.
    File(PathBuf),
    /// `system`: the OS roots.
    System,
}

/// A connection URL, parsed: the `tokio-postgres` configuration and the TLS settings.
pub(crate) struct Target {
    /// Everything but `sslmode`/`sslrootcert`, as `tokio-postgres` parses it; its SSL mode is
    /// set from [`Target::mode`].
    pub config: tokio_postgres::Config,
    /// The effective mode (`require` with `sslrootcert` is `verify-ca`).
    pub mode: SslMode,
    pub root_cert: Option<RootCert>,
}

impl Target {
    /// Parse a `postgres://` / `postgresql://` URL or a `key=value …` string. Errors name the
    /// URL with its password hidden.
    pub fn parse(url: &str) -> Result<Target, String> {
        let split = split(url)?;
        let context = |e: String| format!("url {}: {e}", split.redacted);
        let mode = split.sslmode.as_deref().map(SslMode::parse).transpose().map_err(context)?;
        let root_cert = match split.sslrootcert.as_deref() {
            None | Some("") => None,
            Some("system") => Some(RootCert::System),
            Some(path) => Some(RootCert::File(PathBuf::from(path))),
        };
        let mode = match (mode, &root_cert) {
            // libpq: the OS roots are for `verify-full` only (a public CA signs anyone's name).
            (None | Some(SslMode::VerifyFull), Some(RootCert::System)) => SslMode::VerifyFull,
            (Some(weak), Some(RootCert::System)) => {
                return Err(context(format!(
                    "weak sslmode `{}` may not be used with sslrootcert=system (use verify-full)",
                    weak.name()
                )));
            }
            // libpq: a root certificate makes `require` verify the chain.
            (Some(SslMode::Require), Some(_)) => SslMode::VerifyCa,
            (mode, _) => mode.unwrap_or(SslMode::Prefer),
        };
        let mut config: tokio_postgres::Config =
            split.rest.parse().map_err(|e: tokio_postgres::Error| context(crate::error_chain(&e)))?;
        config.ssl_mode(match mode {
            SslMode::Disable => tokio_postgres::config::SslMode::Disable,
            SslMode::Prefer => tokio_postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => {
                tokio_postgres::config::SslMode::Require
            }
        });
        // `tokio-postgres` names the TLS server after `host` and refuses TLS without one; with
        // `hostaddr` alone the address stands in for it, except in `verify-full` (as in libpq,
        // the name to check must be given).
        if config.get_hosts().is_empty() && mode != SslMode::VerifyFull {
            for addr in config.get_hostaddrs().to_vec() {
                config.host(addr.to_string());
            }
        }
        Ok(Target { config, mode, root_cert })
    }

    /// The TLS connector for [`Target::mode`]; reads the roots of the verifying modes.
    pub fn connector(&self) -> Result<MakeRustlsConnect, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier: Arc<dyn ServerCertVerifier> = if self.mode.verifies() {
            let roots = load_roots(self.mode, self.root_cert.as_ref(), home_dir().as_deref())?;
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|e| format!("sslrootcert: {e}"))?;
            match self.mode {
                SslMode::VerifyCa => Arc::new(ChainOnly(webpki)),
                _ => webpki,
            }
        } else {
            Arc::new(NoVerification(provider.clone()))
        };
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("tls: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        // As libpq does; needed by servers that take `sslnegotiation=direct`, ignored by others.
        config.alpn_protocols = vec![b"postgresql".to_vec()];
        Ok(MakeRustlsConnect::new(config))
    }

    /// A connect error's message made helpful and safe: a certificate failure says which mode
    /// and roots judged it; the URL's password never appears.
    pub fn explain(&self, msg: &str) -> String {
        let mut msg = msg.to_owned();
        if msg.contains("invalid peer certificate") {
            let roots = match &self.root_cert {
                Some(RootCert::File(path)) => format!("sslrootcert {}", path.display()),
                Some(RootCert::System) => "the system's root certificates".to_owned(),
                None => default_root_cert(home_dir().as_deref())
                    .map_or_else(|| "~/.postgresql/root.crt".to_owned(), |p| p.display().to_string()),
            };
            msg.push_str(&format!(" (sslmode={}, verified against {roots})", self.mode.name()));
        }
        match self.config.get_password() {
            Some(pw) if !pw.is_empty() => {
                let pw = String::from_utf8_lossy(pw);
                msg.replace(&*pw, "***")
            }
            _ => msg,
        }
    }
}

/// `verify-ca`: [`WebPkiServerVerifier`] with the host name check waived. It checks the chain
/// before the name, so the only errors let through — `NotValidForName` and
/// `NotValidForNameContext`, the name check's — come from a certificate whose chain is valid.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer` and `require`: any certificate is accepted, but the handshake signatures are
/// checked with the provider's algorithms.
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

fn home_dir() -> Option<PathBuf> {
    let var = if cfg!(windows) { "APPDATA" } else { "HOME" };
    std::env::var_os(var).filter(|h| !h.is_empty()).map(PathBuf::from)
}

/// libpq's default root file: `~/.postgresql/root.crt` (`%APPDATA%\postgresql\root.crt`).
fn default_root_cert(home: Option<&Path>) -> Option<PathBuf> {
    let dir = if cfg!(windows) { "postgresql" } else { ".postgresql" };
    home.map(|h| h.join(dir).join("root.crt"))
}

/// The roots of a verifying `mode`: `root_cert`, else the default file under `home`.
fn load_roots(
    mode: SslMode,
    root_cert: Option<&RootCert>,
    home: Option<&Path>,
) -> Result<RootCertStore, String> {
    match root_cert {
        Some(RootCert::File(path)) => read_pem_roots(path, "sslrootcert"),
        Some(RootCert::System) => {
            let found = rustls_native_certs::load_native_certs();
            let mut roots = RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
                return Err(format!(
                    "sslrootcert=system: no usable root certificates on this system{}",
                    if errors.is_empty() { String::new() } else { format!(" ({})", errors.join("; ")) }
                ));
            }
            Ok(roots)
        }
        None => {
            let needs = format!(
                "sslmode={} needs root certificates and no sslrootcert is set: set sslrootcert=PATH \
                 (a PEM file with the CA) or sslrootcert=system (the OS roots), or use sslmode=require",
                mode.name()
            );
            match default_root_cert(home) {
                Some(path) if path.exists() => read_pem_roots(&path, "root certificate file"),
                Some(path) => Err(format!("{needs}; libpq's default {} does not exist", path.display())),
                None => Err(format!("{needs}; no home directory for libpq's default ~/.postgresql/root.crt")),
            }
        }
    }
}

/// Every certificate of a PEM file, as roots; at least one, each valid.
fn read_pem_roots(path: &Path, what: &str) -> Result<RootCertStore, String> {
    let named = |e: String| format!("{what} {}: {e}", path.display());
    let pem = std::fs::read(path).map_err(|e| named(format!("cannot read it: {e}")))?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| named(format!("not a valid PEM certificate file: {e}")))?;
        roots.add(cert).map_err(|e| named(format!("not a usable root certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(named("no PEM certificate in it (expected -----BEGIN CERTIFICATE-----)".into()));
    }
    Ok(roots)
}

/// A URL taken apart: what `tokio-postgres` parses, the two parameters it does not know, and
/// the URL for messages.
#[derive(Debug, PartialEq, Eq)]
struct Split {
    rest: String,
    sslmode: Option<String>,
    sslrootcert: Option<String>,
    redacted: String,
}

/// `sslmode` and `sslrootcert` (the last of each wins, as in libpq) out of `url`.
fn split(url: &str) -> Result<Split, String> {
    let scheme = ["postgres://", "postgresql://"].into_iter().find(|s| url.starts_with(s));
    match scheme {
        Some(scheme) => Ok(split_url(url, scheme.len())),
        None => split_key_values(url),
    }
}

/// The URL form. Its query starts at the first `?` after the first `@` (where `tokio-postgres`
/// looks for it); percent-encoded names and values are decoded.
fn split_url(url: &str, scheme_len: usize) -> Split {
    let redacted = oncerpc_core::redact_url(url).into_owned();
    let body = &url[scheme_len..];
    let from = body.find('@').map_or(0, |at| at + 1);
    let Some(q) = body[from..].find('?').map(|i| scheme_len + from + i) else {
        return Split { rest: url.to_owned(), sslmode: None, sslrootcert: None, redacted };
    };
    let (mut sslmode, mut sslrootcert) = (None, None);
    let mut kept = Vec::new();
    for part in url[q + 1..].split('&').filter(|p| !p.is_empty()) {
        // A part without `=` is left for `tokio-postgres` to refuse.
        let ours = part.split_once('=').and_then(|(k, v)| match percent_decode(k).as_deref() {
            Some("sslmode") => Some((&mut sslmode, v)),
            Some("sslrootcert") => Some((&mut sslrootcert, v)),
            _ => None,
        });
        match ours {
            Some((slot, value)) => *slot = Some(percent_decode(value).unwrap_or_else(|| value.to_owned())),
            None => kept.push(part),
        }
    }
    let mut rest = url[..q].to_owned();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    Split { rest, sslmode, sslrootcert, redacted }
}

/// The `key=value …` form (values quoted with `'…'`, `\` escapes), tokenised as
/// `tokio-postgres` does and written back quoted without the two parameters.
fn split_key_values(s: &str) -> Result<Split, String> {
    let pairs = key_values(s).map_err(|e| format!("invalid connection string: {e}"))?;
    let (mut sslmode, mut sslrootcert) = (None, None);
    let mut kept = Vec::new();
    for (key, value) in &pairs {
        match key.as_str() {
            "sslmode" => sslmode = Some(value.clone()),
            "sslrootcert" => sslrootcert = Some(value.clone()),
            _ => kept.push((key.as_str(), value.as_str())),
        }
    }
    let redacted = join_key_values(
        pairs.iter().map(|(k, v)| (k.as_str(), if k == "password" { "***" } else { v.as_str() })),
    );
    Ok(Split { rest: join_key_values(kept.into_iter()), sslmode, sslrootcert, redacted })
}

fn join_key_values<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let quoted: Vec<String> =
        pairs.map(|(k, v)| format!("{k}='{}'", v.replace('\\', "\\\\").replace('\'', "\\'"))).collect();
    quoted.join(" ")
}

/// `key = value` pairs separated by white space.
fn key_values(s: &str) -> Result<Vec<(String, String)>, &'static str> {
    let mut pairs = Vec::new();
    let mut it = s.chars().peekable();
    loop {
        while it.next_if(|c| c.is_whitespace()).is_some() {}
        let mut key = String::new();
        while let Some(c) = it.next_if(|&c| !c.is_whitespace() && c != '=') {
            key.push(c);
        }
        if key.is_empty() {
            return match it.peek() {
                None => Ok(pairs),
                Some(_) => Err("a parameter without a name"),
            };
        }
        while it.next_if(|c| c.is_whitespace()).is_some() {}
        if it.next() != Some('=') {
            return Err("expected `=` after a parameter name");
        }
        while it.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if it.next_if_eq(&'\'').is_some() {
            loop {
                match it.next() {
                    None => return Err("unterminated quoted connection parameter value"),
                    Some('\'') => break,
                    Some('\\') => value.extend(it.next()),
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(c) = it.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(it.next());
                } else {
                    value.push(c);
                }
            }
            if value.is_empty() {
                return Err("a parameter without a value");
            }
        }
        pairs.push((key, value));
    }
}

/// `%XX` decoded (a `%` not followed by two hex digits stays), as UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex)) {
            (b'%', Some(hi), Some(lo)) => {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests;
