//! `[limits]`: what one process accepts at once and how long it waits (SPEC §11).

use serde::{Deserialize, Serialize};

/// `[limits]`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    #[serde(default = "default_body")]
    pub max_body_bytes: usize,
    #[serde(default = "default_in_flight")]
    pub max_in_flight: usize,
    /// Handler deadline of methods that set none (the demo methods, flows without
    /// `timeout_ms`).
    #[serde(default = "default_timeout_ms")]
    pub default_timeout_ms: u64,
    /// At shutdown, how long in-flight requests and detached executions (async events,
    /// commands whose client left, outcomes still being written) may take to finish.
    #[serde(default = "default_shutdown_grace")]
    pub shutdown_grace_ms: u64,
    /// Keyed executions and async events running at once in this process (including those
    /// whose client left, and events the resumer restarts); past it, `-32007` / `503` before
    /// anything is claimed.
    #[serde(default = "default_max_background")]
    pub max_background: usize,
    /// A connection that has not sent complete request headers by then is closed.
    #[serde(default = "default_header_timeout")]
    pub header_timeout_ms: u64,
    /// The whole request body must arrive by then, else `408`.
    #[serde(default = "default_body_timeout")]
    pub body_timeout_ms: u64,
    /// A kept-alive connection with no request for this long is closed.
    #[serde(default = "default_idle_timeout")]
    pub idle_timeout_ms: u64,
    /// Open connections at once; beyond it new connections get `503` and are closed.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
}

fn default_header_timeout() -> u64 {
    10_000
}
fn default_body_timeout() -> u64 {
    30_000
}
fn default_idle_timeout() -> u64 {
    60_000
}
fn default_max_connections() -> usize {
    10_000
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: default_body(),
            max_in_flight: default_in_flight(),
            default_timeout_ms: default_timeout_ms(),
            shutdown_grace_ms: default_shutdown_grace(),
            max_background: default_max_background(),
            header_timeout_ms: default_header_timeout(),
            body_timeout_ms: default_body_timeout(),
            idle_timeout_ms: default_idle_timeout(),
            max_connections: default_max_connections(),
        }
    }
}

fn default_max_background() -> usize {
    1024
}

fn default_shutdown_grace() -> u64 {
    30_000
}

fn default_body() -> usize {
    1024 * 1024
}
fn default_in_flight() -> usize {
    1024
}
fn default_timeout_ms() -> u64 {
    30_000
}
