//! What the entries of one batch share: the execution of a key, the metrics of its successes,
//! and its own copies of the names its entries' contexts carry.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oncerpc_protocol::Outcome;

use crate::method::{IdempotencyStatus, Method};
use crate::metrics::MethodMetrics;

/// Per (method, key) of a batch: the one execution its entries share.
type SharedByKey = HashMap<(Arc<str>, Arc<str>), Arc<tokio::sync::OnceCell<Shared>>>;

/// What the entries of one batch share.
#[derive(Default)]
pub(super) struct BatchLocal {
    /// Commands of one batch that share a key execute once (SPEC §1, "Batches"): the first
    /// entry runs, the others wait for its outcome.
    pub(super) keyed: Mutex<SharedByKey>,
    /// The `ok` count and latencies of the batch's successful entries, per method, added to
    /// the shared metrics once when the batch ends (or is dropped). Observing the shared
    /// histogram per entry was ~5 % of the server's CPU on batches of 50: its atomics bounce
    /// between the worker threads.
    ok: Mutex<Vec<LocalOk>>,
    /// The batch's own copy of each called method's name, for the entries' contexts: a clone
    /// of the registry's `Arc` per entry is an atomic both workers fight over.
    names: Mutex<Vec<Arc<str>>>,
}

/// One method's successes within a batch; flushed into the shared metrics on drop.
struct LocalOk {
    method: Arc<Method>,
    count: u64,
    ok: prometheus::IntCounter,
    latency: prometheus::local::LocalHistogram,
}

impl Drop for LocalOk {
    fn drop(&mut self) {
        self.ok.inc_by(self.count);
        // `LocalHistogram` flushes itself on drop.
    }
}

impl BatchLocal {
    pub(super) fn name_of(&self, method: &Method) -> Arc<str> {
        let mut names = self.names.lock().expect("batch-local lock");
        if let Some(name) = names.iter().find(|n| ***n == *method.name) {
            return name.clone();
        }
        let name: Arc<str> = Arc::from(&*method.name);
        names.push(name.clone());
        name
    }

    /// Record a successful entry of `method`, whose metric handles are `h`.
    pub(super) fn ok(&self, method: &Arc<Method>, h: &MethodMetrics, elapsed: Duration) {
        let mut ok = self.ok.lock().expect("batch-local lock");
        let i = match ok.iter().position(|o| Arc::ptr_eq(&o.method, method)) {
            Some(i) => i,
            None => {
                let local = LocalOk {
                    method: method.clone(),
                    count: 0,
                    ok: h.ok.clone(),
                    latency: h.latency.local(),
                };
                ok.push(local);
                ok.len() - 1
            }
        };
        ok[i].count += 1;
        ok[i].latency.observe(elapsed.as_secs_f64());
    }
}

#[derive(Clone)]
pub(super) struct Shared {
    pub(super) fingerprint: Arc<str>,
    pub(super) outcome: Outcome,
    pub(super) status: Option<IdempotencyStatus>,
}
