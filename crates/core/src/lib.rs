//! # oncerpc-core
//!
//! The transport-independent heart of oncerpc: the [`Registry`] of methods with their
//! [`MethodSpec`], the policy of SPEC §2, the idempotency engine of SPEC §3 over a
//! [`Store`], and the [`Dispatcher`] that turns a request body into a response body
//! (batches, deadlines, panic isolation, `rpc.discover`).
//!
//! A service embedding oncerpc with a handler of its own: a command, so a retried call runs it
//! once and is answered the stored outcome.
//!
//! ```
//! use std::sync::{Arc, atomic::{AtomicU64, Ordering}};
//! use oncerpc_core::{Context, Dispatcher, DispatcherConfig, IdempotencyStatus, MethodSpec, Registry, RequestMeta, typed};
//! use oncerpc_core::protocol::{ErrorCode, RpcError};
//! use serde::Deserialize;
//!
//! #[derive(Deserialize)]
//! struct Charge { cents: u64 }
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let charged = Arc::new(AtomicU64::new(0)); // the side effect
//! let ledger = charged.clone();
//! let charge = typed(move |_ctx: Context, p: Charge| {
//!     let ledger = ledger.clone();
//!     async move {
//!         if p.cents == 0 { return Err(RpcError::with_message(ErrorCode::InvalidParams, "cents must be > 0")); }
//!         Ok(serde_json::json!({ "total": ledger.fetch_add(p.cents, Ordering::SeqCst) + p.cents }))
//!     }
//! });
//! let mut registry = Registry::new();
//! registry.register("payments.charge", MethodSpec::command(), charge).unwrap();
//! let dispatcher = Dispatcher::new(registry, DispatcherConfig::default()); // in-memory records
//!
//! let call = br#"{"jsonrpc":"2.0","method":"payments.charge","params":{"cents":500,"idempotency_key":"order-1"},"id":7}"#;
//! let first = dispatcher.handle(call, &RequestMeta::default()).await;
//! let retry = dispatcher.handle(call, &RequestMeta::default()).await; // the client timed out and retried
//! assert_eq!(first.body.as_deref(), Some(&br#"{"jsonrpc":"2.0","result":{"total":500},"id":7}"#[..]));
//! assert_eq!(retry.body, first.body); // the stored outcome, byte for byte
//! assert_eq!(retry.idempotency.unwrap().status, IdempotencyStatus::Duplicate);
//! assert_eq!(charged.load(Ordering::SeqCst), 500); // charged once
//! # });
//! ```

pub mod access_log;
pub mod ask;
mod bounded;
mod budget;
mod cache;
mod canonical;
pub mod derived;
mod dispatch;
pub mod events;
mod execution;
mod future;
pub mod grant;
mod health;
pub mod idempotency;
pub mod journal;
mod memory;
mod method;
pub mod metrics;
pub mod openrpc;
mod progress;
mod record;
mod redact;
mod registry;
pub mod store;
#[cfg(feature = "testkit")]
pub mod testkit;

pub mod trace;
pub use ask::{Ask, Asked, Question};
pub use bounded::Bounded;
pub use budget::Permit;
pub use derived::KeyOrigin;
pub use dispatch::{
    BatchConfig, DEFAULT_TENANT, Dispatcher, DispatcherConfig, ExternalMethod, ExternalResolver,
    IdempotencyInfo, RESERVED_PARAMS, Reply, RequestMeta, generated_id,
};
pub use events::Submitted;
pub use execution::lease_margin;
pub use grant::Grant;
pub use idempotency::{IdempotencyConfig, Mode};
pub use memory::MemoryStore;
pub use method::{
    BoxFuture, Context, DEFAULT_TIMEOUT, Handler, HandlerResult, IdempotencyStatus, KeySource, Kind,
    MethodSpec, ToolOptions, decode_params, typed,
};
pub use metrics::set_log_lines_dropped_source;
pub use oncerpc_protocol as protocol;
pub use progress::{Progress, Report, StepProgress, ToolProgress};
pub use redact::{LOG_MAX_CHARS, LogSafe, error_chain, has_userinfo, redact_url};
pub use registry::{Registry, RegistryError};
pub use store::{Store, StoreError};
/// The token a door fires when its caller cancels a call ([`Context::cancel`]).
pub use tokio_util::sync::CancellationToken;
pub use trace::TraceContext;
