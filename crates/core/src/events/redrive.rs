//! Re-driving a failed event (SPEC §14, `POST /v2/events/{id}/retry`).
//!
//! A re-drive is a force retry of the event's idempotency record, made from what the event
//! stored (method, params, return step, tags, fingerprint, record): it goes through
//! [`Dispatcher::accept`] exactly like `POST /v2/flows/{flow}` with `X-Force-Retry: true`, so
//! the record decides, atomically and across replicas, whether it runs again. The event keeps
//! its id (derived from the record) and its creation time: a re-driven event stays where it
//! was in the listing.

use std::sync::Arc;
use std::time::Instant;

use oncerpc_protocol::{ErrorCode, RpcError};

use super::{Submission, event_id};
use crate::dispatch::Dispatcher;
use crate::method::IdempotencyStatus;
use crate::store::{Event, EventStatus};

impl Dispatcher {
    /// Re-run a failed `event` under the same event id, in the background; `cid` is the
    /// re-drive's correlation id (a fresh one: the original request's is long gone), `by` the
    /// subject asking for it (logged; the event keeps who created it).
    ///
    /// - `Ok(New)`: the record was taken for a force retry; the event is `processing` again.
    /// - `Ok(Processing)`: the event (or its record) is running; nothing was started.
    /// - `Ok(Duplicate)`: the record holds a finished outcome that a force retry does not
    ///   re-run; nothing was started.
    /// - `Err(-32003 ForceRetryRefused)`: the event (or its record) succeeded.
    /// - `Err(-32601 MethodNotFound)`: the event's method is not served by this process.
    /// - `Err(-32007 Overloaded)`, `Err(-32004 StoreUnavailable)`: refused before any claim,
    ///   or the store did not answer.
    pub async fn redrive(
        self: &Arc<Self>,
        event: Event,
        cid: Arc<str>,
        by: Option<&str>,
    ) -> Result<IdempotencyStatus, RpcError> {
        match event.status {
            // A cancelled event's outcome is a failure: a force retry runs it anew.
            EventStatus::Failed | EventStatus::Cancelled => {}
            EventStatus::Processing => return Ok(IdempotencyStatus::Processing),
            EventStatus::Succeeded => return Err(RpcError::new(ErrorCode::ForceRetryRefused)),
        }
        let started = Instant::now();
        let method = self.method(&event.record.method).ok_or_else(RpcError::method_not_found)?;
        let id = event_id(&event.record);
        debug_assert_eq!(id, event.id, "an event's id is derived from its record");
        let sub = Submission {
            method,
            record: event.record,
            fingerprint: event.fingerprint,
            force_retry: true,
            params: event.params,
            return_step: event.return_step,
            tags: event.tags,
            cid,
            started,
            created_at_ms: Some(event.created_at_ms),
            created_by: event.created_by,
            progress: None,
            trace: None,
        };
        tracing::info!(
            event_id = %id,
            correlation_id = %sub.cid,
            redriven_by = by.map(|s| tracing::field::display(crate::LogSafe(s))),
            "re-driving a failed event"
        );
        // As in `submit`: the budget place first, then the claim in a task of its own, so a
        // client hanging up cannot leave a claim without its event.
        let permit = self.exec.permit(&sub.record.tenant)?;
        let this = self.clone();
        self.exec
            .spawn(async move { this.accept(id, sub, permit).await })
            .await
            .map_err(|e| RpcError::internal(format_args!("re-drive task failed: {e}")))?
    }
}
