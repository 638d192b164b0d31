//! `[[openapi]]` and `[[openapi.operation]]` as the config file says them: plain serde types.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::OAuthClient;
use crate::retry::RetryPolicy;

/// `[[openapi]]`: every operation of one OpenAPI 3.0/3.1 document as a method.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OpenApiConfig {
    /// Names the document in errors and logs; the default method prefix is `"{name}."`.
    pub name: String,
    /// A file path, or an `http://`/`https://` URL fetched at start.
    pub spec: String,
    /// Where requests go; default: the document's first `servers` entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// operationId globs (`*`, `?`) of the operations to import; empty: all of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub operations: Vec<String>,
    /// Put before each method name; default `"{name}."`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// The header that carries each call's step key.
    #[serde(default = "default_key_header")]
    pub key_header: String,
    /// Sent with every request (`"${NAME}"` values come from the environment).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Each method's deadline; default `limits.default_timeout_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Each attempt's own time limit (a step's `timeout_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_timeout_ms: Option<u64>,
    /// Attempts and backoff for transient failures, as a step's `retry`.
    #[serde(default)]
    pub retry: RetryPolicy,
    /// oncerpc's OAuth client at this API's authorization server, instead of `[upstream.oauth]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<OAuthClient>,
    /// `[[openapi.operation]]`: per-operation overrides.
    #[serde(default, rename = "operation", skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<OperationOverride>,
}

/// `[[openapi.operation]]`: what one operation's method is, where the document's default
/// does not fit.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OperationOverride {
    /// The operationId (or the derived name of an operation without one).
    pub id: String,
    /// `query` or `command`; default by HTTP method.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<oncerpc_core::Kind>,
    /// The scopes a caller must hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Vec<String>>,
    /// The idempotency key from a JSON pointer into the params (as `[[methods]] key_from`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_from: Option<String>,
    /// `false`: not listed as an MCP tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<bool>,
}

fn default_key_header() -> String {
    "Idempotency-Key".into()
}

impl OpenApiConfig {
    /// Its own rules (the document is read later, when the methods are made).
    pub fn check(&self) -> Result<(), String> {
        use reqwest::header::{HeaderName, HeaderValue};
        let at = format!("openapi.{}", self.name);
        if self.name.trim().is_empty() {
            return Err("openapi: a document needs a name".into());
        }
        if self.spec.trim().is_empty() {
            return Err(format!("{at}.spec: a file path or an http(s) URL"));
        }
        if HeaderName::from_bytes(self.key_header.as_bytes()).is_err() {
            return Err(format!("{at}.key_header {:?} is not a header name", self.key_header));
        }
        for (k, v) in &self.headers {
            if HeaderName::from_bytes(k.as_bytes()).is_err() || HeaderValue::from_str(v).is_err() {
                // Never the value: it may be a secret.
                return Err(format!("{at}.headers: {k:?} is not a valid header (name or value)"));
            }
        }
        if let Some(problem) = self.retry.problem() {
            return Err(format!("{at}: {problem}"));
        }
        if self.timeout_ms == Some(0) || self.attempt_timeout_ms == Some(0) {
            return Err(format!("{at}: timeout_ms and attempt_timeout_ms must be greater than 0"));
        }
        if let Some(o) = &self.oauth {
            o.check(&format!("{at}.oauth"))?;
        }
        Ok(())
    }

    /// The method names' prefix.
    pub fn prefix(&self) -> String {
        self.prefix.clone().unwrap_or_else(|| format!("{}.", self.name))
    }
}
