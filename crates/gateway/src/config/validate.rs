//! The checks of a parsed configuration that serde cannot express (SPEC §11, §12): run at
//! start, by `check-config`, and again after the CLI's overrides.

use super::*;

impl Config {
    /// SPEC §12: what production mode refuses at start.
    pub(super) fn validate_production(&self) -> Result<(), ConfigError> {
        if self.mode != Mode::Production {
            return Ok(());
        }
        if self.demo == Some(true) {
            return Err(invalid("demo: the demo methods cannot be enabled in production mode"));
        }
        if self.tenants.is_empty() && !self.allow_anonymous && !self.listen_addr()?.ip().is_loopback() {
            return Err(invalid(format!(
                "listen: {} is not a loopback address and no [[tenants]] are configured: \
                 configure tenants, or set allow_anonymous = true to serve without API keys",
                self.listen
            )));
        }
        // Keys are compared as their SHA-256, as they are checked (plaintext vs sha256: too).
        let mut seen: std::collections::HashMap<[u8; 32], &str> = std::collections::HashMap::new();
        for t in &self.tenants {
            for k in t.api_keys.iter().chain(t.keys.iter().map(|k| &k.key)) {
                let digest: [u8; 32] = match k.strip_prefix("sha256:") {
                    Some(hex) => match parse_sha256_hex(hex) {
                        Some(d) => d,
                        None => continue, // reported by `validate`
                    },
                    None => {
                        if k.chars().count() < MIN_PLAINTEXT_KEY_CHARS {
                            return Err(invalid(format!(
                                "tenants.{}.api_keys: a plaintext key must have at least \
                                 {MIN_PLAINTEXT_KEY_CHARS} characters in production mode (or configure it as sha256:…)",
                                t.name
                            )));
                        }
                        <sha2::Sha256 as sha2::Digest>::digest(k.as_bytes()).into()
                    }
                };
                if let Some(other) = seen.insert(digest, t.name.as_str()) {
                    return Err(invalid(format!(
                        "tenants.{}.api_keys: a key is also configured for tenant {other:?}: each key names one tenant",
                        t.name
                    )));
                }
            }
        }
        Ok(())
    }

    /// Checks that serde cannot express. Run again after CLI overrides.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.listen_addr()?;
        crate::log_level::check(&self.log.level).map_err(invalid)?;
        self.http.validate()?;
        store_scheme(&self.store.url)?;
        crate::bounds::check(self)?;
        // A record must outlive its lease by far: an outcome is only useful while retries can
        // still come, and a processing record must never expire under a running execution.
        if self.store.ttl_secs.saturating_mul(1000) < self.store.lease_ms.saturating_mul(TTL_LEASE_RATIO) {
            return Err(invalid(format!(
                "store.ttl_secs ({}) must be at least {TTL_LEASE_RATIO} times store.lease_ms ({} ms)",
                self.store.ttl_secs, self.store.lease_ms
            )));
        }
        // A claim that waited its whole bound must still leave its lease to run in.
        if let Some(ms) = self.store.op_timeout_ms
            && ms.saturating_mul(2) > self.store.lease_ms
        {
            return Err(invalid(format!(
                "store.op_timeout_ms ({ms}) must be at most half of store.lease_ms ({} ms)",
                self.store.lease_ms
            )));
        }
        if self.batch.max_size == 0 {
            return Err(invalid("batch.max_size must be at least 1"));
        }
        if self.batch.max_concurrency == 0 {
            return Err(invalid("batch.max_concurrency must be at least 1"));
        }
        if self.limits.max_body_bytes < 64 {
            return Err(invalid("limits.max_body_bytes must be at least 64"));
        }
        if self.limits.default_timeout_ms == 0 {
            return Err(invalid("limits.default_timeout_ms must be greater than 0"));
        }
        self.mcp.check().map_err(invalid)?;
        self.telemetry.check().map_err(invalid)?;
        if self.limits.max_in_flight == 0 {
            return Err(invalid("limits.max_in_flight must be at least 1"));
        }
        if self.limits.max_background == 0 {
            return Err(invalid("limits.max_background must be at least 1"));
        }
        for (name, v) in [
            ("header_timeout_ms", self.limits.header_timeout_ms),
            ("body_timeout_ms", self.limits.body_timeout_ms),
            ("idle_timeout_ms", self.limits.idle_timeout_ms),
        ] {
            if v == 0 {
                return Err(invalid(format!("limits.{name} must be greater than 0")));
            }
        }
        if self.limits.max_connections == 0 {
            return Err(invalid("limits.max_connections must be at least 1"));
        }
        if self.upstream.client_cert_file.is_some() != self.upstream.client_key_file.is_some() {
            return Err(invalid(
                "upstream.client_cert_file and upstream.client_key_file go together: set both or neither",
            ));
        }
        if self.store.ca_file.is_some() && !self.store.url.starts_with("rediss://") {
            return Err(invalid(
                "store.ca_file applies to rediss:// stores only (PostgreSQL: sslrootcert=PATH in store.url)",
            ));
        }
        if self.upstream.max_response_bytes == 0 {
            return Err(invalid("upstream.max_response_bytes must be at least 1"));
        }
        if let Some(o) = &self.upstream.oauth {
            o.check("upstream.oauth").map_err(invalid)?;
        }
        let mut names = std::collections::HashSet::new();
        for t in &self.tenants {
            if t.name.trim().is_empty() {
                return Err(invalid("tenants: a tenant needs a name"));
            }
            if !names.insert(t.name.as_str()) {
                return Err(invalid(format!("tenants: {:?} is configured twice", t.name)));
            }
            if t.api_keys.is_empty() && t.keys.is_empty() && self.auth.issuers.is_empty() {
                return Err(invalid(format!(
                    "tenants.{}: a tenant needs a way in: api_keys, [[tenants.keys]], or an [[auth.issuers]] entry whose tokens act for it",
                    t.name
                )));
            }
            for k in t.api_keys.iter().chain(t.keys.iter().map(|k| &k.key)) {
                if let Some(hex) = k.strip_prefix("sha256:") {
                    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                        return Err(invalid(format!(
                            "tenants.{}: a sha256: key must be 64 hexadecimal characters",
                            t.name
                        )));
                    }
                } else if k.is_empty() {
                    return Err(invalid(format!("tenants.{}: an api key must not be empty", t.name)));
                } else if !k.bytes().all(|b| b.is_ascii_graphic()) {
                    // A key travels in a header (X-API-Key, Authorization: Bearer): one with a
                    // space or a character outside printable ASCII could never be presented.
                    return Err(invalid(format!(
                        "tenants.{}: an api key must be printable ASCII without spaces (it is sent in a header)",
                        t.name
                    )));
                }
            }
            if let Some(rate) = t.rate_per_sec
                && !(rate.is_finite() && rate > 0.0 && rate <= 1e9)
            {
                return Err(invalid(format!(
                    "tenants.{}.rate_per_sec must be a number greater than 0 (got {rate})",
                    t.name
                )));
            }
            if t.burst == Some(0) {
                return Err(invalid(format!("tenants.{}.burst must be at least 1", t.name)));
            }
            if t.burst.is_some() && t.rate_per_sec.is_none() {
                return Err(invalid(format!(
                    "tenants.{}.burst needs tenants.{}.rate_per_sec",
                    t.name, t.name
                )));
            }
            if t.max_in_flight == Some(0) || t.max_background == Some(0) {
                let key = if t.max_in_flight == Some(0) { "max_in_flight" } else { "max_background" };
                return Err(invalid(format!("tenants.{}.{key} must be at least 1", t.name)));
            }
        }
        let tenant_names: Vec<&str> = self.tenants.iter().map(|t| t.name.as_str()).collect();
        self.auth.check(&tenant_names).map_err(invalid)?;
        self.console.check(&tenant_names, &self.auth).map_err(invalid)?;
        let mut documents = std::collections::HashSet::new();
        for d in &self.openapi {
            d.check().map_err(invalid)?;
            if !documents.insert(d.name.as_str()) {
                return Err(invalid(format!("openapi: {:?} is configured twice", d.name)));
            }
        }
        let mut methods = std::collections::HashSet::new();
        for (i, m) in self.methods.iter().enumerate() {
            if !methods.insert(m.name.as_str()) {
                return Err(invalid(format!("methods: {:?} is configured twice", m.name)));
            }
            if m.timeout_ms == Some(0) {
                return Err(invalid(format!("methods.{}: timeout_ms must be greater than 0", m.name)));
            }
            if m.steps.is_empty() {
                return Err(invalid(format!(
                    "methods.{}: a flow needs at least one [[methods.steps]]",
                    m.name
                )));
            }
            let mut step_names = std::collections::HashSet::new();
            for s in &m.steps {
                if !step_names.insert(s.name.as_str()) {
                    return Err(invalid(format!(
                        "methods.{}.steps: {:?} is configured twice",
                        m.name, s.name
                    )));
                }
                if let Some(ask) = &s.ask {
                    let problem = match (s.url.is_empty() && s.mcp.is_none(), ask.problem()) {
                        (false, _) => Some("an ask step has no url and no mcp".to_owned()),
                        (true, p) => p,
                    };
                    if let Some(problem) = problem {
                        return Err(invalid(format!("methods.{}.steps.{}: {problem}", m.name, s.name)));
                    }
                } else if let Some(mcp) = &s.mcp {
                    crate::mcp_upstreams::check_step(self, mcp, s.url.is_empty())
                        .map_err(|e| invalid(format!("methods.{}.steps.{}: {e}", m.name, s.name)))?;
                } else if !(s.url.starts_with("http://") || s.url.starts_with("https://")) {
                    return Err(invalid(format!(
                        "methods.{}.steps.{}: url must start with http:// or https://",
                        m.name, s.name
                    )));
                }
                if let Some(problem) = s.retry.problem() {
                    return Err(invalid(format!("methods.{}.steps.{}: {problem}", m.name, s.name)));
                }
                if s.timeout_ms == Some(0) {
                    return Err(invalid(format!(
                        "methods.{}.steps.{}: timeout_ms must be greater than 0",
                        m.name, s.name
                    )));
                }
                if let Some(o) = &s.oauth {
                    o.check(&format!("methods.{}.steps.{}.oauth", m.name, s.name)).map_err(invalid)?;
                }
            }
            self.check_lease(self.method_timeout_ms(m), &format!("methods.{} has a timeout of", m.name))?;
            crate::webhooks::validate(self, i, m)?;
            crate::mcp::validate_method(self, m).map_err(invalid)?;
        }
        self.validate_production()?;
        if self.demo_enabled() {
            self.check_lease(
                self.limits.default_timeout_ms,
                "the demo methods use limits.default_timeout_ms =",
            )?;
        }
        Ok(())
    }

    /// SPEC §3: a lease outlives the method's timeout, with a margin (a tenth of the
    /// timeout, at least a second) for claiming and recording around the execution.
    fn check_lease(&self, timeout_ms: u64, whose: &str) -> Result<(), ConfigError> {
        let margin =
            oncerpc_core::lease_margin(std::time::Duration::from_millis(timeout_ms)).as_millis() as u64;
        if self.store.lease_ms < timeout_ms.saturating_add(margin) {
            return Err(invalid(format!(
                "store.lease_ms ({}) must exceed every method timeout by at least {margin} ms: {whose} {timeout_ms} ms",
                self.store.lease_ms
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::Config;

    fn refused(keys: &str) -> Option<String> {
        let text = format!("[[tenants]]\nname = \"acme\"\napi_keys = [{keys}]\n");
        Config::from_toml_with_env(&text, &|_| None).err().map(|e| e.to_string())
    }

    #[test]
    fn an_api_key_that_cannot_be_sent_in_a_header_is_refused() {
        for bad in ["\"acme key 0123456789\"", "\"acme-…-0123456789\"", "\"acme\\tkey-0123456789\""] {
            let e = refused(bad).unwrap_or_else(|| panic!("{bad} was accepted"));
            assert!(e.contains("printable ASCII without spaces"), "{bad}: {e}");
        }
        assert_eq!(refused("\"acme-key-0123456789\""), None);
        assert_eq!(refused(&format!("\"sha256:{}\"", "a".repeat(64))), None);
    }
}
