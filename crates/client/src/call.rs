//! One call (`query` or `command`): its builder, and how its attempts are made.

use std::future::{Future, IntoFuture};
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use oncerpc_protocol::{ErrorCode, RawValue};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::Instrument;

use crate::client::{Client, Transport, to_params};
use crate::error::Error;
use crate::key::{KeyChoice, new_key};
use crate::outcome::Outcome;
use crate::retry::{Cause, RetryPolicy, Safety};
use crate::transport::{Failed, Reply};
use crate::wire;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Query,
    Command,
}

/// A call being built; `.await` it (or [`Call::send`]) to send it.
///
/// ```no_run
/// # async fn demo(client: oncerpc_client::Client) -> Result<(), oncerpc_client::Error> {
/// use std::time::Duration;
/// use serde_json::{Value, json};
///
/// let charged = client
///     .command::<Value>("payments.charge", json!({"cents": 500}))
///     .key("order-1001")                 // the same key on every attempt (default: a new UUIDv7)
///     .deadline(Duration::from_secs(60)) // every attempt and wait included
///     .await?;
/// println!("{} with key {:?}", charged.result, charged.key);
/// # Ok(()) }
/// ```
#[must_use = "a call does nothing until it is awaited"]
pub struct Call<T> {
    client: Client,
    method: String,
    params: Result<Option<Value>, String>,
    kind: Kind,
    key: KeyChoice,
    force: bool,
    policy: RetryPolicy,
    _result: PhantomData<fn() -> T>,
}

impl Client {
    /// A query (no side effects): retried on transient failures, without a key.
    pub fn query<T>(&self, method: &str, params: impl serde::Serialize) -> Call<T> {
        Call::new(self.clone(), method, to_params(params), Kind::Query)
    }

    /// A command: sent with an idempotency key (a new UUIDv7 unless [`Call::key`] gives one)
    /// and retried with that same key.
    pub fn command<T>(&self, method: &str, params: impl serde::Serialize) -> Call<T> {
        Call::new(self.clone(), method, to_params(params), Kind::Command)
    }
}

impl<T> Call<T> {
    pub(crate) fn new(
        client: Client,
        method: &str,
        params: Result<Option<Value>, String>,
        kind: Kind,
    ) -> Self {
        let key = if kind == Kind::Command { KeyChoice::Auto } else { KeyChoice::None };
        let policy = client.policy;
        Call {
            client,
            method: method.to_owned(),
            params,
            kind,
            key,
            force: false,
            policy,
            _result: PhantomData,
        }
    }

    /// Send the command with this idempotency key (checked before anything is sent).
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = KeyChoice::Given(key.into());
        self
    }

    /// Send the command without a key: it is sent **once** and never retried, since a
    /// second send could run it a second time.
    pub fn without_key(mut self) -> Self {
        self.key = KeyChoice::None;
        self
    }

    /// Run a failed execution of this key again (`X-Force-Retry: true`, SPEC §3).
    pub fn force_retry(mut self) -> Self {
        self.force = true;
        self
    }

    /// This call's total deadline (default: the client's).
    pub fn deadline(mut self, d: Duration) -> Self {
        self.policy.deadline = d;
        self
    }

    /// This call's retry policy (default: the client's).
    pub fn policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }
}

impl<T: DeserializeOwned> Call<T> {
    /// Send the call, retrying as its policy allows; the same as `.await`.
    pub async fn send(self) -> Result<Outcome<T>, Error> {
        let params = self.params.map_err(Error::InvalidCall)?;
        let key = match (self.kind, &self.key) {
            (Kind::Query, KeyChoice::Auto) => None,
            _ => self.key.resolve()?,
        };
        if self.force && key.is_none() {
            return Err(Error::InvalidCall("force retry needs an idempotency key".into()));
        }
        let safety = match (self.kind, &key) {
            (Kind::Query, _) => Safety::Query,
            (Kind::Command, Some(_)) => Safety::KeyedCommand,
            (Kind::Command, None) => Safety::KeylessCommand,
        };
        // One id for every attempt: the server uses it as the correlation id in its logs.
        let id = new_key();
        let span = tracing::info_span!(
            "oncerpc.call",
            method = %self.method,
            kind = ?self.kind,
            key = key.as_deref().unwrap_or(""),
            correlation_id = %id,
        );
        let attempt = Attempt {
            transport: &self.client.transport,
            method: &self.method,
            params,
            key: key.as_deref(),
            force: AtomicBool::new(self.force),
            id: &id,
        };
        let attempt = &attempt;
        let run = crate::engine::run(&self.policy, safety, |n, timeout| attempt.once(n, timeout));
        let ((raw, reply), attempts) = run.instrument(span).await?;
        let result = serde_json::from_str::<T>(raw.get())
            .map_err(|source| Error::Decode { key: key.clone(), source })?;
        Ok(Outcome {
            result,
            status: reply.idempotency_status,
            key,
            correlation_id: reply.correlation_id,
            attempts,
        })
    }
}

impl<T: DeserializeOwned + Send + 'static> IntoFuture for Call<T> {
    type Output = Result<Outcome<T>, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}

/// What every attempt of one call sends.
struct Attempt<'a> {
    transport: &'a Transport,
    method: &'a str,
    params: Option<Value>,
    key: Option<&'a str>,
    /// Cleared when a retry finds that an earlier attempt's force retry already succeeded.
    force: AtomicBool,
    id: &'a str,
}

impl Attempt<'_> {
    async fn once(&self, n: u32, timeout: Duration) -> Result<(Box<RawValue>, Reply), Failed> {
        let force = self.force.load(Ordering::Relaxed);
        let reply = match self.transport {
            Transport::Http(http) => {
                let body = wire::request(self.method, self.params.as_ref(), self.id).to_string().into_bytes();
                let mut headers = Vec::new();
                if let Some(k) = self.key {
                    headers.push(("x-idempotency-key", k.to_owned()));
                }
                if force {
                    headers.push(("x-force-retry", "true".to_owned()));
                }
                http.post("/rpc", body, &headers, timeout).await?
            }
            Transport::Stdio(stdio) => {
                let params = match self.key {
                    Some(k) => {
                        Some(wire::with_reserved(self.params.clone(), k, force).map_err(Failed::fatal)?)
                    }
                    None => self.params.clone(),
                };
                let frame = wire::request(self.method, params.as_ref(), self.id).to_string().into_bytes();
                let id = Value::String(self.id.to_owned()).to_string();
                stdio.exchange(frame, &id, timeout).await?
            }
        };
        match wire::single(&reply, self.key) {
            Ok(raw) => Ok((raw, reply)),
            Err(f) if force && n > 1 && f.error.code() == Some(ErrorCode::ForceRetryRefused) => {
                // An earlier attempt's force retry ran and succeeded (its answer was lost):
                // ask again without forcing, and the stored success comes back.
                self.force.store(false, Ordering::Relaxed);
                Err(Failed {
                    cause: Some(Cause::Code(ErrorCode::RequestInProgress)),
                    hint: Some(Duration::ZERO),
                    ..f
                })
            }
            Err(f) => Err(f),
        }
    }
}
