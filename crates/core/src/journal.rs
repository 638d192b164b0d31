//! The step journal of one owned execution (DESIGN §14), as a handler made of steps sees it.
//!
//! The dispatcher hands a keyed execution's handler a [`StepJournal`] in
//! [`Context::journal`](crate::Context): the outputs its record already holds (a take-over of
//! an execution whose owner died finds the steps that owner finished) and a way to store the
//! next one, fenced by the owner's token, before the following step starts. A handler that
//! skips the stored steps and records each new one never calls a finished step again.
use std::sync::Arc;
use std::time::Duration;

use crate::store::{Journal, RecordKey, Store, StoreError};

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

struct Inner {
    store: Arc<dyn Store>,
    key: RecordKey,
    token: u64,
    lease: Duration,
    stored: Journal,
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
        StepJournal { inner: Arc::new(Inner { store, key, token, lease, stored }) }
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
