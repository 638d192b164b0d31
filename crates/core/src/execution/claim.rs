//! Claiming a record (SPEC §3): the claim itself, making it ours (a take-over confirmed, a
//! claim that came back too late or unconfirmed given back), and giving a claim back.

use std::time::{Duration, Instant};

use oncerpc_protocol::{ErrorCode, RpcError};

use super::{Acquired, CLAIM_ROUNDS, Executions, retry_hint};
use crate::store::{AcquireKind, Claim, ClaimRequest, RecordKey, RecordState, StoredOutcome};

impl Executions {
    /// Claim a record; a store error is logged, counted and becomes `-32004`.
    pub async fn claim(
        &self,
        key: &RecordKey,
        fingerprint: &str,
        force_retry: bool,
        lease: Duration,
    ) -> Result<Claim, RpcError> {
        let req = ClaimRequest { key, fingerprint, force_retry, lease, ttl: self.ttl };
        let claim = self.store.claim(req).await.map_err(|e| self.unavailable(&e, "command not run"))?;
        match &claim {
            Claim::Done(outcome, ttl_left_ms) => {
                if let Some(cache) = &self.cache {
                    cache.insert(key, fingerprint, outcome, Duration::from_millis(*ttl_left_ms));
                }
            }
            Claim::InProgress { retry_after_ms: lease_left_ms } => {
                let running =
                    self.owned.lock().ok().and_then(|o| o.get(key).map(|(_, since)| since.elapsed()));
                return Ok(Claim::InProgress { retry_after_ms: retry_hint(*lease_left_ms, lease, running) });
            }
            _ => {}
        }
        Ok(claim)
    }

    /// Claim a record and make it ours: confirm a take-over, give back a claim that came back
    /// after `deadline`.
    pub async fn acquire(
        &self,
        key: &RecordKey,
        fingerprint: &str,
        force_retry: bool,
        lease: Duration,
        deadline: Instant,
    ) -> Result<Acquired, RpcError> {
        // A force retry replaces a stored failure: read it first, so that a claim this process
        // gives back can put it back.
        let previous = if force_retry { self.failure(key).await } else { None };
        for _ in 0..CLAIM_ROUNDS {
            let (token, kind) = match self.claim(key, fingerprint, force_retry, lease).await? {
                Claim::Acquired { token, kind } => (token, kind),
                Claim::Unconfirmed { token, kind, error } => {
                    // Written but not confirmed by the replicas: not run, and given back at
                    // once, so a retry runs it without waiting for the lease to end.
                    let previous = if kind == AcquireKind::ForceRetry { previous.as_ref() } else { None };
                    self.withdraw(key, token, kind, previous).await;
                    let e = crate::StoreError::new(error);
                    return Err(self.unavailable(&e, "claim not confirmed: given back, command not run"));
                }
                other => return Ok(Acquired::Not(other)),
            };
            let previous = if kind == AcquireKind::ForceRetry { previous.clone() } else { None };
            if Instant::now() >= deadline {
                // Nobody waits for this execution any more: give the claim back rather than
                // record a failure of a command that did not run.
                self.withdraw(key, token, kind, previous.as_ref()).await;
                tracing::warn!(token, "the claim came back after its deadline: given back, command not run");
                return Err(RpcError::new(ErrorCode::StoreUnavailable));
            }
            if kind != AcquireKind::TakeOver {
                return Ok(Acquired::Owner { token, kind, previous });
            }
            match self.store.renew(key, token, lease).await {
                Ok(true) => {
                    tracing::warn!(token, "lease expired: took over an abandoned execution");
                    return Ok(Acquired::Owner { token, kind, previous: None });
                }
                // The owner was alive: its heartbeat or its outcome landed first.
                Ok(false) => continue,
                Err(e) => return Err(self.unavailable(&e, "take-over not confirmed, command not run")),
            }
        }
        Ok(Acquired::Not(Claim::InProgress { retry_after_ms: 100 }))
    }

    /// Give back a claim this process will not run: an unconfirmed take-over is withdrawn
    /// (the previous owner keeps its rights), any other is given back ([`Self::give_back`]).
    async fn withdraw(
        &self,
        key: &RecordKey,
        token: u64,
        kind: AcquireKind,
        previous: Option<&StoredOutcome>,
    ) {
        if kind == AcquireKind::TakeOver {
            if let Err(e) = self.store.release(key, token).await {
                self.metrics.store_error(self.store.name());
                tracing::warn!(error = %e, token, "could not withdraw a take-over (it lapses)");
            }
        } else {
            self.give_back(key, token, kind, previous).await;
        }
    }

    /// The failure `key` holds now, if it holds one.
    async fn failure(&self, key: &RecordKey) -> Option<StoredOutcome> {
        match self.store.get(key).await {
            Ok(Some(rec)) => match rec.state {
                RecordState::Done(failed @ StoredOutcome::Failed(_)) => Some(failed),
                _ => None,
            },
            _ => None,
        }
    }

    /// Give back an owned claim (fresh, force retry, or a confirmed take-over) that this
    /// process will not run, leaving the key as it found it as far as it can: a fresh record
    /// is deleted (as if the request never came); a take-over is kept with its step journal
    /// (its lease lapses and the next claimant resumes it: deleting it would lose the finished
    /// steps); a force retry puts back the failure it replaced (`previous`), which a retry
    /// then finds again. Best effort: a store that does not answer leaves the claim to lapse
    /// with its lease.
    pub async fn give_back(
        &self,
        key: &RecordKey,
        token: u64,
        kind: AcquireKind,
        previous: Option<&StoredOutcome>,
    ) {
        let given = match (kind, previous) {
            (AcquireKind::TakeOver, _) => {
                tracing::warn!(token, "take-over kept for a later claimant: its finished steps stay");
                return;
            }
            (AcquireKind::ForceRetry, Some(failure)) => {
                self.store.complete(key, token, failure, self.ttl).await
            }
            _ => self.store.release(key, token).await,
        };
        match given {
            Ok(true) => {}
            Ok(false) => tracing::warn!(token, "claim not given back: the record has moved on"),
            Err(e) => {
                self.metrics.store_error(self.store.name());
                tracing::warn!(error = %e, token, "could not give back a claim (it lapses with its lease)");
            }
        }
    }
}
