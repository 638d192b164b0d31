//! Validation shared by every door: reserved members, the params schema, the key rules.

use std::sync::Arc;

use oncerpc_protocol::{RawValue, RpcError};

use super::{Dispatcher, RequestMeta};
use crate::idempotency::{self, Mode};
use crate::method::{Context, Kind, Method};

/// A request that passed validation, ready to execute.
pub(crate) struct Prepared {
    pub ctx: Context,
    /// Set when the execution is guarded by an idempotency record.
    pub keyed: Option<Keyed>,
}

pub(crate) struct Keyed {
    /// Generated for a keyless async call, not given by the client.
    pub synthetic: bool,
    pub key: Arc<str>,
    pub fingerprint: String,
    pub force_retry: bool,
}

impl Dispatcher {
    /// Validation shared by every door: params parsed when needed, reserved members read
    /// and removed, the JSON Schema, the key rules of DESIGN §3. `async_event`: the
    /// execution will be an async event, which is always guarded by a record (a synthetic
    /// key when the client gave none). `name`: the method's name for the context.
    pub(crate) fn prepare(
        &self,
        method: &Method,
        name: Arc<str>,
        params: Option<&RawValue>,
        cid: Arc<str>,
        meta: &RequestMeta,
        async_event: bool,
    ) -> Result<Prepared, RpcError> {
        let guarded = method.spec.kind == Kind::Command || async_event;
        let mut ctx = Context {
            correlation_id: cid,
            method: name,
            tenant: meta.tenant.clone(),
            idempotency_key: None,
            idempotency_status: None,
            return_step: meta.return_step.clone(),
        };
        // Params are only read when a schema or the engine needs them.
        if method.validator.is_none() && !guarded {
            return Ok(Prepared { ctx, keyed: None });
        }
        // The engine reads the raw text (a Value has lost big and decimal numbers' exact
        // value): reserved members, the fingerprint, duplicate members refused (-32600).
        let command = if guarded { Some(idempotency::command_params(params)?) } else { None };
        if let Some(validator) = &method.validator {
            let mut value = parse_value(params)?;
            if guarded {
                // The schema never sees the reserved members.
                idempotency::remove_reserved(&mut value);
            }
            validate_schema(validator, &value)?;
        }
        let Some(command) = command else { return Ok(Prepared { ctx, keyed: None }) };
        let mut synthetic = false;
        let key = match idempotency::resolve_key(command.key, meta.idempotency_key.as_ref())? {
            Some(key) => {
                idempotency::validate_key(&key)?;
                key
            }
            None if method.spec.kind == Kind::Command && self.config.idempotency.mode == Mode::Production => {
                return Err(RpcError::invalid_params(idempotency::MSG_KEY_REQUIRED));
            }
            None if async_event => {
                synthetic = true;
                Arc::from(format!("evt-{}", uuid::Uuid::new_v4().simple()))
            }
            // dev mode: a keyless command runs, without deduplication.
            None => return Ok(Prepared { ctx, keyed: None }),
        };
        let mut fingerprint = command.fingerprint;
        if let Some(step) = &meta.return_step {
            // Another return_step is another request: it must not replay this one's result.
            fingerprint = idempotency::fingerprint(&serde_json::json!([fingerprint, &**step]));
        }
        ctx.idempotency_key = Some(key.clone());
        let force_retry = command.force_retry || meta.force_retry;
        Ok(Prepared { ctx, keyed: Some(Keyed { synthetic, key, fingerprint, force_retry }) })
    }
}

fn parse_value(params: Option<&RawValue>) -> Result<serde_json::Value, RpcError> {
    match params {
        None => Ok(serde_json::Value::Null),
        Some(p) => serde_json::from_str(p.get())
            .map_err(|e| RpcError::invalid_params(format!("invalid params: {e}"))),
    }
}

/// Members of `params` that belong to oncerpc, not to the method (DESIGN §3).
pub const RESERVED_PARAMS: [&str; 2] = ["idempotency_key", "force_retry"];

/// Validate params (reserved members already removed) against the method's JSON Schema.
fn validate_schema(validator: &jsonschema::Validator, value: &serde_json::Value) -> Result<(), RpcError> {
    match validator.iter_errors(value).next() {
        None => Ok(()),
        Some(err) => {
            let path = err.instance_path().to_string();
            let path = if path.is_empty() { "/".to_string() } else { path };
            Err(RpcError::invalid_params(format!("invalid params: {path}: {err}"))
                .data(serde_json::json!({ "path": path, "schema_path": err.schema_path().to_string() })))
        }
    }
}
