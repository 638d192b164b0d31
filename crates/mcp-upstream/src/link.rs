//! One upstream's connection: made, watched, and made again with backoff when it is lost
//! (a command that exited is started again), and the calls sent over it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use globset::GlobSet;
use oncerpc_core::{Dispatcher, Progress, ToolProgress};
use oncerpc_mcp::External;
use oncerpc_protocol::RpcError;
use rmcp::model::{
    CallToolRequestParams, JsonRpcMessage, MetaObject, NumberOrString, ProgressNotificationParam,
    ProtocolVersion, RequestMetaObject, ServerNotification,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, NotificationContext, Peer, RunningService, RxJsonRpcMessage,
    TxJsonRpcMessage,
};
use rmcp::transport::Transport as RmcpTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient};
use serde_json::{Map, Value, json};
use tokio::sync::{Notify, Semaphore, watch};

use crate::call::{failed, timed_out};
use crate::{Transport, UpstreamMetrics, UpstreamSpec};

/// The `_meta` member carrying the key to the upstream (the one oncerpc's own clients use).
pub const META_KEY: &str = oncerpc_mcp::call::META_KEY;
/// The first pause before connecting again; it doubles up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

pub struct Link {
    pub spec: UpstreamSpec,
    pub(crate) allow: GlobSet,
    peer: RwLock<Option<Peer<RoleClient>>>,
    limit: Semaphore,
    metrics: UpstreamMetrics,
    stop: watch::Sender<bool>,
    /// The upstream said `notifications/tools/list_changed`.
    relist: Arc<Notify>,
    /// It answered `server/discover` with an error it cannot be parsed from: `initialize`.
    legacy: AtomicBool,
    /// Where the progress of each call in flight goes, by the token oncerpc gave it.
    listeners: Listeners,
    next_token: AtomicI64,
}

/// The progress sinks of the calls in flight whose client listens, by progress token.
type Listeners = Arc<Mutex<HashMap<i64, Progress>>>;

/// The client side's notifications: a changed tool list is listed again. (Progress is taken
/// off the transport, in order: see [`Watched`].)
struct Client {
    relist: Arc<Notify>,
}

impl ClientHandler for Client {
    fn on_tool_list_changed(
        &self,
        _: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + Send + '_ {
        self.relist.notify_one();
        std::future::ready(())
    }
}

/// An upstream's transport whose progress notifications are passed on as they are received:
/// rmcp hands each notification to its handler on a task of its own, which may reorder them
/// and let the call's answer overtake them; read here, they reach the client in the order the
/// upstream sent them, before the answer that follows them.
struct Watched<T> {
    inner: T,
    listeners: Listeners,
}

impl<T: RmcpTransport<RoleClient>> RmcpTransport<RoleClient> for Watched<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        let message = self.inner.receive().await;
        if let Some(JsonRpcMessage::Notification(n)) = &message
            && let ServerNotification::ProgressNotification(p) = &n.notification
        {
            forward(&self.listeners, &p.params);
        }
        message
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

/// Pass an upstream's progress notification on to the call whose token it names (a token of
/// no call in flight, late or made up by the upstream, is dropped).
fn forward(listeners: &Listeners, params: &ProgressNotificationParam) {
    let token = match &params.progress_token.0 {
        NumberOrString::Number(n) => Some(*n),
        NumberOrString::String(s) => s.parse().ok(),
    };
    let sink = token.and_then(|t| listeners.lock().unwrap_or_else(|e| e.into_inner()).get(&t).cloned());
    if let Some(sink) = sink {
        sink.forward(&ToolProgress {
            progress: params.progress,
            total: params.total,
            message: params.message.as_deref(),
        });
    }
}

/// A call's progress token, listened to until the call ends.
struct Listening<'a> {
    listeners: &'a Listeners,
    token: i64,
}

impl Drop for Listening<'_> {
    fn drop(&mut self) {
        self.listeners.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.token);
    }
}

type Service = RunningService<RoleClient, Client>;

impl Link {
    pub fn new(spec: UpstreamSpec, metrics: UpstreamMetrics) -> Result<Arc<Link>, String> {
        let allow =
            crate::export::allowlist(&spec.tools).map_err(|e| format!("mcp.upstreams.{}.{e}", spec.name))?;
        Ok(Arc::new(Link {
            limit: Semaphore::new(spec.max_in_flight.max(1)),
            spec,
            allow,
            peer: RwLock::new(None),
            metrics,
            stop: watch::channel(false).0,
            relist: Arc::new(Notify::new()),
            legacy: AtomicBool::new(false),
            listeners: Arc::default(),
            next_token: AtomicI64::new(1),
        }))
    }

    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    fn set_peer(&self, peer: Option<Peer<RoleClient>>) {
        *self.peer.write().unwrap_or_else(|e| e.into_inner()) = peer;
    }

    fn peer(&self) -> Option<Peer<RoleClient>> {
        self.peer.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Connect in the era the upstream speaks: `server/discover` first, else `initialize`.
    async fn connect(&self, http: &reqwest::Client) -> Result<Service, String> {
        if !self.legacy.load(Ordering::Relaxed) {
            let auto = ClientLifecycleMode::Auto {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                legacy_version: None,
            };
            match self.connect_as(http, auto).await {
                Ok(s) => return Ok(s),
                Err(e) => {
                    tracing::debug!(upstream = %self.spec.name, error = %e, "server/discover refused: trying initialize");
                }
            }
        }
        let service = self.connect_as(http, ClientLifecycleMode::Initialize).await?;
        self.legacy.store(true, Ordering::Relaxed);
        Ok(service)
    }

    async fn connect_as(&self, http: &reqwest::Client, mode: ClientLifecycleMode) -> Result<Service, String> {
        let client = Client { relist: self.relist.clone() };
        let listeners = self.listeners.clone();
        let connecting = async {
            match &self.spec.transport {
                Transport::Http { url, headers } => {
                    let mut custom = HashMap::new();
                    for (k, v) in headers {
                        let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                            .map_err(|e| e.to_string())?;
                        let value = reqwest::header::HeaderValue::from_str(v).map_err(|e| e.to_string())?;
                        custom.insert(name, value);
                    }
                    let config =
                        StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom);
                    let inner = StreamableHttpClientTransport::with_client(http.clone(), config);
                    let transport = Watched { inner, listeners };
                    client.serve_with_lifecycle(transport, mode).await.map_err(|e| e.to_string())
                }
                Transport::Stdio { command, args, env } => {
                    let mut cmd = tokio::process::Command::new(command);
                    cmd.args(args).envs(env.iter().map(|(k, v)| (k, v))).kill_on_drop(true);
                    let (inner, _) = TokioChildProcess::builder(cmd)
                        .stderr(std::process::Stdio::inherit())
                        .spawn()
                        .map_err(|e| format!("cannot start {command:?}: {e}"))?;
                    let transport = Watched { inner, listeners };
                    client.serve_with_lifecycle(transport, mode).await.map_err(|e| e.to_string())
                }
            }
        };
        match tokio::time::timeout(self.spec.timeout.max(Duration::from_secs(5)), connecting).await {
            Ok(r) => r,
            Err(_) => Err("no answer to the handshake".into()),
        }
    }

    /// The supervisor: connect, list and publish the tools, follow `list_changed`, and
    /// connect again with jittered backoff when the connection ends; until [`Link::stop`].
    pub fn supervise(
        self: Arc<Self>,
        dispatcher: Arc<Dispatcher>,
        external: External,
        http: reqwest::Client,
    ) {
        tokio::spawn(async move {
            let name = self.spec.name.clone();
            let mut stop = self.stop.subscribe();
            let mut backoff = FIRST_BACKOFF;
            self.report(&external, false, None);
            self.metrics.set_up(&name, false);
            while !*stop.borrow() {
                let service = match self.connect(&http).await {
                    Ok(s) => s,
                    Err(e) => {
                        self.metrics.connect(&name, false);
                        self.report(&external, false, Some("cannot connect"));
                        tracing::warn!(upstream = %name, error = %oncerpc_core::LogSafe(&e), retry_in_ms = backoff.as_millis() as u64, "MCP upstream: cannot connect");
                        let pause = backoff.mul_f64(0.5 + fastrand::f64() / 2.0);
                        tokio::select! {
                            _ = tokio::time::sleep(pause) => {}
                            _ = stop.changed() => break,
                        }
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                        continue;
                    }
                };
                backoff = FIRST_BACKOFF;
                self.metrics.connect(&name, true);
                let peer = service.peer().clone();
                self.set_peer(Some(peer.clone()));
                let tools = self.publish(&peer, &dispatcher, &external).await;
                tracing::info!(upstream = %name, tools, "MCP upstream connected");
                self.metrics.set_up(&name, true);
                self.report(&external, true, None);
                let cancel = service.cancellation_token();
                let mut closed = std::pin::pin!(service.waiting());
                loop {
                    tokio::select! {
                        _ = &mut closed => break,
                        _ = self.relist.notified() => {
                            let tools = self.publish(&peer, &dispatcher, &external).await;
                            tracing::info!(upstream = %name, tools, "MCP upstream tools listed again (list_changed)");
                        }
                        _ = stop.changed() => {
                            cancel.cancel();
                            break;
                        }
                    }
                }
                self.set_peer(None);
                self.metrics.set_up(&name, false);
                self.report(&external, false, Some("connection lost"));
                tracing::warn!(upstream = %name, "MCP upstream connection ended: connecting again");
            }
            self.set_peer(None);
        });
    }

    /// List the upstream's tools and offer the allowed ones; how many. A failed listing keeps
    /// what was offered.
    async fn publish(
        self: &Arc<Self>,
        peer: &Peer<RoleClient>,
        dispatcher: &Dispatcher,
        external: &External,
    ) -> usize {
        match tokio::time::timeout(self.spec.timeout, peer.list_all_tools()).await {
            Ok(Ok(tools)) => {
                let listed: Vec<Value> = tools.iter().filter_map(|t| serde_json::to_value(t).ok()).collect();
                let exported = crate::export::export(self, dispatcher, &listed);
                let n = exported.len();
                external.replace(&self.spec.name, exported);
                n
            }
            Ok(Err(e)) => {
                tracing::warn!(upstream = %self.spec.name, error = %e, "MCP upstream: tools/list failed");
                external.names(&self.spec.name).len()
            }
            Err(_) => {
                tracing::warn!(upstream = %self.spec.name, "MCP upstream: tools/list timed out");
                external.names(&self.spec.name).len()
            }
        }
    }

    /// Connect once, list the tools, and name the allowed ones as they would be exported.
    pub(crate) async fn preview(
        &self,
        http: &reqwest::Client,
    ) -> Result<Vec<(String, oncerpc_core::Kind)>, String> {
        let service = self.connect(http).await?;
        let listed = tokio::time::timeout(self.spec.timeout, service.peer().list_all_tools()).await;
        let _ = service.cancel().await;
        let tools = match listed {
            Ok(Ok(tools)) => tools,
            Ok(Err(e)) => return Err(format!("tools/list failed: {e}")),
            Err(_) => return Err("tools/list timed out".into()),
        };
        let mut out = Vec::new();
        for tool in tools.iter().filter_map(|t| serde_json::to_value(t).ok()) {
            let Some(name) = tool["name"].as_str().filter(|n| self.allow.is_match(n)) else { continue };
            out.push((format!("{}{name}", self.spec.prefix), crate::export::kind(&self.spec, &tool)));
        }
        Ok(out)
    }

    fn report(&self, external: &External, up: bool, error: Option<&str>) {
        let mut state = json!({ "up": up, "tools": external.names(&self.spec.name).len() });
        if let Some(e) = error {
            state["error"] = json!(e);
        }
        external.set_health(&self.spec.name, state);
    }

    /// `tools/call` of `tool` with `arguments` and the key: the upstream's `CallToolResult`
    /// (an `isError` one too), or `-32006` (not connected, the connection failed or was lost,
    /// an answer that is not a result) or `-32005` (no answer within `timeout_ms`). With
    /// `progress`, the call carries a progress token and the upstream's progress
    /// notifications for it are passed on there.
    pub async fn call_tool(
        &self,
        tool: &str,
        mut arguments: Map<String, Value>,
        key: Option<&str>,
        progress: Option<Progress>,
    ) -> Result<Value, RpcError> {
        let name = &self.spec.name;
        let outcome = |o: &str| self.metrics.call(name, o);
        let Some(peer) = self.peer() else {
            outcome("failed");
            return Err(failed(name, "not connected"));
        };
        let mut params = CallToolRequestParams::new(tool.to_owned());
        let mut meta = Map::new();
        if let Some(key) = key {
            if let Some(arg) = &self.spec.key_argument {
                arguments.insert(arg.clone(), json!(key));
            }
            meta.insert(META_KEY.into(), json!(key));
        }
        let _listening = progress.map(|sink| {
            let token = self.next_token.fetch_add(1, Ordering::Relaxed);
            self.listeners.lock().unwrap_or_else(|e| e.into_inner()).insert(token, sink);
            meta.insert("progressToken".into(), json!(token));
            Listening { listeners: &self.listeners, token }
        });
        if !meta.is_empty() {
            params.meta = Some(RequestMetaObject(MetaObject(meta)));
        }
        params.arguments = Some(arguments);
        let calling = async {
            let _permit = self.limit.acquire().await;
            peer.call_tool(params).await
        };
        match tokio::time::timeout(self.spec.timeout, calling).await {
            Ok(Ok(result)) => {
                let value = serde_json::to_value(&result).map_err(RpcError::internal)?;
                outcome(if value["isError"] == json!(true) { "tool_error" } else { "ok" });
                Ok(value)
            }
            Ok(Err(e)) => {
                outcome("failed");
                tracing::warn!(upstream = %name, tool = %oncerpc_core::LogSafe(tool), error = %e, "MCP upstream call failed");
                Err(failed(name, "the call did not complete"))
            }
            Err(_) => {
                outcome("timeout");
                Err(timed_out(name, self.spec.timeout.as_millis()))
            }
        }
    }
}
