//! What a connection's two sides share: the requests waiting for their answers, the
//! listeners of progress, whether it is closed, and the router of everything the upstream
//! sends. The client (`client.rs`) waits here; the wires (`wire/`) hand their messages here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use oncerpc_core::{Progress, ToolProgress};
use serde_json::{Value, json};
use tokio::sync::{Notify, oneshot};
use tokio_util::sync::CancellationToken;

/// The largest message read from an upstream: a line on stdio, an HTTP body, an event
/// stream's whole length. Past it the connection is dropped as garbage.
pub(crate) const MAX_MESSAGE: usize = 16 << 20;

/// The progress sinks of the calls in flight whose client listens, by progress token.
pub(crate) type Listeners = Arc<Mutex<HashMap<i64, Progress>>>;

/// Which revision the connection speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Era {
    /// `2026-07-28`: every request carries its version and capabilities in `_meta`.
    Stateless,
    /// `initialize` done: this version, and over HTTP the session the upstream gave.
    Session(String),
}

/// Why a request got no result.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The connection is gone (the command exited, the session ended, the host is down).
    Closed(String),
    /// The upstream answered with a JSON-RPC error.
    Error { code: i64, message: String },
    /// It answered something that is not MCP, or the transport refused this one message.
    Garbage(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Closed(why) => write!(f, "connection closed: {why}"),
            Failure::Error { code, message, .. } => write!(f, "error {code}: {message}"),
            Failure::Garbage(why) => write!(f, "{why}"),
        }
    }
}

/// What both sides of a connection share: the requests waiting for their answers, the
/// listeners of progress, and whether it is closed (and why).
pub(crate) struct Shared {
    pending: Mutex<HashMap<i64, oneshot::Sender<Result<Value, Failure>>>>,
    listeners: Listeners,
    relist: Arc<Notify>,
    /// Told when the upstream's resources or prompts change.
    reoffer: Arc<Notify>,
    closed: CancellationToken,
    why: Mutex<Option<String>>,
}

impl Shared {
    pub(crate) fn new(listeners: Listeners, relist: Arc<Notify>, reoffer: Arc<Notify>) -> Arc<Shared> {
        Arc::new(Shared {
            pending: Mutex::default(),
            listeners,
            relist,
            reoffer,
            closed: CancellationToken::new(),
            why: Mutex::default(),
        })
    }

    /// Close the connection: every request waiting fails with `why` (the first reason given
    /// is kept).
    pub(crate) fn close(&self, why: &str) {
        {
            let mut kept = self.why.lock().unwrap_or_else(|e| e.into_inner());
            if kept.is_none() {
                *kept = Some(why.to_owned());
            }
        }
        self.closed.cancel();
        let waiting: Vec<_> = self.pending.lock().unwrap_or_else(|e| e.into_inner()).drain().collect();
        for (_, tx) in waiting {
            let _ = tx.send(Err(Failure::Closed(why.to_owned())));
        }
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// Why it closed (once it has).
    pub(crate) fn why(&self) -> String {
        self.why.lock().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_default()
    }

    pub(crate) fn closed(&self) -> tokio_util::sync::WaitForCancellationFuture<'_> {
        self.closed.cancelled()
    }

    /// Await the answer to request `id`.
    pub(crate) fn expect(&self, id: i64) -> oneshot::Receiver<Result<Value, Failure>> {
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).insert(id, tx);
        rx
    }

    /// Stop awaiting it: whether it was still awaited.
    pub(crate) fn give_up(&self, id: i64) -> bool {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&id).is_some()
    }

    /// Whether the answer to request `id` is still awaited.
    pub(crate) fn awaits(&self, id: i64) -> bool {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).contains_key(&id)
    }

    /// One message received from the upstream; for a request of its own, the answer to
    /// send back (the wire sends it, without holding up its reader).
    pub(crate) fn route(&self, message: Value) -> Option<Value> {
        let Value::Object(mut message) = message else {
            tracing::debug!("MCP upstream sent a message that is not an object: ignored");
            return None;
        };
        let method = message.get("method").and_then(Value::as_str).map(str::to_owned);
        match (method, message.remove("id")) {
            (Some(method), Some(id)) => {
                return Some(if method == "ping" {
                    json!({ "jsonrpc": "2.0", "id": id, "result": {} })
                } else {
                    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32601, "message": "Method not found" } })
                });
            }
            (Some(method), None) => self.notification(&method, message.get("params")),
            (None, Some(id)) => {
                let id = id.as_i64()?;
                let Some(tx) = self.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&id) else {
                    // Late (its caller gave up) or never asked for.
                    return None;
                };
                let answer = match (message.remove("result"), message.remove("error")) {
                    (Some(result), None) => Ok(result),
                    (None, Some(error)) => Err(Failure::Error {
                        code: error["code"].as_i64().unwrap_or(0),
                        message: error["message"].as_str().unwrap_or_default().to_owned(),
                    }),
                    _ => Err(Failure::Garbage("an answer with neither result nor error".into())),
                };
                let _ = tx.send(answer);
            }
            (None, None) => tracing::debug!("MCP upstream sent a message that is not JSON-RPC: ignored"),
        }
        None
    }

    fn notification(&self, method: &str, params: Option<&Value>) {
        match method {
            "notifications/progress" => {
                let Some(p) = params else { return };
                let token = match &p["progressToken"] {
                    Value::Number(n) => n.as_i64(),
                    Value::String(s) => s.parse().ok(),
                    _ => None,
                };
                let (Some(token), Some(progress)) = (token, p["progress"].as_f64()) else { return };
                // A token of no call in flight (late, or made up by the upstream) is dropped.
                let sink = self.listeners.lock().unwrap_or_else(|e| e.into_inner()).get(&token).cloned();
                if let Some(sink) = sink {
                    sink.forward(&ToolProgress {
                        progress,
                        total: p["total"].as_f64(),
                        message: p["message"].as_str(),
                    });
                }
            }
            "notifications/tools/list_changed" => self.relist.notify_one(),
            "notifications/resources/list_changed" | "notifications/prompts/list_changed" => {
                self.reoffer.notify_one()
            }
            _ => {}
        }
    }
}

/// The extra HTTP headers of one request of the stateless era: `Mcp-Name` and the
/// `Mcp-Param-*` of its `x-mcp-header` arguments.
#[derive(Default)]
pub(crate) struct Headers {
    pub name: Option<String>,
    pub params: Vec<(String, String)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn shared() -> (Arc<Shared>, Listeners, Arc<Notify>) {
        let listeners = Listeners::default();
        let relist = Arc::new(Notify::new());
        (Shared::new(listeners.clone(), relist.clone(), Arc::new(Notify::new())), listeners, relist)
    }

    #[tokio::test]
    async fn answers_reach_their_request_and_the_upstreams_requests_are_answered() {
        let (shared, listeners, relist) = shared();
        let mut one = shared.expect(1);
        let mut two = shared.expect(2);

        // Progress for a call whose client listens, in the order received.
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        listeners.lock().unwrap().insert(
            7,
            Progress::new(move |r| {
                if let oncerpc_core::Report::Tool(t) = r {
                    sink.lock().unwrap().push((t.progress, t.message.map(str::to_owned)));
                }
            }),
        );
        for (n, token) in [(1, json!(7)), (2, json!("7")), (3, json!(8))] {
            let p = json!({"jsonrpc":"2.0","method":"notifications/progress",
                "params":{"progressToken": token, "progress": n, "message": format!("step {n}")}});
            shared.route(p);
        }
        assert_eq!(
            *seen.lock().unwrap(),
            [(1.0, Some("step 1".into())), (2.0, Some("step 2".into()))],
            "token 8 is no call's"
        );

        shared.route(json!({"jsonrpc":"2.0","id":2,"error":{"code":-32602,"message":"bad"}}));
        shared.route(json!({"jsonrpc":"2.0","id":1,"result":{"ok":true}}));
        shared.route(json!({"jsonrpc":"2.0","id":9,"result":{}}));
        assert_eq!(one.try_recv().unwrap().unwrap(), json!({"ok": true}));
        assert!(matches!(two.try_recv().unwrap(), Err(Failure::Error { code: -32602, .. })));
        assert!(!shared.awaits(1) && !shared.awaits(2), "answered");
        assert!(!shared.awaits(9), "an answer nobody asked for is dropped");

        shared.route(json!({"jsonrpc":"2.0","method":"notifications/tools/list_changed"}));
        tokio::time::timeout(Duration::from_secs(5), relist.notified()).await.expect("relist");

        let pong = shared.route(json!({"jsonrpc":"2.0","id":"p","method":"ping"}));
        assert_eq!(pong, Some(json!({"jsonrpc":"2.0","id":"p","result":{}})));
        let refused =
            shared.route(json!({"jsonrpc":"2.0","id":5,"method":"sampling/createMessage","params":{}}));
        let expected = json!({"jsonrpc":"2.0","id":5,"error":{"code":-32601,"message":"Method not found"}});
        assert_eq!(refused, Some(expected), "oncerpc offers the upstream no capability");

        // Garbage is ignored; closing fails whoever still waits, with the first reason.
        for junk in [json!(3), json!([1]), json!({"x": 1}), json!({"id": 3})] {
            assert_eq!(shared.route(junk), None);
        }
        let mut three = shared.expect(3);
        shared.close("the command exited");
        shared.close("later");
        assert!(matches!(three.try_recv().unwrap(), Err(Failure::Closed(w)) if w == "the command exited"));
        assert_eq!(shared.why(), "the command exited");
    }
}
