//! Certificates the TLS tests make for themselves (rcgen): a private CA, certificates it
//! signs (a server's for 127.0.0.1/localhost or for a name of the test's, an expired one, one
//! for another name, a client's), written as PEM files into a temporary directory.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

use super::process::TempDir;

/// A certificate and its key, as files.
#[derive(Clone, Debug)]
pub struct Pair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// A private CA and the directory its files live in.
pub struct Pki {
    pub dir: TempDir,
    pub ca_file: PathBuf,
    issuer: Issuer<'static, KeyPair>,
    name: String,
}

/// What a certificate is for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Valid now, for `localhost` and `127.0.0.1`.
    Server,
    /// For `localhost` and `127.0.0.1`, but expired in 2001.
    Expired,
    /// Valid now, for `other.example` only.
    WrongName,
    /// A client certificate (mTLS).
    Client,
}

impl Pki {
    /// A new CA called `name` (its files are named after it too).
    pub fn new(name: &str) -> Pki {
        let dir = TempDir::new(&format!("pki-{name}"));
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, format!("{name} test CA"));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let ca_file = dir.file(&format!("{name}-ca.pem"));
        std::fs::write(&ca_file, cert.pem()).unwrap();
        Pki { dir, ca_file, issuer: Issuer::new(params, key), name: name.to_owned() }
    }

    /// A certificate of `kind` signed by this CA, written as `<file>.pem` / `<file>.key`.
    pub fn issue(&self, kind: Kind, file: &str) -> Pair {
        let names: Vec<String> = match kind {
            Kind::WrongName => vec!["other.example".into()],
            Kind::Client => vec!["client.example".into()],
            _ => vec!["localhost".into()],
        };
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, format!("{file} ({})", self.name));
        if matches!(kind, Kind::Server | Kind::Expired) {
            params.subject_alt_names.push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
        }
        params.extended_key_usages = vec![if kind == Kind::Client {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        }];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.use_authority_key_identifier_extension = true;
        if kind == Kind::Expired {
            params.not_before = rcgen::date_time_ymd(2000, 1, 1);
            params.not_after = rcgen::date_time_ymd(2001, 1, 1);
        }
        self.sign(params, file)
    }

    /// A server certificate for the DNS name `name` only, signed by this CA, written as
    /// `<file>.pem` / `<file>.key`.
    pub fn issue_for(&self, name: &str, file: &str) -> Pair {
        let mut params = CertificateParams::new(vec![name.to_owned()]).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.use_authority_key_identifier_extension = true;
        self.sign(params, file)
    }

    fn sign(&self, params: CertificateParams, file: &str) -> Pair {
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let pair =
            Pair { cert: self.dir.file(&format!("{file}.pem")), key: self.dir.file(&format!("{file}.key")) };
        std::fs::write(&pair.cert, cert.pem()).unwrap();
        std::fs::write(&pair.key, key.serialize_pem()).unwrap();
        pair
    }
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certs(path: &PathBuf) -> Vec<rustls_pki_types::CertificateDer<'static>> {
    use rustls_pki_types::pem::PemObject;
    rustls_pki_types::CertificateDer::pem_file_iter(path).unwrap().map(Result::unwrap).collect()
}

/// The certificates of a PEM file as a trust store.
fn roots(path: &PathBuf) -> Arc<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(path) {
        roots.add(c).unwrap();
    }
    Arc::new(roots)
}

/// The DER of the first certificate in a PEM file.
pub fn cert_der(path: &PathBuf) -> Vec<u8> {
    certs(path).remove(0).to_vec()
}

/// A server config presenting `pair`; with `client_ca`, clients must present a certificate
/// that CA signed (mTLS).
pub fn server_config(pair: &Pair, client_ca: Option<&PathBuf>) -> Arc<rustls::ServerConfig> {
    use rustls_pki_types::pem::PemObject;
    let key = rustls_pki_types::PrivateKeyDer::from_pem_file(&pair.key).unwrap();
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in certs(ca) {
                roots.add(c).unwrap();
            }
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                    .build()
                    .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
    };
    Arc::new(builder.with_single_cert(certs(&pair.cert), key).unwrap())
}

/// A client config trusting only `ca`.
pub fn client_config(ca: &PathBuf) -> Arc<rustls::ClientConfig> {
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots(ca))
            .with_no_client_auth(),
    )
}
