//! Batches: entries in order, answers in order; each entry retried on its own terms.

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use tokio::time::Instant;
use tracing::Instrument;

use crate::call::Kind;
use crate::client::{Client, Transport};
use crate::error::{Error, RpcFailure};
use crate::key::{KeyChoice, new_key};
use crate::outcome::Outcome;
use crate::retry::{RetryPolicy, Safety, retryable};
use crate::transport::{Failed, Reply};
use crate::wire;

/// A batch being built. Each command entry carries its own key (in its params, as SPEC §3
/// asks of batches, so its params must be an object); after a transient failure only the
/// entries that may be sent again are, with the same keys.
///
/// ```no_run
/// # async fn demo(client: oncerpc_client::Client) -> Result<(), oncerpc_client::Error> {
/// use serde_json::json;
/// let answers = client
///     .batch()
///     .query("sum", [1, 2, 4])
///     .command("counter.increment", json!({"by": 1}))
///     .send()
///     .await;
/// for answer in answers {
///     match answer {
///         Ok(outcome) => println!("{} (key {:?})", outcome.result, outcome.key),
///         Err(e) => println!("error {:?}: {e}", e.code()),
///     }
/// }
/// # Ok(()) }
/// ```
#[must_use = "a batch does nothing until it is sent"]
pub struct Batch {
    client: Client,
    entries: Vec<BatchEntry>,
    policy: RetryPolicy,
}

struct BatchEntry {
    method: String,
    params: Result<Option<Value>, String>,
    kind: Kind,
    key: KeyChoice,
}

/// One entry ready to send.
struct Ready {
    index: usize,
    id: String,
    request: Value,
    key: Option<String>,
    safety: Safety,
}

impl Client {
    /// A batch: entries added in order, answered in order.
    pub fn batch(&self) -> Batch {
        Batch::new(self.clone())
    }
}

impl Batch {
    pub(crate) fn new(client: Client) -> Batch {
        let policy = client.policy;
        Batch { client, entries: Vec::new(), policy }
    }

    fn push(mut self, method: &str, params: impl Serialize, kind: Kind, key: KeyChoice) -> Self {
        let params = match serde_json::to_value(params) {
            Ok(Value::Null) => Ok(None),
            Ok(v) => Ok(Some(v)),
            Err(e) => Err(format!("the params do not serialise: {e}")),
        };
        self.entries.push(BatchEntry { method: method.to_owned(), params, kind, key });
        self
    }

    /// A query entry.
    pub fn query(self, method: &str, params: impl Serialize) -> Self {
        self.push(method, params, Kind::Query, KeyChoice::None)
    }

    /// A command entry with a new UUIDv7 key.
    pub fn command(self, method: &str, params: impl Serialize) -> Self {
        self.push(method, params, Kind::Command, KeyChoice::Auto)
    }

    /// A command entry with the caller's key.
    pub fn command_with_key(self, method: &str, params: impl Serialize, key: impl Into<String>) -> Self {
        self.push(method, params, Kind::Command, KeyChoice::Given(key.into()))
    }

    /// A command entry without a key: sent once, never again.
    pub fn command_without_key(self, method: &str, params: impl Serialize) -> Self {
        self.push(method, params, Kind::Command, KeyChoice::None)
    }

    /// The batch's total deadline (default: the client's).
    pub fn deadline(mut self, d: Duration) -> Self {
        self.policy.deadline = d;
        self
    }

    /// The entries' answers, in the order they were added. An entry that could not be sent
    /// (a bad key, params that are not an object) has its error and the others still go.
    pub async fn send(self) -> Vec<Result<Outcome<Value>, Error>> {
        let batch_id = new_key();
        let span =
            tracing::info_span!("oncerpc.batch", size = self.entries.len(), correlation_id = %batch_id);
        self.run(batch_id).instrument(span).await
    }

    async fn run(self, batch_id: String) -> Vec<Result<Outcome<Value>, Error>> {
        let mut results: Vec<Option<Result<Outcome<Value>, Error>>> = Vec::new();
        let mut pending: Vec<Ready> = Vec::new();
        for (index, entry) in self.entries.into_iter().enumerate() {
            results.push(None);
            match prepare(index, entry, &batch_id) {
                Ok(r) => pending.push(r),
                Err(e) => results[index] = Some(Err(e)),
            }
        }
        let start = Instant::now();
        let mut rng = fastrand::Rng::new();
        let mut attempts: HashMap<usize, u32> = HashMap::new();
        let mut round = 0u32;
        while !pending.is_empty() {
            round += 1;
            for r in &pending {
                *attempts.entry(r.index).or_default() += 1;
            }
            let remaining = self.policy.deadline.saturating_sub(start.elapsed());
            let timeout = self.policy.attempt_timeout.min(remaining).max(Duration::from_millis(1));
            let answers = send_round(&self.client, &pending, timeout).await;
            let mut again: Vec<(Ready, Failed)> = Vec::new();
            let mut hint: Option<Duration> = None;
            for (ready, answer) in pending.drain(..).zip(answers) {
                let tries = attempts.get(&ready.index).copied().unwrap_or(1);
                match answer {
                    Ok((result, reply)) => {
                        results[ready.index] = Some(Ok(Outcome {
                            result,
                            status: None,
                            key: ready.key.clone(),
                            correlation_id: reply.correlation_id,
                            attempts: tries,
                        }))
                    }
                    Err(f) if f.cause.is_some_and(|c| retryable(c, ready.safety)) => {
                        hint = hint.max(f.hint);
                        again.push((ready, f));
                    }
                    Err(f) => results[ready.index] = Some(Err(f.error)),
                }
            }
            if again.is_empty() {
                break;
            }
            let remaining = self.policy.deadline.saturating_sub(start.elapsed());
            match self.policy.next_wait(round, hint, remaining, &mut rng) {
                Some(wait) => {
                    tracing::info!(
                        entries = again.len(),
                        wait_ms = wait.as_millis() as u64,
                        "retrying batch entries"
                    );
                    tokio::time::sleep(wait).await;
                    pending = again.into_iter().map(|(r, _)| r).collect();
                }
                None => {
                    for (ready, f) in again {
                        let tries = attempts.get(&ready.index).copied().unwrap_or(1);
                        results[ready.index] = Some(Err(Error::GaveUp {
                            attempts: tries,
                            elapsed: start.elapsed(),
                            last: Box::new(f.error),
                        }));
                    }
                }
            }
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::InvalidCall("the entry was not answered".into()))))
            .collect()
    }
}

fn prepare(index: usize, entry: BatchEntry, batch_id: &str) -> Result<Ready, Error> {
    let params = entry.params.map_err(Error::InvalidCall)?;
    let key = entry.key.resolve()?;
    let params = match &key {
        Some(k) => Some(wire::with_reserved(params, k, false)?),
        None => params,
    };
    let safety = match (entry.kind, &key) {
        (Kind::Query, _) => Safety::Query,
        (Kind::Command, Some(_)) => Safety::KeyedCommand,
        (Kind::Command, None) => Safety::KeylessCommand,
    };
    let id = format!("{batch_id}.{index}");
    let request = wire::request(&entry.method, params.as_ref(), &id);
    Ok(Ready { index, id, request, key, safety })
}

/// One send of the pending entries; an answer per entry, in the same order.
async fn send_round(
    client: &Client,
    pending: &[Ready],
    timeout: Duration,
) -> Vec<Result<(Value, Reply), Failed>> {
    let body = Value::Array(pending.iter().map(|r| r.request.clone()).collect()).to_string().into_bytes();
    let sent = match &*client.transport {
        Transport::Http(http) => http.post("/rpc", body, &[], timeout).await,
        Transport::Stdio(stdio) => {
            // A batch's answer is an array; the daemon answers it in one line.
            stdio.exchange_batch(body, timeout).await
        }
    };
    let reply = match sent {
        Ok(r) => r,
        Err(f) => return pending.iter().map(|_| Err(copy_failed(&f))).collect(),
    };
    if reply.http_status == Some(401) {
        return pending.iter().map(|_| Err(Failed::fatal(Error::Unauthorized))).collect();
    }
    let entries: Option<Vec<Box<serde_json::value::RawValue>>> = serde_json::from_slice(&reply.body).ok();
    let Some(entries) = entries else {
        // One answer for the whole batch: a refusal at the door (id null), or not JSON-RPC.
        let whole = match serde_json::from_slice::<&serde_json::value::RawValue>(&reply.body)
            .ok()
            .and_then(wire::answer)
        {
            Some(wire::Answer { result: Err(e), .. }) => wire::failed(e, &reply, None),
            _ => wire::not_an_answer(&reply),
        };
        return pending.iter().map(|_| Err(copy_failed(&whole))).collect();
    };
    let mut by_id: HashMap<String, wire::Answer> = HashMap::new();
    for raw in &entries {
        if let Some(a) = wire::answer(raw)
            && let Some(id) = a.id.as_ref().and_then(|i| serde_json::from_str::<String>(i.get()).ok())
        {
            by_id.insert(id, a);
        }
    }
    pending
        .iter()
        .map(|ready| match by_id.remove(&ready.id) {
            Some(wire::Answer { result: Ok(raw), .. }) => serde_json::from_str::<Value>(raw.get())
                .map(|v| (v, reply.clone()))
                .map_err(|e| Failed::fatal(Error::Decode { key: ready.key.clone(), source: e })),
            Some(wire::Answer { result: Err(e), .. }) => Err(wire::failed(e, &reply, ready.key.as_deref())),
            None => Err(Failed::fatal(reply.unexpected())),
        })
        .collect()
}

/// The same failure for another entry.
fn copy_failed(f: &Failed) -> Failed {
    Failed { cause: f.cause, hint: f.hint, error: copy_error(&f.error) }
}

fn copy_error(e: &Error) -> Error {
    match e {
        Error::InvalidKey(k) => Error::InvalidKey(*k),
        Error::InvalidCall(s) => Error::InvalidCall(s.clone()),
        Error::Config(s) => Error::Config(s.clone()),
        Error::Rpc(f) => Error::Rpc(Box::new(RpcFailure::clone(f))),
        Error::Connect(s) => Error::Connect(s.clone()),
        Error::Timeout(d) => Error::Timeout(*d),
        Error::Disconnected(s) => Error::Disconnected(s.clone()),
        Error::Unexpected { status, content_type, snippet } => Error::Unexpected {
            status: *status,
            content_type: content_type.clone(),
            snippet: snippet.clone(),
        },
        Error::Unauthorized => Error::Unauthorized,
        Error::Decode { source, .. } => Error::InvalidCall(source.to_string()),
        Error::Stdio(s) => Error::Stdio(s.clone()),
        Error::GaveUp { attempts, elapsed, last } => {
            Error::GaveUp { attempts: *attempts, elapsed: *elapsed, last: Box::new(copy_error(last)) }
        }
    }
}
