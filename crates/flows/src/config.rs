//! What a flow is made of, as `[[methods.steps]]` and `[upstream]` say it (SPEC §6, §12–§14):
//! plain serde types, so an embedder can build them in code or read them from any format.

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// `[[methods.steps]]`. `Default` is a base for struct literals (an empty name and URL are
/// not valid by themselves).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StepConfig {
    pub name: String,
    /// An HTTP upstream (`POST`); exactly one of `url` and `mcp`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub url: String,
    /// A tool of an MCP upstream (`mcp = { upstream, tool }`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpStep>,
    /// A question to the flow's client instead of an upstream (`ask = { message, schema }`,
    /// MCP elicitation); then neither `url` nor `mcp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ask: Option<crate::ask::AskStep>,
    /// Attempts and backoff for transient failures (`retry.rs`); one attempt by default.
    #[serde(default)]
    pub retry: crate::retry::RetryPolicy,
    /// Each attempt's own time limit; without it an attempt may take the method's whole
    /// remaining time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// This step's own OAuth client towards its upstream, instead of `[upstream.oauth]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<OAuthClient>,
    /// The request is built from the input (an imported OpenAPI operation) instead of a
    /// `POST` of it to `url`, which then only names the step's upstream in logs. Set in code
    /// (`[[openapi]]`), never in a config file.
    #[serde(skip)]
    pub request: Option<Arc<dyn crate::request::StepRequest>>,
}

pub use oncerpc_mcp_upstream::oauth::OAuthClient;

/// `[[methods.steps]] mcp = { upstream = "mail", tool = "send_message" }`: the step calls one
/// tool of an upstream (its own name, without the prefix) with the step's input as arguments.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct McpStep {
    pub upstream: String,
    pub tool: String,
}

/// `[upstream]`: how flow steps talk to their upstreams (SPEC §12).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// A step whose answer is larger fails with `-32006`; reading stops there.
    #[serde(default = "default_max_response_bytes")]
    pub max_response_bytes: usize,
    /// Follow `3xx` answers; when `false` a redirect fails the step like any non-2xx.
    #[serde(default)]
    pub follow_redirects: bool,
    /// `https://` steps: a PEM file of extra trusted CAs, on top of the platform's roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// mTLS: the certificate chain (PEM) presented to upstreams that ask for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cert_file: Option<PathBuf>,
    /// mTLS: the private key (PEM) of `client_cert_file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_key_file: Option<PathBuf>,
    /// `[upstream.oauth]`: oncerpc's OAuth client for every step that has none of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<OAuthClient>,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            max_response_bytes: default_max_response_bytes(),
            follow_redirects: false,
            ca_file: None,
            client_cert_file: None,
            client_key_file: None,
            oauth: None,
        }
    }
}

fn default_max_response_bytes() -> usize {
    1024 * 1024
}
