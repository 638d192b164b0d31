//! Sessions of the session era, kept in the idempotency store so that every replica agrees
//! on them without sticky routing: a session is a record `(tenant, "rpc.mcp-session", nonce)`
//! held open like an execution's claim, its lease the idle time. Each request that uses the
//! session renews the lease once half of it has gone (so at most one store write per half
//! idle period, and one read per message); an idle session's lease lapses and it is gone
//! everywhere; `DELETE` releases the record, so every replica refuses it from then on.
//!
//! The id itself is a signed token ([`SessionTokens`]): a forged or foreign one is refused
//! before the store is asked, and it still expires after [`SESSION_LIFETIME`] however busy.
//! The number of sessions is bounded by how fast a tenant may open them (its rate limit,
//! every `initialize` is a request) times the idle time.

use std::sync::Arc;
use std::time::Duration;

use oncerpc_core::Store;
use oncerpc_core::store::{Claim, ClaimRequest, RecordKey, RecordState};

use crate::session::{SESSION_LIFETIME, SessionError, SessionId, SessionTokens};

/// The method name of session records: `rpc.` is reserved, so no method's keys meet them.
pub const SESSION_METHOD: &str = "rpc.mcp-session";
/// How long a session may go unused, unless configured.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(3600);

/// The session era's sessions: signed ids, their life in the store.
pub struct Sessions {
    tokens: SessionTokens,
    store: Arc<dyn Store>,
    idle: Duration,
}

impl Sessions {
    pub fn new(tokens: SessionTokens, store: Arc<dyn Store>, idle: Duration) -> Sessions {
        Sessions { tokens, store, idle: idle.max(Duration::from_secs(1)) }
    }

    pub fn tokens(&self) -> &SessionTokens {
        &self.tokens
    }

    /// `oncerpc_mcp_sessions_active` for `/metrics`.
    pub fn active_gauge(&self) -> crate::session::ActiveSessions {
        self.tokens.active_gauge(self.idle)
    }

    fn key(id: &SessionId) -> RecordKey {
        RecordKey::new(id.tenant.as_str(), SESSION_METHOD, id.nonce.as_str())
    }

    /// Open a session of `tenant` at `version`: its id.
    pub async fn open(&self, tenant: &str, version: &str, now_ms: u64) -> Result<String, SessionError> {
        let token = self.tokens.issue(tenant, version, now_ms);
        let id = self.tokens.verify(&token, now_ms)?;
        let key = Self::key(&id);
        let claim = ClaimRequest {
            key: &key,
            fingerprint: "mcp-session",
            force_retry: false,
            lease: self.idle,
            ttl: SESSION_LIFETIME,
        };
        match self.store.claim(claim).await {
            Ok(Claim::Acquired { .. }) => {
                self.tokens.seen(&token, now_ms);
                Ok(token)
            }
            Ok(other) => {
                // A fresh random nonce that exists already: never expected.
                tracing::error!(claim = ?other, "a new MCP session's record exists already");
                Err(SessionError::Unavailable)
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot open an MCP session: the store did not answer");
                Err(SessionError::Unavailable)
            }
        }
    }

    /// Check a session id presented at `now_ms`, and keep the session alive.
    pub async fn check(&self, token: &str, now_ms: u64) -> Result<SessionId, SessionError> {
        let id = self.tokens.verify(token, now_ms)?;
        let key = Self::key(&id);
        let record = self.store.get(&key).await.map_err(|e| {
            tracing::warn!(error = %e, "cannot check an MCP session: the store did not answer");
            SessionError::Unavailable
        })?;
        let Some(record) = record else { return Err(SessionError::Ended) };
        let RecordState::Processing { lease_until_ms } = record.state else {
            return Err(SessionError::Ended);
        };
        if lease_until_ms <= now_ms {
            return Err(SessionError::Expired);
        }
        self.tokens.seen(token, now_ms);
        if lease_until_ms - now_ms < self.idle.as_millis() as u64 / 2 {
            // Not fatal: the next request renews it.
            if let Err(e) = self.store.renew(&key, record.token, self.idle).await {
                tracing::warn!(error = %e, "cannot renew an MCP session");
            }
        }
        Ok(id)
    }

    /// Whether the session is still open at `now_ms` — its owner's id — without keeping it
    /// alive (an open event stream is not a use of the session: it ends when the session
    /// does).
    pub async fn alive(&self, token: &str, now_ms: u64) -> Result<SessionId, SessionError> {
        let id = self.tokens.verify(token, now_ms)?;
        let record = self.store.get(&Self::key(&id)).await.map_err(|_| SessionError::Unavailable)?;
        match record.map(|r| r.state) {
            Some(RecordState::Processing { lease_until_ms }) if lease_until_ms > now_ms => Ok(id),
            Some(RecordState::Processing { .. }) => Err(SessionError::Expired),
            _ => Err(SessionError::Ended),
        }
    }

    /// End a session (`DELETE`): every replica refuses it from now on.
    pub async fn end(&self, token: &str, now_ms: u64) -> Result<SessionId, SessionError> {
        let id = self.check(token, now_ms).await?;
        let key = Self::key(&id);
        let record = self.store.get(&key).await.map_err(|_| SessionError::Unavailable)?;
        if let Some(r) = record {
            self.store.release(&key, r.token).await.map_err(|_| SessionError::Unavailable)?;
        }
        self.tokens.end(token);
        Ok(id)
    }
}
