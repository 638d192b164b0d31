//! `notifications/cancelled`: a query's call that the client gave up on stops; a command's
//! runs on and stores its outcome, so the retry gets it (a client that leaves does not undo a
//! side effect). Running queries are known by this process only: a cancellation that reaches
//! another replica finds nothing to stop, and the query finishes there unheard.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// Which call: the tenant, the session (empty without one) and the request id's text, in one
/// string (`\0` between them: none of the three has one that could make two calls alike, and
/// one allocation per query is all a call that nobody cancels should cost).
type CallRef = Arc<str>;

fn call_ref(tenant: &str, session: &str, id: &str) -> CallRef {
    let mut key = String::with_capacity(tenant.len() + session.len() + id.len() + 2);
    for (i, part) in [tenant, session, id].into_iter().enumerate() {
        if i > 0 {
            key.push('\0');
        }
        key.push_str(part);
    }
    Arc::from(key)
}

/// The queries running now that a cancellation may stop.
#[derive(Default)]
pub struct Inflight {
    calls: Mutex<HashMap<CallRef, oneshot::Sender<()>, foldhash::fast::RandomState>>,
}

/// A registered call: dropped when it ends, and then forgotten.
pub struct Registered<'a> {
    inflight: &'a Inflight,
    call: CallRef,
    pub cancelled: oneshot::Receiver<()>,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        if let Ok(mut calls) = self.inflight.calls.lock() {
            calls.remove(&self.call);
        }
    }
}

impl Inflight {
    /// Register a query's call; `None` when one with the same id runs already (it keeps its
    /// place: a client's ids are its own, a second with the same id cannot be told apart).
    pub fn register(&self, tenant: &str, session: &str, id: &str) -> Option<Registered<'_>> {
        let call = call_ref(tenant, session, id);
        let (tx, cancelled) = oneshot::channel();
        let mut calls = self.calls.lock().ok()?;
        match calls.entry(call.clone()) {
            std::collections::hash_map::Entry::Occupied(_) => return None,
            std::collections::hash_map::Entry::Vacant(v) => v.insert(tx),
        };
        Some(Registered { inflight: self, call, cancelled })
    }

    /// Stop the call, if it runs here; whether it did.
    pub fn cancel(&self, tenant: &str, session: &str, id: &str) -> bool {
        let call = call_ref(tenant, session, id);
        let sender = self.calls.lock().ok().and_then(|mut c| c.remove(&call));
        sender.is_some_and(|tx| tx.send(()).is_ok())
    }
}
