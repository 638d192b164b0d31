//! A call of a re-exported tool: the handler of its external method.

use std::sync::Arc;

use oncerpc_core::{BoxFuture, Context, Handler, HandlerResult, RESERVED_PARAMS};
use oncerpc_protocol::{RawValue, RpcError};
use serde_json::{Map, Value};

pub use crate::errors::{failed, timed_out};
use crate::link::Link;

/// `tools/call` of one upstream tool (its own name), with the call's key.
pub struct UpstreamTool {
    pub link: Arc<Link>,
    pub tool: String,
}

impl Handler for UpstreamTool {
    fn call<'a>(&'a self, ctx: Context, params: Option<&'a RawValue>) -> BoxFuture<'a, HandlerResult> {
        Box::pin(async move {
            let mut arguments = arguments(params)?;
            // The key travels in `_meta` (and `key_argument`), not as an argument the
            // upstream never declared.
            for reserved in RESERVED_PARAMS {
                arguments.remove(reserved);
            }
            // Every tenant reaches the upstream with oncerpc's one set of credentials: the
            // client's own key would make two tenants' `order-1` one call there. The upstream
            // gets a key of this tenant, method and key (and tool), as HTTP steps do.
            let key = ctx.idempotency_key.as_deref().map(|key| {
                oncerpc_core::idempotency::upstream_key(&ctx.tenant, &ctx.method, key, &self.tool)
            });
            // The client's cancellation stops it: dropping the call tells the upstream, and the
            // failure is not stored.
            let calling = self.link.call_tool(&self.tool, arguments, key.as_deref(), ctx.progress.clone());
            let cancelled = async {
                match &ctx.cancel {
                    Some(token) => token.cancelled().await,
                    None => std::future::pending().await,
                }
            };
            let result = tokio::select! {
                result = calling => result?,
                () = cancelled => return Err(failed(&self.link.spec.name, "the client cancelled the call")),
            };
            serde_json::value::to_raw_value(&result).map_err(RpcError::internal)
        })
    }
}

/// A call's arguments: an object (none: `{}`).
pub fn arguments(params: Option<&RawValue>) -> Result<Map<String, Value>, RpcError> {
    match params.map(|p| serde_json::from_str::<Value>(p.get())) {
        None => Ok(Map::new()),
        Some(Ok(Value::Object(o))) => Ok(o),
        Some(Ok(Value::Null)) => Ok(Map::new()),
        _ => Err(RpcError::invalid_params("arguments must be an object")),
    }
}
