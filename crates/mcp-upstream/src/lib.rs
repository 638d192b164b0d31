//! # oncerpc-mcp-upstream
//!
//! oncerpc in front of other MCP servers (SPEC §16b). For each configured upstream
//! ([`UpstreamSpec`]) a supervisor task connects as an MCP client — Streamable HTTP, or a
//! command it starts and restarts with backoff ([`link`]) — in the era the upstream speaks
//! (`server/discover` first, else `initialize`; the client is oncerpc's own), lists its
//! tools (again on `notifications/tools/list_changed`) and offers the allowed ones on
//! oncerpc's MCP door through an [`External`] set ([`export`]).
//!
//! A call of a re-exported tool is an [`ExternalMethod`](oncerpc_core::ExternalMethod) of the
//! dispatcher: the same policy and idempotency engine as a registered method. Its handler
//! ([`call`]) forwards the key in `_meta["io.oncerpc/idempotency-key"]` (and in
//! `key_argument`), and answers the upstream's whole `CallToolResult` — an `isError` result
//! too, which is the tool's outcome and stored. A transport failure (the upstream is down,
//! went away mid-call, answered garbage) is `-32006` and a timeout `-32005`; neither is
//! stored, so a retry with the same key runs again.

pub mod call;
mod client;
mod errors;
pub mod export;
pub mod link;
pub mod metrics;
mod names;
pub mod oauth;
mod offers;
mod shared;
mod supervise;
mod wire;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use oncerpc_core::{Dispatcher, Kind};
use oncerpc_mcp::External;
use oncerpc_protocol::RpcError;
use serde_json::Value;

pub use metrics::UpstreamMetrics;

/// How oncerpc reaches one upstream.
#[derive(Debug, Clone)]
pub enum Transport {
    /// Streamable HTTP at this URL, with these headers on every request (oncerpc's own
    /// credentials for the upstream; a client's are never passed through), and with
    /// `oauth`, oncerpc's own access token from the upstream's authorization server.
    Http { url: String, headers: Vec<(String, String)>, oauth: Option<oauth::OAuthClient> },
    /// A command started by oncerpc, speaking MCP on its stdin/stdout; restarted with backoff
    /// when it exits.
    Stdio { command: String, args: Vec<String>, env: Vec<(String, String)> },
}

/// One `[[mcp.upstreams]]` entry.
#[derive(Debug, Clone)]
pub struct UpstreamSpec {
    pub name: String,
    pub transport: Transport,
    /// Glob patterns of the upstream's tool names offered (`*`: all).
    pub tools: Vec<String>,
    /// Put before each tool's name on oncerpc's door.
    pub prefix: String,
    /// The deadline of one call to the upstream: past it, `-32005`.
    pub timeout: Duration,
    /// The method deadline of its tools (a little longer than `timeout`, so that the
    /// upstream's own timeout answers, naming it). The store's lease must outlive it.
    pub method_timeout: Duration,
    /// Calls to this upstream in flight at once; more wait (within their deadline).
    pub max_in_flight: usize,
    /// The upstream's own idempotency-key argument: the key is also sent in it.
    pub key_argument: Option<String>,
    /// Kinds set per upstream tool name, over the `readOnlyHint` rule.
    pub kinds: BTreeMap<String, Kind>,
    /// Per upstream tool name: a call without a key gets one derived from its arguments,
    /// a duplicate within this window (`derive_key`, commands only).
    pub derive_key: BTreeMap<String, Duration>,
    /// The scopes a caller must hold to call its tools (SPEC §20) …
    pub scopes: Vec<String>,
    /// … or, per upstream tool name, these instead.
    pub tool_scopes: BTreeMap<String, Vec<String>>,
    /// How its tools are named on oncerpc's door (`[mcp] tool_names`): the prefixed name,
    /// model-safe by default.
    pub tool_names: oncerpc_mcp::ToolNames,
}

/// The upstreams of one gateway, connected and kept connected by their supervisors. A reload
/// changes them ([`Upstreams::change`]): added ones are connected, removed ones closed once
/// their calls have finished, the others left alone.
pub struct Upstreams {
    links: std::sync::RwLock<BTreeMap<String, Arc<link::Link>>>,
    metrics: UpstreamMetrics,
    /// What [`start`](Self::start) was given, for the supervisors of upstreams added later.
    started: std::sync::OnceLock<(Arc<Dispatcher>, External, reqwest::Client)>,
}

/// Upstreams made for a change ([`Upstreams::prepare`]), not connected yet.
pub struct Prepared(Vec<Arc<link::Link>>);

impl Upstreams {
    /// The upstreams of `specs`, not yet connected ([`start`](Self::start) connects them).
    pub fn new(specs: Vec<UpstreamSpec>) -> Result<Upstreams, String> {
        let metrics = UpstreamMetrics::new();
        let mut links = BTreeMap::new();
        for spec in specs {
            let link = link::Link::new(spec, metrics.clone())?;
            links.insert(link.spec.name.clone(), link);
        }
        Ok(Upstreams { links: links.into(), metrics, started: Default::default() })
    }

    /// Start a supervisor per upstream (inside a tokio runtime). Their tools appear in
    /// `external` as each connects.
    pub fn start(&self, dispatcher: Arc<Dispatcher>, external: External, http: reqwest::Client) {
        for link in self.links().values() {
            link.clone().supervise(dispatcher.clone(), external.clone(), http.clone());
        }
        let _ = self.started.set((dispatcher, external, http));
    }

    /// The upstreams `specs` describe, checked and made, not connected: what
    /// [`change`](Self::change) adds.
    pub fn prepare(&self, specs: Vec<UpstreamSpec>) -> Result<Prepared, String> {
        specs
            .into_iter()
            .map(|s| link::Link::new(s, self.metrics.clone()))
            .collect::<Result<_, _>>()
            .map(Prepared)
    }

    /// Remove the upstreams named `removed` — their tools are withdrawn at once, their calls
    /// in flight finish, then each is closed (a command stopped) — and add `added`, connected
    /// from now on (once started). An upstream in both is replaced.
    pub fn change(&self, removed: &[String], added: Prepared) {
        let mut links = self.links.write().unwrap_or_else(|e| e.into_inner());
        for name in removed {
            if let Some(link) = links.remove(name) {
                if let Some((_, external, _)) = self.started.get() {
                    link.retire(external);
                } else {
                    link.stop();
                }
            }
        }
        for link in added.0 {
            if let Some((dispatcher, external, http)) = self.started.get() {
                link.clone().supervise(dispatcher.clone(), external.clone(), http.clone());
            }
            links.insert(link.spec.name.clone(), link);
        }
    }

    fn links(&self) -> BTreeMap<String, Arc<link::Link>> {
        self.links.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The counters and gauges (register them where `/metrics` gathers).
    pub fn metrics(&self) -> &UpstreamMetrics {
        &self.metrics
    }

    /// Call `tool` (the upstream's own name) of `upstream` once, as a flow step does: its
    /// `CallToolResult`, or `-32006`/`-32005` when it could not be had.
    pub async fn call(
        &self,
        upstream: &str,
        tool: &str,
        arguments: serde_json::Map<String, Value>,
        key: Option<&str>,
    ) -> Result<Value, RpcError> {
        let link = self.links.read().unwrap_or_else(|e| e.into_inner()).get(upstream).cloned();
        let Some(link) = link else {
            return Err(call::failed(upstream, "no such upstream"));
        };
        link.call_tool(tool, arguments, key, None).await
    }

    /// Connect to `spec`'s upstream once and list what it would export: each tool's name on
    /// oncerpc's door and kind (`check-config`). The error says why it could not be reached.
    pub async fn preview(spec: UpstreamSpec, http: reqwest::Client) -> Result<Vec<(String, Kind)>, String> {
        let link = link::Link::new(spec, UpstreamMetrics::new())?;
        link.preview(&http).await
    }

    /// Stop every supervisor (and the commands they started).
    pub fn stop(&self) {
        for link in self.links().values() {
            link.stop();
        }
    }
}

impl Drop for Upstreams {
    fn drop(&mut self) {
        self.stop();
    }
}
