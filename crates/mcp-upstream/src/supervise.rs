//! An upstream's supervisor: connect, list and offer its tools (and its resources and
//! prompts), follow its list changes, and connect again with jittered backoff when the
//! connection ends. Kept apart from the link, which knows nothing of what is offered.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use oncerpc_core::Dispatcher;
use oncerpc_mcp::External;

use crate::client::{Connection, Listing};
use crate::link::{FIRST_BACKOFF, Link, MAX_BACKOFF, MIN_RELIST};

impl Link {
    /// The supervisor: connect, list and publish the tools, follow `list_changed` (a
    /// stateless upstream's list: when its `ttlMs` ends), and connect again with jittered
    /// backoff when the connection ends; until [`Link::stop`].
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
                let connection = match self.connect(&http).await {
                    Ok(c) => Arc::new(c),
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
                self.set_connection(Some(connection.clone()));
                let (tools, mut ttl) = self.publish(&connection, &dispatcher, &external).await;
                crate::offers::publish(&self, &connection, &external).await;
                tracing::info!(upstream = %name, tools, "MCP upstream connected");
                self.metrics.set_up(&name, true);
                self.report(&external, true, None);
                loop {
                    let relist_in = ttl.unwrap_or(Duration::from_secs(86_400)).max(MIN_RELIST);
                    tokio::select! {
                        _ = connection.shared.closed() => break,
                        _ = self.relist.notified() => {
                            (_, ttl) = self.publish(&connection, &dispatcher, &external).await;
                            self.report(&external, true, None);
                            tracing::info!(upstream = %name, tools = external.names(&name).len(), "MCP upstream tools listed again (list_changed)");
                        }
                        _ = self.offers_changed.notified() => crate::offers::publish(&self, &connection, &external).await,
                        _ = tokio::time::sleep(relist_in), if ttl.is_some() => {
                            (_, ttl) = self.publish(&connection, &dispatcher, &external).await;
                            self.report(&external, true, None);
                        }
                        _ = stop.changed() => {
                            connection.close();
                            break;
                        }
                    }
                }
                self.set_connection(None);
                self.metrics.set_up(&name, false);
                if *stop.borrow() {
                    break;
                }
                self.report(&external, false, Some("connection lost"));
                tracing::warn!(upstream = %name, why = %oncerpc_core::LogSafe(&connection.shared.why()), "MCP upstream connection ended: connecting again");
            }
            self.set_connection(None);
        });
    }

    /// List the upstream's tools and offer the allowed ones: how many, and how long the list
    /// may be kept (a stateless upstream's `ttlMs`). A failed listing keeps what was offered.
    async fn publish(
        self: &Arc<Self>,
        connection: &Connection,
        dispatcher: &Dispatcher,
        external: &External,
    ) -> (usize, Option<Duration>) {
        if self.retired.load(Ordering::SeqCst) {
            return (0, None);
        }
        match tokio::time::timeout(self.spec.timeout, connection.list_tools()).await {
            Ok(Ok(Listing { tools, ttl })) => {
                let headers = tools
                    .iter()
                    .filter_map(|t| {
                        let params = oncerpc_mcp::tools::header_params(&t["inputSchema"]);
                        Some((t["name"].as_str()?.to_owned(), params)).filter(|(_, p)| !p.is_empty())
                    })
                    .collect();
                *self.header_params.write().unwrap_or_else(|e| e.into_inner()) = headers;
                let exported = crate::export::export(self, dispatcher, &tools);
                let n = exported.len();
                external.replace(&self.spec.name, exported);
                (n, ttl)
            }
            Ok(Err(e)) => {
                tracing::warn!(upstream = %self.spec.name, error = %oncerpc_core::LogSafe(&e.to_string()), "MCP upstream: tools/list failed");
                (external.names(&self.spec.name).len(), None)
            }
            Err(_) => {
                tracing::warn!(upstream = %self.spec.name, "MCP upstream: tools/list timed out");
                (external.names(&self.spec.name).len(), None)
            }
        }
    }

    /// Connect once, list the tools, and name the allowed ones as they would be exported.
    pub(crate) async fn preview(
        &self,
        http: &reqwest::Client,
    ) -> Result<Vec<(String, oncerpc_core::Kind)>, String> {
        let connection = self.connect(http).await?;
        let listed = tokio::time::timeout(self.spec.timeout, connection.list_tools()).await;
        connection.close();
        let tools = match listed {
            Ok(Ok(listing)) => listing.tools,
            Ok(Err(e)) => return Err(format!("tools/list failed: {e}")),
            Err(_) => return Err("tools/list timed out".into()),
        };
        let mut out = Vec::new();
        for tool in tools {
            let Some(name) = tool["name"].as_str().filter(|n| self.allow.is_match(n)) else { continue };
            let method = crate::names::method_name(&self.spec, name);
            let exported = self.spec.tool_names.tool_name(&method).unwrap_or(method);
            out.push((exported, crate::names::kind(&self.spec, &tool)));
        }
        Ok(out)
    }
}
