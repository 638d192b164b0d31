//! # oncerpc-flows
//!
//! Flows (SPEC §6, §12–§14): a method whose execution is a list of upstream steps — an HTTP
//! `POST` ([`StepConfig::url`]) or a tool of an MCP upstream ([`StepConfig::mcp`]) — the first
//! given the params, each next one the previous step's output. Under an idempotency key each
//! step runs once across retries, take-overs and crashes: its output is journaled before the
//! next step starts, and an execution taken over resumes at the first step without one
//! ([`flow`]). A step may retry transient failures with jittered backoff ([`retry`]); every
//! attempt carries the same step key, derived per tenant, method, key and step. The upstream
//! HTTP client ([`upstream`]) speaks rustls with the platform's roots, a private CA and mTLS.
//!
//! A [`Flow`] is an `oncerpc_core::Handler`: register it like any method.
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use oncerpc_core::{MethodSpec, Registry};
//! use oncerpc_flows::{Flow, StepAttempts, StepConfig, UpstreamConfig, UpstreamPolicy};
//!
//! let steps = vec![
//!     StepConfig { name: "reserve".into(), url: "http://127.0.0.1:9000/reserve".into(), ..Default::default() },
//!     StepConfig { name: "confirm".into(), url: "http://127.0.0.1:9000/confirm".into(), ..Default::default() },
//! ];
//! let client = oncerpc_flows::upstream::client(&UpstreamConfig::default()).expect("an HTTP client");
//! let timeout = Duration::from_secs(10);
//! let flow = Flow::new("orders.create", steps, client, UpstreamPolicy::default(), timeout, StepAttempts::new());
//! let mut registry = Registry::new();
//! registry
//!     .register_arc("orders.create", MethodSpec::command().timeout(timeout), Arc::new(flow))
//!     .expect("a new method");
//! ```

mod answers;
pub mod ask;
mod attempts;
mod body;
pub mod config;
pub mod flow;
pub mod oauth;
pub mod openapi;
pub mod request;
pub mod retry;
mod step;
pub mod upstream;

pub use ask::AskStep;
pub use config::{McpStep, OAuthClient, StepConfig, UpstreamConfig};
pub use flow::{Flow, StepAttempts, UpstreamPolicy};
pub use oauth::{TokenPool, TokenSource};
pub use request::{Built, StepRequest};
pub use retry::RetryPolicy;
pub use step::step_output;
