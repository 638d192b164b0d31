//! The `[console]` section: the operator console at `/console` (its pages are
//! `oncerpc_http::console`), and `[console.oidc]`, sign-in with the identity provider
//! (`console_oidc.rs`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use oncerpc_core::Mode;

/// `[console]`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ConsoleSection {
    /// Serve `/console`. Default: on, except in production mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// JSON pointers (RFC 6901) into params, results and step outputs shown as `"[redacted]"`.
    #[serde(default)]
    pub redact: Vec<String>,
    /// A console session unused for this long ends (default 1800).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_idle_secs: Option<u64>,
    /// Mark the session cookie `Secure`. Default: on when `[tls]` is configured; set it when a
    /// proxy in front terminates TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secure_cookie: Option<bool>,
    /// Sign-in with the identity provider, beside the API key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc: Option<crate::console_oidc::ConsoleOidc>,
}

/// The longest idle time a session may have: a day.
const MAX_IDLE_SECS: u64 = 24 * 60 * 60;

impl ConsoleSection {
    /// Whether `/console` is served in `mode`.
    pub fn enabled(&self, mode: Mode) -> bool {
        self.enabled.unwrap_or(mode != Mode::Production)
    }

    /// The section's rules (`tenants`: the configured tenant names; `auth`: the issuers a
    /// sign-in may take its tenant rule from); the error names the key.
    pub fn check(&self, tenants: &[&str], auth: &crate::auth::AuthSection) -> Result<(), String> {
        if let Some(oidc) = &self.oidc {
            oidc.check(tenants, auth)?;
        }
        if let Some(idle) = self.session_idle_secs
            && !(1..=MAX_IDLE_SECS).contains(&idle)
        {
            return Err(format!("console.session_idle_secs must be between 1 and {MAX_IDLE_SECS}"));
        }
        for p in &self.redact {
            if !p.is_empty() && !p.starts_with('/') {
                return Err(format!("console.redact: {p:?} is not a JSON pointer (it starts with /)"));
            }
        }
        Ok(())
    }

    /// The console's settings, or `None` when it is off; `oidc`: the sign-in with the identity
    /// provider, built by [`ConsoleOidc::http`](crate::console_oidc::ConsoleOidc::http).
    pub fn http(
        &self,
        mode: Mode,
        tls: bool,
        oidc: Option<oncerpc_http::console::OidcConfig>,
    ) -> Option<oncerpc_http::console::ConsoleConfig> {
        if !self.enabled(mode) {
            return None;
        }
        let defaults = oncerpc_http::console::ConsoleConfig::default();
        Some(oncerpc_http::console::ConsoleConfig {
            redact: self.redact.clone(),
            session_idle: self.session_idle_secs.map(Duration::from_secs).unwrap_or(defaults.session_idle),
            secure_cookie: self.secure_cookie.unwrap_or(tls),
            oidc,
            ..defaults
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_in_production_unless_enabled() {
        let s = ConsoleSection::default();
        assert!(s.enabled(Mode::Dev) && !s.enabled(Mode::Production));
        assert!(s.http(Mode::Production, false, None).is_none());
        let on = ConsoleSection { enabled: Some(true), ..Default::default() };
        assert!(on.http(Mode::Production, true, None).is_some_and(|c| c.secure_cookie));
    }

    #[test]
    fn bad_values_name_their_key() {
        let s = ConsoleSection { session_idle_secs: Some(0), ..Default::default() };
        assert!(s.check(&[], &Default::default()).unwrap_err().contains("console.session_idle_secs"));
        let s = ConsoleSection { redact: vec!["card".into()], ..Default::default() };
        assert!(s.check(&[], &Default::default()).unwrap_err().contains("console.redact"));
    }
}
