//! The TOML configuration of SPEC §11. Unknown keys are errors that name the key; every
//! default is written here once and documented in docs/CONFIG.md.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub mod mcp;
pub mod mcp_upstreams;
mod source;
pub mod tools;
mod validate;
pub mod verify;

pub use source::{Loaded, Source};

pub use crate::limits::Limits;
pub use oncerpc_flows::{StepConfig, UpstreamConfig};

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

fn invalid(msg: impl Into<String>) -> ConfigError {
    ConfigError::Invalid(msg.into())
}

pub use oncerpc_core::Mode;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub mode: Mode,
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Register the demo methods. Default: `true` when no `[[methods]]` are configured.
    #[serde(default)]
    pub demo: Option<bool>,
    /// Production mode: allow a non-loopback `listen` with no `[[tenants]]` (an open gateway).
    #[serde(default)]
    pub allow_anonymous: bool,
    #[serde(default)]
    pub store: StoreConfig,
    #[serde(default)]
    pub batch: BatchSection,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub upstream: UpstreamConfig,
    #[serde(default)]
    pub http: HttpSection,
    /// `[tls]`: terminate TLS on the listener (absent: plain HTTP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSection>,
    #[serde(default)]
    pub mcp: mcp::McpSection,
    #[serde(default)]
    pub console: crate::console::ConsoleSection,
    /// `[log]`: the log level (a reload changes it).
    #[serde(default)]
    pub log: LogSection,
    /// `[telemetry]`: OpenTelemetry export of spans over OTLP (absent: off).
    #[serde(default)]
    pub telemetry: crate::telemetry::TelemetrySection,
    /// `[auth]`: identity providers whose access tokens are accepted (SPEC §20).
    #[serde(default)]
    pub auth: crate::auth::AuthSection,
    #[serde(default)]
    pub tenants: Vec<Tenant>,
    #[serde(default)]
    pub methods: Vec<MethodConfig>,
    /// `[[openapi]]`: OpenAPI documents whose operations become methods (SPEC §21), added to
    /// `methods` when the app is built ([`crate::openapi::expand`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub openapi: Vec<oncerpc_flows::openapi::OpenApiConfig>,
    /// Keys whose value came from `"${NAME}"` (key → NAME), for `check-config`.
    #[serde(skip)]
    pub env_refs: crate::secrets::EnvRefs,
}

impl Default for Config {
    fn default() -> Self {
        // The empty document is the embedded default.
        toml::from_str("").expect("the empty config is valid")
    }
}

/// `[log]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LogSection {
    /// Levels and targets (`"info"`, `"warn,oncerpc_core=debug"`); `--log-level` and
    /// `RUST_LOG` win when given.
    #[serde(default = "default_log_level")]
    pub level: String,
}

impl Default for LogSection {
    fn default() -> Self {
        LogSection { level: default_log_level() }
    }
}

fn default_log_level() -> String {
    "info".into()
}

fn default_listen() -> String {
    "127.0.0.1:8080".into()
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    #[serde(default = "default_store_url")]
    pub url: String,
    #[serde(default = "default_ttl")]
    pub ttl_secs: u64,
    #[serde(default = "default_lease")]
    pub lease_ms: u64,
    /// How often unfinished async events are looked for, to resume those whose owner died.
    #[serde(default = "default_resume_interval")]
    pub resume_interval_ms: u64,
    /// Namespace of every Redis key (`redis://` stores): gateways sharing records use the same.
    #[serde(default = "default_redis_prefix")]
    pub redis_prefix: String,
    /// Redis only: after each claim, renewal and completion, `WAIT` until this many replicas
    /// have the write (fewer in 1 s: the call fails, `-32004`). 0: don't wait.
    #[serde(default)]
    pub redis_wait_replicas: u32,
    /// The bound on each store call (claim, renewal, completion, read, health check): past
    /// it the call fails as if the store were down (`-32004`, nothing run) and `/healthz`
    /// reports the store. At most half of `lease_ms`; unset: 3000 ms, or half the lease
    /// when that is shorter ([`StoreConfig::op_timeout`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op_timeout_ms: Option<u64>,
    /// `rediss://` stores: a PEM file of the CA that signed the server's certificate (a
    /// private CA); absent: the platform's roots. PostgreSQL takes `sslrootcert` in its URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
}

impl StoreConfig {
    /// The bound on each store call: `op_timeout_ms`, or by default 3000 ms (at most half
    /// the lease).
    pub fn op_timeout(&self) -> std::time::Duration {
        let default = oncerpc_core::idempotency::DEFAULT_STORE_TIMEOUT.as_millis() as u64;
        std::time::Duration::from_millis(self.op_timeout_ms.unwrap_or(default.min(self.lease_ms / 2)).max(1))
    }
}

fn default_redis_prefix() -> String {
    "oncerpc".into()
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            url: default_store_url(),
            ttl_secs: default_ttl(),
            lease_ms: default_lease(),
            resume_interval_ms: default_resume_interval(),
            redis_prefix: default_redis_prefix(),
            redis_wait_replicas: 0,
            op_timeout_ms: None,
            ca_file: None,
        }
    }
}

fn default_resume_interval() -> u64 {
    1_000
}

fn default_store_url() -> String {
    "sqlite://oncerpc.db".into()
}
fn default_ttl() -> u64 {
    86_400
}
fn default_lease() -> u64 {
    60_000
}

/// `[http]`: browser access.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSection {
    /// Origins whose pages may call the gateway from a browser (CORS): exact origins such as
    /// `"https://app.example.com"`, or `["*"]` for any. Empty (the default): no CORS headers,
    /// browsers refuse cross-origin calls.
    #[serde(default)]
    pub cors_allowed_origins: Vec<String>,
    /// The URL clients reach the gateway at (behind a proxy, or with `[tls]`): the `resource`
    /// of its protected resource metadata (SPEC §20). Absent: `http://` and the request's Host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_url: Option<String>,
}

impl HttpSection {
    fn validate(&self) -> Result<(), ConfigError> {
        if let Some(u) = &self.public_url
            && !((u.starts_with("https://") || u.starts_with("http://")) && !u.contains(['?', '#']))
        {
            return Err(invalid(format!(
                "http.public_url {u:?} must be an http:// or https:// URL without a query"
            )));
        }
        let origins = &self.cors_allowed_origins;
        if origins.iter().any(|o| o == "*") {
            if origins.len() > 1 {
                return Err(invalid(
                    "http.cors_allowed_origins: \"*\" allows every origin and cannot be combined with others",
                ));
            }
            return Ok(());
        }
        for o in origins {
            let Some((scheme, rest)) = o.split_once("://") else {
                return Err(invalid(format!(
                    "http.cors_allowed_origins: {o:?} is not an origin (scheme://host[:port])"
                )));
            };
            let host_ok = !rest.is_empty()
                && rest
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
            if !matches!(scheme, "http" | "https") || !host_ok {
                return Err(invalid(format!(
                    "http.cors_allowed_origins: {o:?} is not an origin: scheme://host[:port], no path or trailing slash"
                )));
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct BatchSection {
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default = "default_batch_max")]
    pub max_size: usize,
    #[serde(default = "default_batch_concurrency")]
    pub max_concurrency: usize,
}

impl Default for BatchSection {
    fn default() -> Self {
        BatchSection {
            enabled: true,
            max_size: default_batch_max(),
            max_concurrency: default_batch_concurrency(),
        }
    }
}

fn yes() -> bool {
    true
}
fn default_batch_max() -> usize {
    50
}
fn default_batch_concurrency() -> usize {
    16
}

/// `[tls]`: the listener's certificate and key (PEM), read again on `SIGHUP`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSection {
    /// The certificate chain, leaf first.
    pub cert_file: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Tenant {
    pub name: String,
    /// Keys holding every scope of the tenant.
    #[serde(default)]
    pub api_keys: Vec<String>,
    /// `[[tenants.keys]]`: keys holding only the scopes they name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<crate::auth::TenantKey>,
    /// Sustained requests per second (token bucket, SPEC §12); absent = unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_sec: Option<f64>,
    /// Requests allowed at once above the rate; default `ceil(rate_per_sec)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<u32>,
    /// Requests of this tenant served at once; absent = only `limits.max_in_flight`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<usize>,
    /// This tenant's share of `limits.max_background`; absent = an equal share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_background: Option<usize>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MethodConfig {
    pub name: String,
    pub kind: oncerpc_core::Kind,
    #[serde(default)]
    pub notification_allowed: bool,
    /// Handler deadline; `limits.default_timeout_ms` when absent.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    #[serde(default)]
    pub params_schema: Option<serde_json::Value>,
    #[serde(default)]
    pub description: Option<String>,
    /// The scopes a caller must hold, all of them (SPEC §20); empty: any caller of the tenant.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
    #[serde(default)]
    pub steps: Vec<StepConfig>,
    /// Webhooks (SPEC §15, [`crate::webhooks`]): the key from a JSON pointer into the params…
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_from: Option<String>,
    /// … or from a request header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_header: Option<String>,
    /// Only these JSON pointers' values form the fingerprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint_from: Option<Vec<String>>,
    /// Deliveries must be signed (checked over the raw body before anything else).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<verify::VerifySection>,
    /// With `verify`: the tenant a verified delivery is served as (no API key needed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// The MCP door ([`crate::mcp`]): `false` hides the method from `tools/list`…
    #[serde(default = "yes")]
    pub mcp: bool,
    /// … a tool's `title`, `destructiveHint` and `outputSchema`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destructive: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
    /// Keys derived from the call itself when it brings none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub derive_key: Option<tools::DeriveKey>,
    /// MCP tasks (`2026-07-28`): `"optional"` (a command's default: a task when the client
    /// declares the extension) or `"required"` (only as a task).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<tools::TaskSupport>,
}

impl Default for MethodConfig {
    /// A command named `""` with no steps (not valid by itself): a base for struct literals
    /// (`MethodConfig { name, steps, ..Default::default() }`) that keeps them compiling when
    /// keys are added.
    fn default() -> Self {
        MethodConfig {
            name: String::new(),
            kind: oncerpc_core::Kind::Command,
            notification_allowed: false,
            timeout_ms: None,
            params_schema: None,
            description: None,
            scopes: Vec::new(),
            steps: Vec::new(),
            key_from: None,
            key_header: None,
            fingerprint_from: None,
            verify: None,
            tenant: None,
            mcp: true,
            title: None,
            destructive: None,
            output_schema: None,
            derive_key: None,
            tasks: None,
        }
    }
}

/// `store.ttl_secs` must be at least this many times `store.lease_ms`.
pub const TTL_LEASE_RATIO: u64 = 10;

impl Config {
    /// Read and validate a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let cfg = Self::read(path)?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Read a config file without validating it: the command line's flags override it first
    /// (`--mode dev` on a production file), then [`validate`](Self::validate) judges the
    /// result.
    pub fn read(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.display().to_string(), source })?;
        Self::parse_with_env(&text, &|name| std::env::var(name).ok()).map_err(|e| match e {
            ConfigError::Parse { message, .. } => {
                ConfigError::Parse { path: path.display().to_string(), message }
            }
            other => other,
        })
    }

    /// Parse and validate TOML text; `"${NAME}"` values come from the environment.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        Self::from_toml_with_env(text, &|name| std::env::var(name).ok())
    }

    /// [`from_toml`](Self::from_toml) with `env` as the environment.
    pub fn from_toml_with_env(
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let cfg = Self::parse_with_env(text, env)?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Parse TOML text, `"${NAME}"` values from `env`; not validated.
    fn parse_with_env(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let parse_error =
            |e: toml::de::Error| ConfigError::Parse { path: "<config>".into(), message: e.to_string() };
        let cfg: Config = if text.contains("${") {
            // Substituted in the parsed document, so a value can never inject TOML syntax.
            let mut doc: toml::Value = toml::from_str(text).map_err(parse_error)?;
            let refs = crate::secrets::substitute(&mut doc, env)
                .map_err(|m| invalid(format!("{}: the environment variable {} is not set", m.key, m.var)))?;
            let mut cfg: Config = doc.try_into().map_err(parse_error)?;
            cfg.env_refs = refs;
            cfg
        } else {
            toml::from_str(text).map_err(parse_error)?
        };
        Ok(cfg)
    }

    /// How `check-config` shows the value at `key`: `${NAME}` when it came from the
    /// environment, else `value`.
    pub fn shown(&self, key: &str, value: &str) -> String {
        match self.env_refs.get(key) {
            Some(var) => format!("${{{var}}}"),
            None => value.to_owned(),
        }
    }

    /// Whether the demo methods are registered. Default: off in production mode, else on when
    /// no `[[methods]]` or `[[openapi]]` are configured.
    pub fn demo_enabled(&self) -> bool {
        self.demo
            .unwrap_or(self.mode != Mode::Production && self.methods.is_empty() && self.openapi.is_empty())
    }

    /// A configured method's handler deadline in milliseconds.
    pub fn method_timeout_ms(&self, m: &MethodConfig) -> u64 {
        m.timeout_ms.unwrap_or(self.limits.default_timeout_ms)
    }

    pub fn listen_addr(&self) -> Result<SocketAddr, ConfigError> {
        self.listen.parse().map_err(|e| {
            invalid(format!("listen: {:?} is not an address like 127.0.0.1:8080 ({e})", self.listen))
        })
    }
}

/// Shortest plaintext API key production mode accepts, in characters.
pub const MIN_PLAINTEXT_KEY_CHARS: usize = 16;

fn parse_sha256_hex(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// The store kinds a URL may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Memory,
    Sqlite,
    Redis,
    Postgres,
}

/// Which store a URL names.
pub fn store_scheme(url: &str) -> Result<StoreKind, ConfigError> {
    let scheme = url.split("://").next().unwrap_or_default();
    if !url.contains("://") {
        let url = oncerpc_core::redact_url(url);
        return Err(invalid(format!(
            "store.url {url:?} has no scheme: use memory://, sqlite://PATH, redis://HOST:PORT or postgres://…"
        )));
    }
    match scheme {
        "memory" => Ok(StoreKind::Memory),
        "sqlite" => Ok(StoreKind::Sqlite),
        "redis" | "rediss" => Ok(StoreKind::Redis),
        "postgres" | "postgresql" => Ok(StoreKind::Postgres),
        other => Err(invalid(format!(
            "store.url: unknown scheme {other:?}: use memory://, sqlite://PATH, redis://HOST:PORT or postgres://…"
        ))),
    }
}
