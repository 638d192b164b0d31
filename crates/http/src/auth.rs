//! Tenants and API keys (DESIGN §4): plaintext or `sha256:` keys, compared in constant time.

use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The configured tenants. Empty: one open default tenant.
#[derive(Clone, Default)]
pub struct Tenants {
    /// One entry per configured key: (tenant, SHA-256 of the key).
    keys: Vec<(Arc<str>, [u8; 32])>,
}

impl std::fmt::Debug for Tenants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material, not even hashes.
        f.debug_struct("Tenants").field("keys", &self.keys.len()).finish()
    }
}

impl Tenants {
    /// Build from `(name, api_keys)`; a key is plaintext or `sha256:<64 hex digits>`.
    pub fn new<'a>(tenants: impl IntoIterator<Item = (&'a str, &'a [String])>) -> Result<Tenants, String> {
        let mut keys = Vec::new();
        for (name, api_keys) in tenants {
            let name: Arc<str> = Arc::from(name);
            for k in api_keys {
                let digest = match k.strip_prefix("sha256:") {
                    Some(hex) => parse_hex(hex).ok_or_else(|| {
                        format!("tenant {name}: a sha256: key must be 64 hexadecimal characters")
                    })?,
                    None => Sha256::digest(k.as_bytes()).into(),
                };
                keys.push((name.clone(), digest));
            }
        }
        Ok(Tenants { keys })
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The tenant a presented key belongs to. Every configured key is compared, in constant
    /// time, whatever matches: the time taken does not reveal which key, or how much of it,
    /// was right.
    pub fn authenticate(&self, presented: &str) -> Option<Arc<str>> {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let mut found: Option<&Arc<str>> = None;
        for (name, key) in &self.keys {
            if bool::from(key.ct_eq(&digest)) {
                found = Some(name);
            }
        }
        found.cloned()
    }
}

fn parse_hex(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, chunk) in hex.as_bytes().chunks(2).enumerate() {
        let s = std::str::from_utf8(chunk).ok()?;
        out[i] = u8::from_str_radix(s, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plaintext_and_sha256_keys_authenticate_their_tenant() {
        // sha256("test") = 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
        let a = vec!["acme-secret".to_string()];
        let b = vec!["sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".to_string()];
        let t = Tenants::new([("acme", a.as_slice()), ("beta", b.as_slice())]).unwrap();
        assert_eq!(t.authenticate("acme-secret").as_deref(), Some("acme"));
        assert_eq!(t.authenticate("test").as_deref(), Some("beta"));
        assert_eq!(
            t.authenticate("sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"),
            None
        );
        assert_eq!(t.authenticate("acme-secreT"), None);
        assert_eq!(t.authenticate(""), None);
        assert!(format!("{t:?}").contains("keys: 2"));
        assert!(!format!("{t:?}").contains("acme-secret"));
    }

    #[test]
    fn malformed_sha256_keys_are_refused() {
        let bad = vec!["sha256:abc".to_string()];
        assert!(Tenants::new([("x", bad.as_slice())]).is_err());
        let bad = vec![format!("sha256:{}", "zz".repeat(32))];
        assert!(Tenants::new([("x", bad.as_slice())]).is_err());
    }
}
