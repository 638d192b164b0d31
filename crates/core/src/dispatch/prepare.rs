//! Validation shared by every door: reserved members, the params schema, the key rules.

use std::sync::Arc;

use oncerpc_protocol::{ErrorCode, RawValue, RpcError};

use super::memo::KeyFrom;
use super::{Dispatcher, RequestMeta};
use crate::derived::{self, KeyOrigin};
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
    /// Where the key came from (client, derived, hashed, generated).
    pub origin: KeyOrigin,
    pub key: Arc<str>,
    pub fingerprint: Arc<str>,
    pub force_retry: bool,
    /// A key derived from the call (`derive_key`): the previous window's key, used instead
    /// when its record exists with the same fingerprint.
    pub previous: Option<Arc<str>>,
    /// What `prepare` found may be kept for byte-identical retries (`memo.rs`): it read
    /// nothing but the method, the params text and the transport key (and where the key was).
    pub memo: Option<KeyFrom>,
}

impl Dispatcher {
    /// Validation shared by every door: params parsed when needed, reserved members read
    /// and removed, the JSON Schema, the key rules of SPEC §3. `async_event`: the
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
        if method.spec.signed && !meta.signature_verified {
            // SPEC §15: a webhook method runs only on a verified delivery.
            return Err(RpcError::with_message(
                ErrorCode::InvalidRequest,
                format!(
                    "method \"{}\" accepts only signed webhook deliveries: POST /v2/flows/{}",
                    method.name, method.name
                ),
            ));
        }
        // A method that asks its client questions runs only where the door can ask (the MCP
        // door, for a client that answers elicitation); never as an async event.
        if method.spec.asks && (meta.ask.is_none() || async_event) {
            return Err(RpcError::invalid_params(format!(
                "method \"{}\" asks its caller a question while it runs (an `ask` step): call it as an MCP \
                 tool, synchronously, from a client that supports elicitation",
                method.name
            )));
        }
        // SPEC §20: a caller lacking a scope the method requires claims and runs nothing.
        if let Some(missing) = meta.grant.lacks(&method.spec.scopes) {
            return Err(crate::grant::forbidden(&method.name, &method.spec.scopes, missing));
        }
        let guarded = method.spec.kind == Kind::Command || async_event;
        let mut ctx = Context {
            correlation_id: cid,
            method: name,
            tenant: meta.tenant.clone(),
            idempotency_key: None,
            idempotency_status: None,
            return_step: meta.return_step.clone(),
            journal: None,
            progress: meta.progress.clone(),
            trace: meta.trace.clone(),
            cancel: meta.cancel.clone(),
            ask: meta.ask.clone(),
        };
        // Params are only read when a schema or the engine needs them.
        if method.validator.is_none() && !guarded {
            return Ok(Prepared { ctx, keyed: None });
        }
        // A byte-identical retry of a command answered as a duplicate: what the full path
        // below found for these bytes (`memo.rs` says why it is the same).
        let memoizable = guarded
            && !async_event
            && !meta.force_retry
            && meta.return_step.is_none()
            && method.spec.key_from.is_none()
            && method.spec.fingerprint_from.is_none();
        if memoizable
            && let Some(text) = params
            && let Some((own, fingerprint)) = self.memo.get(&meta.tenant, method, text.get())
            // The key as the full path resolves it; anything else (two keys that differ, a
            // transport key the rules refuse) takes the full path to its error.
            && let Some(key) = match (own, &meta.idempotency_key) {
                (Some(own), None) => Some(own),
                (Some(own), Some(given)) => (own == *given).then_some(own),
                (None, Some(given)) => idempotency::validate_key(given).is_ok().then(|| given.clone()),
                (None, None) => None,
            }
        {
            #[cfg(test)]
            self.memo.count_hit();
            ctx.idempotency_key = Some(key.clone());
            let keyed = Keyed {
                synthetic: false,
                origin: KeyOrigin::Client,
                key,
                fingerprint,
                force_retry: false,
                previous: None,
                memo: None,
            };
            return Ok(Prepared { ctx, keyed: Some(keyed) });
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
        let mut origin = KeyOrigin::Client;
        // Kept only for an explicit key and no force retry (the memo's entries have neither).
        let memo = match (&command.key, &meta.idempotency_key) {
            _ if !memoizable || command.force_retry => None,
            (Some(_), _) => Some(KeyFrom::Params),
            (None, Some(_)) => Some(KeyFrom::Transport),
            (None, None) => None,
        };
        let explicit = idempotency::resolve_key(command.key, meta.idempotency_key.as_ref())?;
        if let Some(key) = &explicit {
            idempotency::validate_key(key)?;
        }
        // SPEC §15: a method may derive its key; an explicit one must then agree with it.
        let explicit = match &method.spec.key_from {
            None => explicit,
            Some(source) => {
                let derived = derived::derive_key(source, params, &meta.key_headers)?;
                let (key, how) = derived::combine(explicit, derived, source)?;
                origin = how;
                Some(key)
            }
        };
        let mut previous = None;
        let key = match explicit {
            Some(key) => key,
            None if let Some(window) = method.spec.derive_key_window => {
                origin = KeyOrigin::Derived;
                let (key, before) = derived::call_keys(&command.fingerprint, window, crate::store::now_ms());
                previous = Some(before);
                key
            }
            None if method.spec.kind == Kind::Command && self.config.idempotency.mode == Mode::Production => {
                return Err(RpcError::invalid_params(idempotency::MSG_KEY_REQUIRED));
            }
            None if async_event => {
                synthetic = true;
                origin = KeyOrigin::Synthetic;
                Arc::from(format!("evt-{}", uuid::Uuid::new_v4().simple()))
            }
            // dev mode: a keyless command runs, without deduplication.
            None => return Ok(Prepared { ctx, keyed: None }),
        };
        let mut fingerprint: Arc<str> = match &method.spec.fingerprint_from {
            None => command.fingerprint.into(),
            Some(pointers) => derived::subset_fingerprint(pointers, params)?.into(),
        };
        if let Some(step) = &meta.return_step {
            // Another return_step is another request: it must not replay this one's result.
            fingerprint = idempotency::fingerprint(&serde_json::json!([&*fingerprint, &**step])).into();
        }
        ctx.idempotency_key = Some(key.clone());
        let force_retry = command.force_retry || meta.force_retry;
        Ok(Prepared {
            ctx,
            keyed: Some(Keyed { synthetic, origin, key, fingerprint, force_retry, previous, memo }),
        })
    }
}

fn parse_value(params: Option<&RawValue>) -> Result<serde_json::Value, RpcError> {
    match params {
        None => Ok(serde_json::Value::Null),
        Some(p) => serde_json::from_str(p.get())
            .map_err(|e| RpcError::invalid_params(format!("invalid params: {e}"))),
    }
}

pub use crate::canonical::RESERVED_PARAMS;

/// Validate params (reserved members already removed) against the method's JSON Schema.
fn validate_schema(validator: &jsonschema::Validator, value: &serde_json::Value) -> Result<(), RpcError> {
    // Valid params, the common case, are checked without building an error iterator.
    if validator.is_valid(value) {
        return Ok(());
    }
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use oncerpc_protocol::RawValue;

    use crate::{
        Dispatcher, DispatcherConfig, KeyOrigin, KeySource, MethodSpec, Registry, RequestMeta, typed,
    };

    /// A dispatcher with `hook` (key from `/id`), `gh` (key from a header) and `signed`
    /// (signature required), each counting its executions.
    fn dispatcher(runs: Arc<AtomicUsize>) -> Dispatcher {
        let mut r = Registry::new();
        for (name, spec) in [
            ("hook", MethodSpec::command().key_from(KeySource::Pointer("/id".into()))),
            ("gh", MethodSpec::command().key_from(KeySource::Header("X-GitHub-Delivery".into()))),
            ("signed", MethodSpec::command().signed(true)),
        ] {
            let runs = runs.clone();
            let handler = typed(move |_ctx, _p: serde_json::Value| {
                let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
                async move { Ok::<_, oncerpc_protocol::RpcError>(n) }
            });
            r.register(name, spec, handler).unwrap();
        }
        Dispatcher::new(r, DispatcherConfig::default())
    }

    async fn rpc(
        d: &Dispatcher,
        method: &str,
        params: &str,
        meta: &RequestMeta,
    ) -> (String, Option<crate::IdempotencyInfo>) {
        let body = format!(r#"{{"jsonrpc":"2.0","method":"{method}","params":{params},"id":1}}"#);
        let reply = d.handle(body.as_bytes(), meta).await;
        (String::from_utf8(reply.body.unwrap()).unwrap(), reply.idempotency)
    }

    #[tokio::test]
    async fn derived_keys_on_rpc() {
        let runs = Arc::new(AtomicUsize::new(0));
        let d = dispatcher(runs.clone());
        let meta = RequestMeta::default();
        let (body, info) = rpc(&d, "hook", r#"{"id":"evt_1","n":1}"#, &meta).await;
        assert!(body.contains(r#""result":1"#), "{body}");
        let info = info.unwrap();
        assert_eq!((&*info.key, info.origin), ("evt_1", KeyOrigin::Derived));
        // Equal explicit keys (params, header) are the same request; a different one is -32602.
        let (body, info) = rpc(&d, "hook", r#"{"id":"evt_1","n":1,"idempotency_key":"evt_1"}"#, &meta).await;
        assert!(body.contains(r#""result":1"#), "{body}");
        assert_eq!(info.unwrap().status.as_str(), "duplicate");
        let header = RequestMeta { idempotency_key: Some(Arc::from("evt_2")), ..RequestMeta::default() };
        let (body, _) = rpc(&d, "hook", r#"{"id":"evt_1","n":1}"#, &header).await;
        assert!(body.contains("-32602") && body.contains("differs"), "{body}");
        let (body, _) = rpc(&d, "hook", r#"{"id":"evt_1","idempotency_key":"evt_2"}"#, &meta).await;
        assert!(body.contains("-32602"), "{body}");
        // Invalid as a key: hashed, deduplicated under the hash.
        let (_, info) = rpc(&d, "hook", r#"{"id":"evt 3"}"#, &meta).await;
        let info = info.unwrap();
        assert_eq!(info.origin, KeyOrigin::Hashed);
        assert_eq!(&*info.key, crate::derived::hashed_key("evt 3"));
        let (_, info) = rpc(&d, "hook", r#"{"id":"evt 3"}"#, &meta).await;
        assert_eq!(info.unwrap().status.as_str(), "duplicate");
        // Absent: -32602, nothing runs.
        let (body, _) = rpc(&d, "hook", r#"{"n":1}"#, &meta).await;
        assert!(body.contains("-32602") && body.contains("no value at /id"), "{body}");
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn derived_keys_on_the_flows_door_and_from_headers() {
        let runs = Arc::new(AtomicUsize::new(0));
        let d = dispatcher(runs.clone());
        let params = RawValue::from_string(r#"{"id":"evt_9"}"#.into()).unwrap();
        let meta = RequestMeta::default();
        let (_, info, _) = d.call("hook", Some(&params), &meta).await;
        assert_eq!(info.unwrap().key.as_ref(), "evt_9");
        let other = RequestMeta { idempotency_key: Some(Arc::from("nope")), ..RequestMeta::default() };
        let (outcome, _, _) = d.call("hook", Some(&params), &other).await;
        assert!(matches!(outcome, oncerpc_protocol::Outcome::Error(e) if e.code.code() == -32602));
        let (_, info, _) = d.call("hook", Some(&params), &meta).await;
        assert_eq!(info.unwrap().status.as_str(), "duplicate");
        // key_header: the value the front door collected (names in lower case).
        let gh = RequestMeta {
            key_headers: vec![(Arc::from("x-github-delivery"), Arc::from("72d3162e-cc78"))],
            ..RequestMeta::default()
        };
        let (_, info, _) = d.call("gh", Some(&params), &gh).await;
        assert_eq!(info.unwrap().key.as_ref(), "72d3162e-cc78");
        let (outcome, _, _) = d.call("gh", Some(&params), &meta).await;
        assert!(
            matches!(outcome, oncerpc_protocol::Outcome::Error(e) if e.message.contains("x-github-delivery"))
        );
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_signed_method_runs_only_when_the_door_verified_it() {
        let runs = Arc::new(AtomicUsize::new(0));
        let d = dispatcher(runs.clone());
        let (body, _) = rpc(&d, "signed", r#"{"idempotency_key":"k-1"}"#, &RequestMeta::default()).await;
        assert!(body.contains("-32600") && body.contains("signed webhook deliveries"), "{body}");
        assert_eq!(runs.load(Ordering::SeqCst), 0);
        let verified = RequestMeta { signature_verified: true, ..RequestMeta::default() };
        let (outcome, _, _) = d.call("signed", None, &verified).await;
        assert!(matches!(outcome, oncerpc_protocol::Outcome::Result(_)));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }
}
