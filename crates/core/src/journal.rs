//! The step journal of one owned execution (SPEC §14), as a handler made of steps sees it.
//!
//! The dispatcher hands a keyed execution's handler a [`StepJournal`] in
//! [`Context::journal`](crate::Context): the outputs its record already holds (a take-over of
//! an execution whose owner died finds the steps that owner finished) and a way to store the
//! next one, fenced by the owner's token, before the following step starts. A handler that
//! skips the stored steps and records each new one never calls a finished step again.
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::store::{Journal, RecordKey, Store, StoreError};

/// How one step of an async execution went, as `GET /v2/events/{id}` shows it (the event's
/// `steps`, a JSON array of these, one per step reached).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepView {
    pub name: String,
    pub status: StepStatus,
    /// Attempts made (0 while the first is in flight).
    pub attempts: u32,
    pub started_at_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepStatus {
    Running,
    Succeeded,
    Failed,
}

/// Why a step's output could not be stored.
#[derive(Debug, Clone, thiserror::Error)]
pub enum JournalError {
    /// Another execution owns the record now (this one was taken over): stop, its outcome
    /// will not be the key's.
    #[error("the execution was taken over: its steps are no longer recorded")]
    Fenced,
    /// The store did not answer; the step will run again if the execution is taken over.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// One execution's journal: what was stored before it started, and the writes it makes.
#[derive(Clone)]
pub struct StepJournal {
    inner: Arc<Inner>,
}

#[derive(Clone)]
struct Inner {
    store: Arc<dyn Store>,
    key: RecordKey,
    token: u64,
    lease: Duration,
    stored: Journal,
    /// For an async execution: its event's id and step views.
    event: Option<(String, Arc<Mutex<Vec<StepView>>>)>,
}

impl std::fmt::Debug for StepJournal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepJournal")
            .field("key", &self.inner.key)
            .field("token", &self.inner.token)
            .field("stored", &self.inner.stored.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl StepJournal {
    /// The journal of the execution that owns `key` under `token`; `stored` is what the
    /// record held when it was acquired.
    pub fn new(store: Arc<dyn Store>, key: RecordKey, token: u64, lease: Duration, stored: Journal) -> Self {
        StepJournal { inner: Arc::new(Inner { store, key, token, lease, stored, event: None }) }
    }

    /// The journal of an async execution: its steps are also shown in event `id`, whose
    /// views so far (an earlier owner's) are `steps`.
    pub fn with_event(self, id: &str, steps: Option<&str>) -> StepJournal {
        let mut inner = Arc::try_unwrap(self.inner).unwrap_or_else(|shared| (*shared).clone());
        let views: Vec<StepView> = steps.and_then(|s| serde_json::from_str(s).ok()).unwrap_or_default();
        inner.event = Some((id.to_owned(), Arc::new(Mutex::new(views))));
        StepJournal { inner: Arc::new(inner) }
    }

    /// Show step `n`'s progress in the event (for an async execution; nothing otherwise). The
    /// views of later steps are dropped. Best effort: a failed or fenced write is logged.
    pub async fn report(&self, n: usize, view: StepView) {
        let Some((id, views)) = &self.inner.event else { return };
        let json = {
            let Ok(mut views) = views.lock() else { return };
            views.truncate(n);
            views.push(view);
            serde_json::to_string(&*views).unwrap_or_else(|_| "[]".into())
        };
        match self.inner.store.put_event_steps(id, self.inner.token, &json).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::debug!(event_id = %id, "step views not written: the event has another owner")
            }
            Err(e) => tracing::warn!(event_id = %id, error = %e, "could not write the event's step views"),
        }
    }

    /// The output of step `step` stored by an earlier owner, if it finished.
    pub fn stored(&self, step: u32) -> Option<&str> {
        self.inner.stored.get(&step).map(String::as_str)
    }

    /// The owner's fencing token.
    pub fn token(&self) -> u64 {
        self.inner.token
    }

    /// How many steps an earlier owner finished.
    pub fn resumed_steps(&self) -> usize {
        self.inner.stored.len()
    }

    /// Store step `step`'s output (and renew the lease) before the next step starts.
    pub async fn record(&self, step: u32, output: &str) -> Result<(), JournalError> {
        let i = &self.inner;
        match i.store.put_step(&i.key, i.token, step, output, i.lease).await? {
            true => Ok(()),
            false => Err(JournalError::Fenced),
        }
    }
}
