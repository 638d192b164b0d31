//! `[auth]`: the identity providers whose access tokens oncerpc accepts (SPEC §20), and
//! `[[tenants.keys]]`, API keys that hold only some scopes. The rules live in
//! `oncerpc_http::tokens`; this is their configuration.
//!
//! ```toml
//! [[auth.issuers]]
//! issuer = "https://login.example.com"     # metadata from {issuer}/.well-known/openid-configuration
//! audience = "https://gateway.example.com" # the resource this gateway is (RFC 8707)
//! tenant_claim = "org_id"                  # or tenant = "acme"
//!
//! [[tenants]]
//! name = "acme"
//!   [[tenants.keys]]
//!   key = "sha256:…"
//!   name = "billing-job"
//!   scopes = ["orders:read"]
//! ```

use std::time::Duration;

use oncerpc_http::{IssuerSpec, TenantFrom, tokens};
use serde::{Deserialize, Serialize};

/// `[auth]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub issuers: Vec<IssuerConfig>,
}

/// One value or a list of them (`audience = "a"` or `["a", "b"]`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    fn values(&self) -> Vec<String> {
        match self {
            OneOrMany::One(v) => vec![v.clone()],
            OneOrMany::Many(v) => v.clone(),
        }
    }
}

/// `[[auth.issuers]]`: an OAuth 2.1 / OpenID Connect authorization server.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct IssuerConfig {
    /// The `iss` of its tokens; its metadata is read from under it.
    pub issuer: String,
    /// Where its signing keys are (absent: from its metadata).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwks_uri: Option<String>,
    /// The resource this gateway is: a token must name one of these in `aud`. Required.
    pub audience: OneOrMany,
    #[serde(default = "default_algorithms")]
    pub algorithms: Vec<String>,
    #[serde(default = "default_leeway")]
    pub leeway_secs: u64,
    /// Every token of this issuer acts for this tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Or: the tenant is this claim's value (which must name a configured tenant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_claim: Option<String>,
    /// The claim holding the token's scopes: a space-separated string (`scope`) or an array
    /// (Azure's `scp`).
    #[serde(default = "default_scopes_claim")]
    pub scopes_claim: String,
    #[serde(default = "default_refresh")]
    pub jwks_refresh_secs: u64,
    /// RFC 7662 introspection of the issuer's opaque tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub introspection: Option<IntrospectionConfig>,
}

/// `introspection = { url, client_id, client_secret, cache_secs }`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct IntrospectionConfig {
    pub url: String,
    /// oncerpc's own client at the authorization server (client_secret_basic).
    pub client_id: String,
    /// Put it in the environment: `"${NAME}"`.
    pub client_secret: String,
    /// An answer is kept at most this long (a revoked token works until then).
    #[serde(default = "default_cache_secs")]
    pub cache_secs: u64,
}

fn default_cache_secs() -> u64 {
    60
}

fn default_algorithms() -> Vec<String> {
    ["RS256", "ES256", "EdDSA"].map(str::to_owned).to_vec()
}

fn default_leeway() -> u64 {
    30
}

fn default_scopes_claim() -> String {
    "scope".into()
}

fn default_refresh() -> u64 {
    300
}

/// `[[tenants.keys]]`: an API key that holds only `scopes`, named `name` in the audit trail.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TenantKey {
    /// Plaintext, or `sha256:` and 64 hex digits.
    pub key: String,
    pub name: String,
    #[serde(default)]
    pub scopes: Vec<String>,
}

fn is_url(u: &str) -> bool {
    u.starts_with("https://") || u.starts_with("http://")
}

impl AuthSection {
    /// The section's rules; `tenants`: the configured tenant names. Errors name the key.
    pub fn check(&self, tenants: &[&str]) -> Result<(), String> {
        let mut seen = std::collections::HashSet::new();
        for (i, is) in self.issuers.iter().enumerate() {
            let at = format!("auth.issuers[{i}]");
            if !is_url(&is.issuer) {
                return Err(format!("{at}.issuer must be an http:// or https:// URL"));
            }
            if !seen.insert(is.issuer.trim_end_matches('/')) {
                return Err(format!("{at}.issuer {:?} is configured twice", is.issuer));
            }
            if is.jwks_uri.as_deref().is_some_and(|u| !is_url(u)) {
                return Err(format!("{at}.jwks_uri must be an http:// or https:// URL"));
            }
            if is.audience.values().iter().all(|a| a.trim().is_empty()) {
                return Err(format!("{at}.audience must name the resource this gateway is"));
            }
            if is.algorithms.is_empty() {
                return Err(format!("{at}.algorithms must name at least one algorithm"));
            }
            for a in &is.algorithms {
                tokens::parse_algorithm(a).map_err(|e| format!("{at}.algorithms: {e}"))?;
            }
            match (&is.tenant, &is.tenant_claim) {
                (Some(t), None) if !tenants.contains(&t.as_str()) => {
                    return Err(format!("{at}.tenant {t:?} is not a configured tenant"));
                }
                (Some(_), None) | (None, Some(_)) => {}
                _ => return Err(format!("{at}: set exactly one of tenant and tenant_claim")),
            }
            if tenants.is_empty() {
                return Err(format!("{at}: tokens act for a tenant: configure [[tenants]]"));
            }
            if !(10..=86_400).contains(&is.jwks_refresh_secs) {
                return Err(format!("{at}.jwks_refresh_secs must be between 10 and 86400"));
            }
            if is.leeway_secs > 300 {
                return Err(format!("{at}.leeway_secs must be at most 300"));
            }
            if let Some(i) = &is.introspection {
                if !is_url(&i.url) {
                    return Err(format!("{at}.introspection.url must be an http:// or https:// URL"));
                }
                if i.client_id.is_empty() || i.client_secret.is_empty() {
                    return Err(format!("{at}.introspection: client_id and client_secret are required"));
                }
                if !(1..=3600).contains(&i.cache_secs) {
                    return Err(format!("{at}.introspection.cache_secs must be between 1 and 3600"));
                }
            }
        }
        Ok(())
    }

    /// What `oncerpc_http` is given (the section checked).
    pub fn specs(&self) -> Vec<IssuerSpec> {
        self.issuers
            .iter()
            .map(|is| IssuerSpec {
                issuer: is.issuer.clone(),
                jwks_uri: is.jwks_uri.clone(),
                audience: is.audience.values(),
                algorithms: is.algorithms.iter().filter_map(|a| tokens::parse_algorithm(a).ok()).collect(),
                leeway_secs: is.leeway_secs,
                tenant: match (&is.tenant, &is.tenant_claim) {
                    (Some(t), _) => TenantFrom::Fixed(t.clone()),
                    (None, c) => TenantFrom::Claim(c.clone().unwrap_or_default()),
                },
                scopes_claim: is.scopes_claim.clone(),
                jwks_refresh: Duration::from_secs(is.jwks_refresh_secs),
                introspection: is.introspection.as_ref().map(|i| oncerpc_http::Introspection {
                    url: i.url.clone(),
                    client_id: i.client_id.clone(),
                    client_secret: i.client_secret.clone(),
                    cache: Duration::from_secs(i.cache_secs),
                }),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(entry: &str) -> AuthSection {
        toml::from_str(&format!("[[issuers]]\n{entry}")).expect("an [auth] section")
    }

    #[test]
    fn an_issuer_is_checked_naming_the_key() {
        let ok = "issuer = \"https://id.example\"\naudience = \"https://gw.example\"\ntenant = \"acme\"";
        section(ok).check(&["acme"]).expect("valid");
        assert_eq!(section(ok).specs()[0].algorithms.len(), 3, "RS256, ES256, EdDSA by default");
        for (entry, why) in [
            (
                format!("{ok}\nalgorithms = [\"HS256\"]"),
                "auth.issuers[0].algorithms: \"HS256\" is a shared-secret",
            ),
            (format!("{ok}\nalgorithms = [\"none\"]"), "\"none\" is not a JWS algorithm"),
            (
                ok.replace("tenant = \"acme\"", "tenant = \"beta\""),
                "tenant \"beta\" is not a configured tenant",
            ),
            (ok.replace("tenant = \"acme\"", ""), "set exactly one of tenant and tenant_claim"),
            (format!("{ok}\ntenant_claim = \"org\""), "set exactly one of tenant and tenant_claim"),
            (ok.replace("https://gw.example", " "), "audience must name the resource"),
            (ok.replace("https://id.example", "id.example"), "issuer must be an http:// or https:// URL"),
        ] {
            let e = section(&entry).check(&["acme"]).unwrap_err();
            assert!(e.contains(why), "{entry}: {e}");
        }
        let two: AuthSection = toml::from_str(&format!("[[issuers]]\n{ok}\n[[issuers]]\n{ok}")).unwrap();
        assert!(two.check(&["acme"]).unwrap_err().contains("configured twice"));
    }
}
