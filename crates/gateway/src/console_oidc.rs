//! `[console.oidc]`: operators sign in to the console with the identity provider (the OpenID
//! Connect authorization code flow with PKCE; the flow is `oncerpc_http::console::oidc`).
//!
//! ```toml
//! [console.oidc]
//! issuer = "https://login.example.com"
//! client_id = "oncerpc-console"
//! client_secret = "${CONSOLE_OIDC_SECRET}"
//! redirect_url = "https://gateway.example.com/console/oidc/callback"
//! ```
//!
//! The tenant of a signed-in operator: the section's own `tenant` or `tenant_claim`, else the
//! rule of the `[[auth.issuers]]` entry with the same `issuer` (whose `algorithms` and
//! `leeway_secs` then apply too). One of them is required: the console never guesses a tenant.

use oncerpc_http::console::OidcConfig;
use oncerpc_http::{TenantFrom, tokens};
use serde::{Deserialize, Serialize};

use crate::auth::AuthSection;

/// `[console.oidc]`.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleOidc {
    /// The provider (`iss` of its ID tokens); its endpoints are read from
    /// `{issuer}/.well-known/openid-configuration`.
    pub issuer: String,
    /// The console's client at the provider.
    pub client_id: String,
    /// Put it in the environment: `"${NAME}"`.
    pub client_secret: String,
    /// This gateway's `/console/oidc/callback`, as the browser reaches it (registered at the
    /// provider exactly so).
    pub redirect_url: String,
    /// The provider's name on the login page (default: the issuer's host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Scopes asked for besides `openid` (e.g. the one that puts `tenant_claim` in the ID token).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    /// Every operator signed in so acts for this tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Or: the tenant is this ID-token claim's value (a configured tenant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_claim: Option<String>,
}

impl std::fmt::Debug for ConsoleOidc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the client secret.
        f.debug_struct("ConsoleOidc")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("redirect_url", &self.redirect_url)
            .field("tenant", &self.tenant)
            .field("tenant_claim", &self.tenant_claim)
            .finish_non_exhaustive()
    }
}

const AT: &str = "console.oidc";

fn url(key: &str, value: &str) -> Result<reqwest::Url, String> {
    match reqwest::Url::parse(value) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => Ok(u),
        _ => Err(format!("{AT}.{key} must be an http:// or https:// URL")),
    }
}

impl ConsoleOidc {
    /// The `[[auth.issuers]]` entry of this provider, if any.
    fn issuer_entry<'a>(&self, auth: &'a AuthSection) -> Option<&'a crate::auth::IssuerConfig> {
        let me = self.issuer.trim_end_matches('/');
        auth.issuers.iter().find(|i| i.issuer.trim_end_matches('/') == me)
    }

    /// The section's rules; `tenants`: the configured tenant names. Errors name the key.
    pub fn check(&self, tenants: &[&str], auth: &AuthSection) -> Result<(), String> {
        url("issuer", &self.issuer)?;
        let redirect = url("redirect_url", &self.redirect_url)?;
        if redirect.path() != oncerpc_http::console::oidc::CALLBACK_PATH || redirect.query().is_some() {
            return Err(format!(
                "{AT}.redirect_url must be this gateway's {} (as the browser reaches it)",
                oncerpc_http::console::oidc::CALLBACK_PATH
            ));
        }
        if self.client_id.trim().is_empty() || self.client_secret.is_empty() {
            return Err(format!("{AT}: client_id and client_secret are required"));
        }
        if tenants.is_empty() {
            return Err(format!("{AT}: a sign-in acts for a tenant: configure [[tenants]]"));
        }
        match (&self.tenant, &self.tenant_claim) {
            (Some(t), None) if !tenants.contains(&t.as_str()) => {
                Err(format!("{AT}.tenant {t:?} is not a configured tenant"))
            }
            (Some(_), None) | (None, Some(_)) => Ok(()),
            (Some(_), Some(_)) => Err(format!("{AT}: set at most one of tenant and tenant_claim")),
            (None, None) if self.issuer_entry(auth).is_some() => Ok(()),
            (None, None) => Err(format!(
                "{AT}: set tenant or tenant_claim, or configure an [[auth.issuers]] entry for {:?} whose rule decides the tenant",
                self.issuer
            )),
        }
    }

    /// What `oncerpc_http` is given (the section checked); `http`: the gateway's client.
    pub fn http(&self, auth: &AuthSection, tenants: Vec<String>, http: reqwest::Client) -> OidcConfig {
        let entry = self.issuer_entry(auth);
        let tenant = match (&self.tenant, &self.tenant_claim, entry) {
            (Some(t), _, _) => TenantFrom::Fixed(t.clone()),
            (None, Some(c), _) => TenantFrom::Claim(c.clone()),
            (None, None, Some(e)) => match (&e.tenant, &e.tenant_claim) {
                (Some(t), _) => TenantFrom::Fixed(t.clone()),
                (None, c) => TenantFrom::Claim(c.clone().unwrap_or_default()),
            },
            // Refused by `check`: no tenant can match an empty claim name's value.
            (None, None, None) => TenantFrom::Claim(String::new()),
        };
        let algorithms = match entry {
            Some(e) => e.algorithms.clone(),
            None => ["RS256", "ES256", "EdDSA"].map(str::to_owned).to_vec(),
        };
        let name = self.name.clone().unwrap_or_else(|| {
            reqwest::Url::parse(&self.issuer)
                .ok()
                .and_then(|u| u.host_str().map(str::to_owned))
                .unwrap_or_else(|| self.issuer.clone())
        });
        let mut scopes = vec!["openid".to_owned()];
        scopes.extend(self.scopes.iter().filter(|s| *s != "openid").cloned());
        OidcConfig {
            issuer: self.issuer.clone(),
            client_id: self.client_id.clone(),
            client_secret: self.client_secret.clone(),
            redirect_url: self.redirect_url.clone(),
            name,
            scopes,
            tenant,
            algorithms: algorithms.iter().filter_map(|a| tokens::parse_algorithm(a).ok()).collect(),
            leeway_secs: entry.map_or(30, |e| e.leeway_secs),
            tenants,
            http,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(extra: &str) -> ConsoleOidc {
        toml::from_str(&format!(
            "issuer = \"https://id.example\"\nclient_id = \"console\"\nclient_secret = \"s\"\nredirect_url = \"https://gw.example/console/oidc/callback\"\n{extra}"
        ))
        .expect("a [console.oidc] section")
    }

    #[test]
    fn the_tenant_rule_is_its_own_or_the_issuers_and_bad_values_name_their_key() {
        let none = AuthSection::default();
        section("tenant = \"acme\"").check(&["acme"], &none).expect("its own tenant");
        section("tenant_claim = \"org\"").check(&["acme"], &none).expect("its own claim");
        let e = section("").check(&["acme"], &none).unwrap_err();
        assert!(e.contains("set tenant or tenant_claim, or configure an [[auth.issuers]]"), "{e}");
        let auth: AuthSection = toml::from_str(
            "[[issuers]]\nissuer = \"https://id.example/\"\naudience = \"https://gw.example\"\ntenant_claim = \"org_id\"",
        )
        .unwrap();
        section("").check(&["acme"], &auth).expect("the issuer's rule");
        crate::upstream::install_crypto_provider();
        let client = reqwest::Client::new();
        let cfg = section("").http(&auth, vec!["acme".into()], client.clone());
        assert_eq!(cfg.tenant, TenantFrom::Claim("org_id".into()));
        assert_eq!(cfg.name, "id.example");
        assert_eq!(cfg.scopes, vec!["openid".to_owned()]);
        assert!(!format!("{cfg:?}").contains("client_secret"), "never the secret");
        assert!(!format!("{:?}", section("tenant = \"acme\"")).contains("\"s\""));
        for (extra, why) in [
            ("tenant = \"beta\"", "console.oidc.tenant \"beta\" is not a configured tenant"),
            ("tenant = \"acme\"\ntenant_claim = \"org\"", "at most one of tenant and tenant_claim"),
        ] {
            let e = section(extra).check(&["acme"], &none).unwrap_err();
            assert!(e.contains(why), "{extra}: {e}");
        }
        let mut s = section("tenant = \"acme\"");
        s.redirect_url = "https://gw.example/callback".into();
        assert!(s.check(&["acme"], &none).unwrap_err().contains("console.oidc.redirect_url must be"));
        s.redirect_url = "gw.example/console/oidc/callback".into();
        assert!(s.check(&["acme"], &none).unwrap_err().contains("http:// or https:// URL"));
        let s = section("tenant = \"acme\"");
        assert!(s.check(&[], &none).unwrap_err().contains("configure [[tenants]]"));
    }
}
