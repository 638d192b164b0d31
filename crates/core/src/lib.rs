//! # oncerpc-core
//!
//! The transport-independent heart of oncerpc: the [`Registry`] of methods with their
//! [`MethodSpec`], the policy of DESIGN §2, the idempotency engine of DESIGN §3 over a
//! [`Store`], and the [`Dispatcher`] that turns a request body into a response body
//! (batches, deadlines, panic isolation, `rpc.discover`).
//!
//! ```
//! use oncerpc_core::{Context, Dispatcher, DispatcherConfig, MethodSpec, Registry, RequestMeta, typed};
//! use oncerpc_core::protocol::RpcError;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let mut registry = Registry::new();
//! registry
//!     .register(
//!         "add",
//!         MethodSpec::query(),
//!         typed(|_ctx: Context, (a, b): (i64, i64)| async move { Ok::<_, RpcError>(a + b) }),
//!     )
//!     .unwrap();
//! // Commands' idempotency records go to an in-memory store unless `with_store` says otherwise.
//! let dispatcher = Dispatcher::new(registry, DispatcherConfig::default());
//! let reply = dispatcher
//!     .handle(br#"{"jsonrpc":"2.0","method":"add","params":[1,2],"id":1.0}"#, &RequestMeta::default())
//!     .await;
//! assert_eq!(reply.body.unwrap(), br#"{"jsonrpc":"2.0","result":3,"id":1.0}"#);
//! # });
//! ```

mod budget;
mod cache;
mod canonical;
pub mod derived;
mod dispatch;
pub mod events;
mod execution;
pub mod idempotency;
pub mod journal;
mod memory;
mod method;
pub mod metrics;
pub mod openrpc;
mod redact;
mod registry;
pub mod store;
#[cfg(feature = "testkit")]
pub mod testkit;

pub use budget::Permit;
pub use derived::KeyOrigin;
pub use dispatch::{
    BatchConfig, DEFAULT_TENANT, Dispatcher, DispatcherConfig, IdempotencyInfo, RESERVED_PARAMS, Reply,
    RequestMeta, generated_id,
};
pub use events::Submitted;
pub use execution::lease_margin;
pub use idempotency::{IdempotencyConfig, Mode};
pub use memory::MemoryStore;
pub use method::{
    BoxFuture, Context, DEFAULT_TIMEOUT, Handler, HandlerResult, IdempotencyStatus, KeySource, Kind,
    MethodSpec, decode_params, typed,
};
pub use metrics::set_log_lines_dropped_source;
pub use oncerpc_protocol as protocol;
pub use redact::{LOG_MAX_CHARS, LogSafe, redact_url};
pub use registry::{Registry, RegistryError};
pub use store::{Store, StoreError};
