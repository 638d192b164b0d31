//! Cancelling a running event (MCP `tasks/cancel`, SPEC §16).
//!
//! A cancellation is an outcome: the event's record is completed with `-32009 Cancelled`
//! under the fencing token of whoever owns it, from any process that shares the store. That
//! uses only what every store already does atomically ([`Store::complete`], fenced by the
//! token), so it works the same on every backend and from any replica:
//!
//! - the owner's next journal write ([`Store::put_step`]) is fenced out, so a flow stops
//!   before its next step; a step already sent to its upstream is not called back (its
//!   answer is dropped, and its own step key still deduplicates it upstream);
//! - the owner's completion is fenced out too, so its outcome never replaces the
//!   cancellation, and the event (finished here with the same outcome) stays cancelled;
//! - a retry with the same key gets the cancellation, as any stored outcome;
//!   `force_retry` (a failed outcome) runs it anew.
//!
//! A finished event is left as it is: cancelling it is a no-op.

use oncerpc_protocol::{ErrorCode, RpcError};

use crate::dispatch::Dispatcher;
use crate::store::{Event, EventStatus, RecordState, StoreError, StoredOutcome};

/// Attempts to cancel while the record and the event move under us (a take-over restarting
/// the event between our reads).
const CANCEL_ATTEMPTS: u32 = 4;

/// What [`Dispatcher::cancel_event`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cancelled {
    /// No such event for this tenant (another tenant's is as unknown as a missing one).
    NotFound,
    /// The event was running; it is cancelled now (the event as it was before).
    Now(Box<Event>),
    /// The event had finished already (or finished meanwhile): nothing changed.
    AlreadyDone(Box<Event>),
}

/// The outcome a cancelled execution keeps.
pub fn cancelled_outcome() -> StoredOutcome {
    StoredOutcome::Failed(RpcError::new(ErrorCode::Cancelled).to_json().get().to_owned())
}

impl Dispatcher {
    /// Cancel `tenant`'s event `id` if it is still running (see the module's notes).
    pub async fn cancel_event(&self, tenant: &str, id: &str) -> Result<Cancelled, StoreError> {
        let store = self.store();
        let outcome = cancelled_outcome();
        for _ in 0..CANCEL_ATTEMPTS {
            let event = match store.get_event(id).await? {
                Some(e) if &*e.record.tenant == tenant => e,
                _ => return Ok(Cancelled::NotFound),
            };
            if event.status != EventStatus::Processing {
                return Ok(Cancelled::AlreadyDone(Box::new(event)));
            }
            match store.get(&event.record).await? {
                Some(rec) => match rec.state {
                    RecordState::Processing { .. } => {
                        let ttl = self.config().idempotency.ttl;
                        if !store.complete(&event.record, rec.token, &outcome, ttl).await? {
                            continue; // another owner took it meanwhile: read again
                        }
                        if !store.finish_event(id, event.token, &outcome).await? {
                            // Restarted under a newer token between the reads: finish it under
                            // that one (the record is cancelled already).
                            if let Some(now) = store.get_event(id).await? {
                                store.finish_event(id, now.token, &outcome).await?;
                            }
                        }
                        tracing::info!(event_id = %id, "event cancelled");
                        return Ok(Cancelled::Now(Box::new(event)));
                    }
                    // The execution finished; only its event lagged: settle it with the outcome.
                    RecordState::Done(done) => {
                        store.finish_event(id, event.token, &done).await?;
                        return Ok(Cancelled::AlreadyDone(Box::new(event)));
                    }
                },
                // No record (it expired, or was released): nothing runs it any more.
                None => {
                    store.finish_event(id, event.token, &outcome).await?;
                    return Ok(Cancelled::Now(Box::new(event)));
                }
            }
        }
        Err(StoreError::new("the event kept changing owner while being cancelled"))
    }
}
