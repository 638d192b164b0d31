//! The webhook keys of a `[[methods]]` entry (SPEC §15): `key_from` / `key_header`,
//! `fingerprint_from`, `verify = { scheme, secret, tolerance_secs }` and `tenant`. Parsed
//! here, checked by the code that will use them (core's registry for pointers and header
//! names, `oncerpc_http::Verifier` for schemes and secrets), so the rules live once.

use std::sync::Arc;

pub use crate::config::verify::{Secrets, VerifySection};
use crate::config::{Config, ConfigError, MethodConfig};

fn invalid(m: &MethodConfig, msg: impl std::fmt::Display) -> ConfigError {
    ConfigError::Invalid(format!("methods.{}.{msg}", m.name))
}

/// The verifier of a method with `verify`, `None` without. Errors name the key.
pub fn verifier(cfg: &Config, m: &MethodConfig) -> Result<Option<oncerpc_http::Verifier>, ConfigError> {
    let Some(v) = &m.verify else {
        if m.tenant.is_some() {
            return Err(invalid(m, "tenant: only a method with verify may name its tenant"));
        }
        return Ok(None);
    };
    let scheme =
        oncerpc_http::Scheme::parse(&v.scheme).map_err(|e| invalid(m, format!("verify.scheme: {e}")))?;
    let tenant = match &m.tenant {
        None => None,
        Some(t) if cfg.tenants.iter().any(|c| &c.name == t) => Some(Arc::from(t.as_str())),
        Some(t) => return Err(invalid(m, format!("tenant: {t:?} is not one of the [[tenants]]"))),
    };
    oncerpc_http::Verifier::new(scheme, &v.secret.to_vec(), v.tolerance_secs, tenant)
        .map(Some)
        .map_err(|e| invalid(m, e))
}

/// An error about key `key` of the `i`-th method: `methods[i].key ("name"): …`.
fn invalid_at(i: usize, m: &MethodConfig, key: &str, msg: impl std::fmt::Display) -> ConfigError {
    ConfigError::Invalid(format!("methods[{i}].{key} ({:?}): {msg}", m.name))
}

/// Checks serde cannot express, for the `i`-th method: one key source, a fingerprint subset
/// that can work, and a verifier that can be built.
pub fn validate(cfg: &Config, i: usize, m: &MethodConfig) -> Result<(), ConfigError> {
    if m.key_from.is_some() && m.key_header.is_some() {
        return Err(invalid(m, "key_from and key_header: set one of them, not both"));
    }
    if let (Some(h), Some(v)) = (&m.key_header, &m.verify)
        && let Ok(scheme) = oncerpc_http::Scheme::parse(&v.scheme)
        && !scheme.signed_headers().iter().any(|s| s.eq_ignore_ascii_case(h))
    {
        let signed = match scheme.signed_headers() {
            [] => "no header".to_owned(),
            names => names.join(", "),
        };
        return Err(invalid_at(
            i,
            m,
            "key_header",
            format!(
                "the {} signature covers {signed}, not {h}: a captured delivery re-sent with \
                 another {h} would run again; take the key from the signed body instead \
                 (key_from = \"\" for the whole body, or a JSON pointer into it)",
                scheme.as_str()
            ),
        ));
    }
    if let Some(pointers) = &m.fingerprint_from {
        oncerpc_core::derived::check_fingerprint_pointers(pointers)
            .map_err(|e| invalid_at(i, m, "fingerprint_from", e))?;
    }
    verifier(cfg, m)?;
    Ok(())
}

/// The webhook parts of a method's registry spec.
pub fn apply(m: &MethodConfig, mut spec: oncerpc_core::MethodSpec) -> oncerpc_core::MethodSpec {
    use oncerpc_core::KeySource;
    if let Some(p) = &m.key_from {
        spec = spec.key_from(KeySource::Pointer(p.clone()));
    }
    if let Some(h) = &m.key_header {
        spec = spec.key_from(KeySource::Header(h.clone()));
    }
    if let Some(ps) = &m.fingerprint_from {
        spec = spec.fingerprint_from(ps.clone());
    }
    spec.signed(m.verify.is_some())
}

/// Every signed method's verifier, for the front door.
pub fn webhooks(cfg: &Config) -> Result<oncerpc_http::Webhooks, ConfigError> {
    let mut out = oncerpc_http::Webhooks::new();
    for m in &cfg.methods {
        if let Some(v) = verifier(cfg, m)? {
            out.insert(m.name.clone(), v);
        }
    }
    Ok(out)
}

/// What `check-config` prints of a method's webhook keys (never a secret).
pub fn summary(m: &MethodConfig) -> String {
    let mut parts = Vec::new();
    match m.key_from.as_deref() {
        Some("") => parts.push("key_from=\"\" (the whole body)".to_owned()),
        Some(p) => parts.push(format!("key_from={p}")),
        None => {}
    }
    if let Some(h) = &m.key_header {
        parts.push(format!("key_header={h}"));
    }
    if let Some(ps) = &m.fingerprint_from {
        parts.push(format!("fingerprint_from=[{}]", ps.join(", ")));
    }
    if let Some(v) = &m.verify {
        parts.push(format!("verify={} ({} secret(s))", v.scheme, v.secret.len()));
    }
    if let Some(t) = &m.tenant {
        parts.push(format!("tenant={t}"));
    }
    parts.join(" ")
}
