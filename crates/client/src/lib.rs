//! # oncerpc-client
//!
//! The client half of oncerpc's promise, "a command runs once, however many times it is
//! sent": the server keeps it only for clients that retry with the **same** idempotency key.
//! This client does, over the HTTP doors (`POST /rpc`, `/v2/flows`, `/v2/events`) or a stdio
//! daemon (`oncerpc stdio`).
//!
//! * [`Client::query`] and [`Client::command`]: a command gets a UUIDv7 key unless
//!   [`Call::key`] gives one, and every attempt carries it. The [`Outcome`] has the typed
//!   result, `new`/`duplicate` and the key used.
//! * Retries ([`retry`]): connection failures, timeouts, `408/429/502/503/504`, and the codes
//!   `-32001` (in progress), `-32004`, `-32007`, `-32008`, honouring `Retry-After` and
//!   `data.retry_after_ms`, with full-jitter exponential backoff, all inside one total
//!   deadline. Never a command without a key, never a rejection (`-32600`, `-32601`,
//!   `-32602`, `-32002`, `-32003`), never a stored outcome.
//! * Typed errors ([`Error`]) with the JSON-RPC code of SPEC §8 ([`ErrorCode`]) and `data`.
//! * Batches ([`Client::batch`]), flows ([`Client::flow`]: submit → event id, [`Client::wait`],
//!   or a sync call), events ([`Client::events`], [`Client::retry_event`]).
//! * Every call runs in a `tracing` span (`oncerpc.call`, with method, key and correlation
//!   id); each retry is an `info` event saying why and how long it waits.
//!
//! ```no_run
//! use std::time::Duration;
//! use oncerpc_client::{Client, Error, ErrorCode};
//! use serde::Deserialize;
//! use serde_json::json;
//!
//! #[derive(Debug, Deserialize)]
//! struct Total {
//!     total: i64,
//! }
//!
//! # async fn demo() -> Result<(), Error> {
//! let client = Client::http("http://127.0.0.1:8080")
//!     .api_key("acme-secret")
//!     .deadline(Duration::from_secs(30))
//!     .build()?;
//!
//! // A command: the same key on every attempt, however the network behaves.
//! let outcome = client.command::<Total>("counter.increment", json!({"by": 5})).key("order-1").await?;
//! println!("total {} ({:?}, key {:?})", outcome.result.total, outcome.status, outcome.key);
//!
//! // A rejection is not retried; its code and data are in the error.
//! match client.command::<Total>("counter.increment", json!({"by": "five"})).await {
//!     Err(e) if e.code() == Some(ErrorCode::InvalidParams) => println!("refused: {e}"),
//!     other => println!("{other:?}"),
//! }
//! # Ok(()) }
//! ```
//!
//! Bad input is refused before anything is sent:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use oncerpc_client::{Client, Error};
//! use serde_json::{Value, json};
//!
//! let client = Client::http("http://127.0.0.1:9").build().unwrap();
//! let sent = client.command::<Value>("counter.increment", json!({"by": 1})).key("not a key!").await;
//! assert!(matches!(sent, Err(Error::InvalidKey(_))));
//! assert!(matches!(Client::http("ftp://example.invalid").build(), Err(Error::Config(_))));
//! # }
//! ```
//!
//! What is retried is a pure function of the failure and the call, [`retry::retryable`]:
//!
//! ```
//! use oncerpc_client::ErrorCode;
//! use oncerpc_client::retry::{Cause, Safety, retryable};
//!
//! assert!(retryable(Cause::Status(503), Safety::KeyedCommand));
//! assert!(retryable(Cause::Code(ErrorCode::RateLimited), Safety::Query));
//! assert!(!retryable(Cause::Code(ErrorCode::KeyReused), Safety::KeyedCommand));
//! assert!(!retryable(Cause::Timeout, Safety::KeylessCommand)); // it may have run
//! ```
//!
//! The whole story (what is retried and why, choosing a deadline, using it from a service)
//! is in the repository's `docs/CLIENT.md`.

mod batch;
mod call;
mod client;
mod engine;
mod error;
mod flows;
mod http;
mod key;
mod outcome;
pub mod retry;
mod stdio;
mod transport;
mod wire;

pub use batch::Batch;
pub use call::Call;
pub use client::{Client, ClientBuilder};
pub use error::{Error, RpcFailure};
pub use flows::{Event, EventPage, EventStatus, EventsQuery, Flow, Submitted};
pub use key::new_key;
pub use oncerpc_protocol::{ErrorCode, KeyFormatError, RawValue, check_key};
pub use outcome::{IdempotencyStatus, Outcome};
pub use retry::RetryPolicy;
