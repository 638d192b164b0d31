//! `tools/call`: one call through the dispatcher, and its answer as an MCP tool result.
//!
//! The arguments are the method's params. The key: `_meta["io.oncerpc/idempotency-key"]`,
//! else `arguments.idempotency_key` (a reserved member, as on `/rpc`: not part of the
//! fingerprint), else the transport's key header, else the method's own key rule; two given
//! and different is an invalid call.
//! So a command sent over `/rpc` and retried over MCP with the same key, tenant and arguments
//! is a duplicate. `_meta["io.oncerpc/force-retry"]: true` re-runs a failed one.

use std::sync::Arc;

use oncerpc_core::{Dispatcher, Kind, RequestMeta};
use oncerpc_protocol::{ErrorCode, Id, Outcome, RawValue, Request, RpcError};
use serde_json::Value;

use crate::cancel::Inflight;
pub use crate::meta::{META_CORRELATION, META_KEY, META_RELATED_TASK, META_STATUS};
pub(crate) use crate::result::write_tool_result;
pub use crate::result::{replayed_failure, task_tool_result, tool_result};
use crate::{Outbox, Session, Tools};

/// `_meta` member of a call: force-retry a failed execution.
pub const META_FORCE: &str = "io.oncerpc/force-retry";

/// Run a `tools/call` request; the JSON text of its result, and whether it is an error
/// result (`isError: true`). `None`: the client cancelled it (a query; a command runs on).
pub async fn call(
    dispatcher: &Dispatcher,
    tools: &Tools,
    req: &Request<'_>,
    id: Id<'_>,
    session: &Session,
    outbox: Option<&Outbox>,
    inflight: &Inflight,
) -> Result<Option<(String, bool)>, RpcError> {
    run(dispatcher, prepare(tools, req, id, session, outbox)?, id, session, inflight).await
}

/// [`call`] with its params already read. The result is the revision's: in `2026-07-28`
/// (the session's version) it begins with `resultType: "complete"`.
pub(crate) async fn call_read(
    dispatcher: &Dispatcher,
    tools: &Tools,
    params: &CallParams<'_>,
    id: Id<'_>,
    session: &Session,
    outbox: Option<&Outbox>,
    inflight: &Inflight,
) -> Result<Option<(String, bool)>, RpcError> {
    run(dispatcher, prepare_read(tools, params, id, session, outbox)?, id, session, inflight).await
}

/// Run a prepared `tools/call` inline (see [`call`]).
pub(crate) async fn run(
    dispatcher: &Dispatcher,
    prepared: Prepared<'_>,
    id: Id<'_>,
    session: &Session,
    inflight: &Inflight,
) -> Result<Option<(String, bool)>, RpcError> {
    let Prepared { name, tool, arguments, meta: mut request, mut refused, unanswered, .. } = prepared;
    let complete = session.version.is_some_and(|v| crate::meta::STATELESS_VERSIONS.contains(&v));
    // A tool that asks questions, for a client that cannot answer them: nothing runs.
    if tool.tool().asks && request.ask.is_none() && refused.is_none() {
        refused = Some(RpcError::invalid_params(crate::elicit::NEEDS_ELICITATION));
    }
    if let Some(e) = refused {
        let cid = request.correlation_id.as_deref().unwrap_or("");
        return Ok(Some((write_tool_result(&Outcome::Error(e), None, cid, complete, None), true)));
    }
    let external = match &tool {
        Target::External(t) => Some(t.clone()),
        Target::Native(_) => None,
    };
    // Another server's command is that server's to stop: its handler hears of a cancellation.
    let cancel = match (tool.tool().kind, &external) {
        (Kind::Command, Some(_)) => Some(oncerpc_core::CancellationToken::new()),
        _ => None,
    };
    request.cancel = cancel.clone();
    let calling = async {
        match &external {
            Some(t) => dispatcher.call_external(&t.method, Some(&arguments), &request).await,
            None => dispatcher.call(&name, Some(&arguments), &request).await,
        }
    };
    // A query may be cancelled: it stops. A command runs on and stores its outcome — but
    // another server's command is that server's to stop: it is told (and the call, which
    // then has no outcome, is not stored).
    let scope = session.id.as_deref().unwrap_or("");
    let registered = match (tool.tool().kind, &external) {
        (Kind::Query, _) | (Kind::Command, Some(_)) => inflight.register(&session.tenant, scope, id.raw()),
        (Kind::Command, None) => None,
    };
    let (outcome, info, cid) = match registered {
        None => calling.await,
        Some(mut r) => {
            let mut calling = std::pin::pin!(calling);
            tokio::select! {
                done = &mut calling => done,
                Ok(()) = &mut r.cancelled => {
                    if let Some(cancel) = &cancel {
                        cancel.cancel();
                        tracing::info!(tenant = %session.tenant, "MCP call of an upstream's command cancelled by the client: the upstream is told");
                        calling.await;
                    }
                    return Ok(None);
                }
            }
        }
    };
    // The flow waits for an answer this call did not bring (2026-07-28): ask for it.
    if let (Outcome::Error(e), Some(unanswered)) = (&outcome, &unanswered)
        && e.code == ErrorCode::InputRequired
        && let Some(result) = crate::elicit::input_required(unanswered)
    {
        return Ok(Some((result, false)));
    }
    Ok(Some(match (&outcome, external) {
        (Outcome::Result(r), Some(_)) => {
            let (result, is_error) = crate::external::result(r.get(), info.as_ref(), &cid);
            (if complete { crate::meta::complete(&result) } else { result }, is_error)
        }
        _ => (write_tool_result(&outcome, info.as_ref(), &cid, complete, None), outcome.is_error()),
    }))
}

/// The tool a call names: one of the registry's, or another server's.
pub(crate) enum Target<'t> {
    Native(&'t crate::tool::Tool),
    External(Arc<crate::ExternalTool>),
}

impl Target<'_> {
    pub fn tool(&self) -> &crate::tool::Tool {
        match self {
            Target::Native(t) => t,
            Target::External(t) => &t.tool,
        }
    }
}

/// A `tools/call` request read: the tool, its arguments (the method's params) and the
/// dispatcher's request (tenant, key, force retry, correlation id, progress).
pub(crate) struct Prepared<'t> {
    /// The method the tool calls (the tool's name may be its model-safe form).
    pub name: String,
    pub tool: Target<'t>,
    pub arguments: Box<RawValue>,
    pub meta: RequestMeta,
    /// `params.task` as sent (the session era's task augmentation, `2025-11-25`), unread.
    pub task: Option<Box<RawValue>>,
    /// Where the call's task id goes once it is a task, for its notifications to name it.
    pub related: Option<crate::notify::RelatedTask>,
    /// Arguments that cannot be the method's params (a positional method's): answered as the
    /// call's error result, nothing run.
    pub refused: Option<RpcError>,
    /// A `2026-07-28` call of a tool that asks: where its unanswered question is noted, for
    /// the `input_required` result ([`crate::elicit`]).
    pub unanswered: Option<crate::elicit::Unanswered>,
}

/// The members of a request's params this door reads, as raw JSON: one pass over the params
/// (the rest skipped), and the arguments passed on byte for byte (no tree built and printed
/// again). `tools/call` reads the first four; the stateless revision also checks `taskId`
/// (`tasks/*`) and `uri` (`resources/read`) against the `Mcp-Name` header.
#[derive(serde::Deserialize, Default)]
pub(crate) struct RawParams<'a> {
    #[serde(borrow)]
    pub name: Option<&'a RawValue>,
    #[serde(borrow)]
    pub arguments: Option<&'a RawValue>,
    /// Read in the same pass as the other members.
    #[serde(rename = "_meta", borrow)]
    pub meta: Option<MetaMember<'a>>,
    #[serde(borrow)]
    pub task: Option<&'a RawValue>,
    #[serde(rename = "taskId", borrow)]
    pub task_id: Option<&'a RawValue>,
    #[serde(borrow)]
    pub uri: Option<&'a RawValue>,
    /// `2026-07-28`: the client's answers to the questions of an `input_required` result.
    #[serde(rename = "inputResponses", borrow)]
    pub input_responses: Option<&'a RawValue>,
}

/// A `tools/call`'s params, read: its name and arguments as sent, its `_meta` read once.
#[derive(Default)]
pub(crate) struct CallParams<'a> {
    pub name: Option<&'a RawValue>,
    pub arguments: Option<&'a RawValue>,
    pub meta: Option<CallMeta<'a>>,
    /// `task` (the session era's task augmentation), as sent.
    pub task: Option<&'a RawValue>,
    /// `inputResponses` (`2026-07-28`), as sent.
    pub input_responses: Option<&'a RawValue>,
}

impl<'a> CallParams<'a> {
    /// Read a request's params (an object, or none).
    pub(crate) fn read(req: &Request<'a>) -> Result<CallParams<'a>, RpcError> {
        let not_object = || RpcError::new(ErrorCode::InvalidParams).reason("params must be an object");
        match req.params {
            None => Ok(CallParams::default()),
            Some(raw) if starts_with(raw, '{') => {
                let p: RawParams<'a> = serde_json::from_str(raw.get())
                    .map_err(|e| RpcError::invalid_params(format!("invalid tools/call params: {e}")))?;
                Ok(CallParams {
                    task: p.task,
                    input_responses: p.input_responses,
                    ..CallParams::new(p.name, p.arguments, p.meta)?
                })
            }
            Some(_) => Err(not_object()),
        }
    }

    /// From the members read (a `_meta` that is not an object is no `_meta`).
    pub(crate) fn new(
        name: Option<&'a RawValue>,
        arguments: Option<&'a RawValue>,
        meta: Option<MetaMember<'a>>,
    ) -> Result<CallParams<'a>, RpcError> {
        let meta = match meta {
            Some(MetaMember::Object(m)) => Some(m),
            Some(MetaMember::Other) | None => None,
        };
        Ok(CallParams { name, arguments, meta, task: None, input_responses: None })
    }
}

/// [`RawParams`] read from an object only (a struct would take an array too).
pub(crate) struct ParamsObject<'a>(pub RawParams<'a>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for ParamsObject<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct ObjectVisitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for ObjectVisitor<'a> {
            type Value = ParamsObject<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("params as an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                let de = serde::de::value::MapAccessDeserializer::new(map);
                <RawParams<'a> as serde::Deserialize>::deserialize(de).map(ParamsObject)
            }
        }
        d.deserialize_map(ObjectVisitor(std::marker::PhantomData))
    }
}

/// `params._meta` as read with the other members: its members when it is an object, else
/// nothing to read.
pub(crate) enum MetaMember<'a> {
    Object(CallMeta<'a>),
    Other,
}

impl<'de: 'a, 'a> serde::Deserialize<'de> for MetaMember<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
        struct MetaVisitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for MetaVisitor<'a> {
            type Value = MetaMember<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a _meta value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                // A member it cannot read (a duplicate) fails the params, naming `_meta`.
                let de = serde::de::value::MapAccessDeserializer::new(&mut map);
                <CallMeta<'a> as serde::Deserialize>::deserialize(de)
                    .map(MetaMember::Object)
                    .map_err(|e| serde::de::Error::custom(format_args!("invalid _meta: {e}")))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(MetaMember::Other)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(MetaMember::Other)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                Ok(MetaMember::Other)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                Ok(MetaMember::Other)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(MetaMember::Other)
            }
            fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
                Ok(MetaMember::Other)
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(MetaMember::Other)
            }
        }
        d.deserialize_any(MetaVisitor(std::marker::PhantomData))
    }
}

/// The members of a request's `_meta` this door reads: the call's own, and the stateless
/// revision's (protocol version, client capabilities, log level).
#[derive(serde::Deserialize, Default)]
pub(crate) struct CallMeta<'a> {
    #[serde(rename = "io.oncerpc/idempotency-key", borrow)]
    key: Option<&'a RawValue>,
    #[serde(rename = "io.oncerpc/force-retry", borrow)]
    force_retry: Option<&'a RawValue>,
    #[serde(rename = "progressToken", borrow)]
    progress_token: Option<&'a RawValue>,
    #[serde(rename = "io.modelcontextprotocol/protocolVersion", borrow)]
    pub protocol_version: Option<&'a RawValue>,
    #[serde(rename = "io.modelcontextprotocol/clientCapabilities", borrow)]
    pub client_capabilities: Option<&'a RawValue>,
    #[serde(rename = "io.modelcontextprotocol/logLevel", borrow)]
    pub log_level: Option<&'a RawValue>,
    /// W3C Trace Context, where the transport has no headers (stdio) or to override them.
    #[serde(borrow)]
    traceparent: Option<&'a RawValue>,
    #[serde(borrow)]
    tracestate: Option<&'a RawValue>,
}

pub(crate) fn starts_with(raw: &RawValue, c: char) -> bool {
    raw.get().trim_start().starts_with(c)
}

/// A JSON string's text (borrowed when it has no escapes); `None` when `raw` is not a string.
pub(crate) fn text_of(raw: &RawValue) -> Option<std::borrow::Cow<'_, str>> {
    let s = raw.get().trim();
    let inner = s.strip_prefix('"')?.strip_suffix('"')?;
    if inner.bytes().any(|b| b == b'\\' || b == b'"') {
        serde_json::from_str::<String>(s).ok().map(std::borrow::Cow::Owned)
    } else {
        Some(std::borrow::Cow::Borrowed(inner))
    }
}

/// Read a `tools/call` request (see the module's notes on keys).
pub(crate) fn prepare<'t>(
    tools: &'t Tools,
    req: &Request<'_>,
    id: Id<'_>,
    session: &Session,
    outbox: Option<&Outbox>,
) -> Result<Prepared<'t>, RpcError> {
    prepare_read(tools, &CallParams::read(req)?, id, session, outbox)
}

/// [`prepare`] with the params already read.
fn prepare_read<'t>(
    tools: &'t Tools,
    params: &CallParams<'_>,
    id: Id<'_>,
    session: &Session,
    outbox: Option<&Outbox>,
) -> Result<Prepared<'t>, RpcError> {
    let called: String = match params.name.and_then(text_of) {
        Some(name) => name.into_owned(),
        None => return Err(RpcError::invalid_params("tools/call needs the tool's name")),
    };
    let name = called.as_str();
    let tool = match tools.get(name) {
        Some(t) => Target::Native(t),
        None => match tools.external().get(name) {
            Some(t) => Target::External(t),
            None => {
                return Err(RpcError::invalid_params(format!(
                    "Unknown tool: {}",
                    oncerpc_core::LogSafe(name)
                )));
            }
        },
    };
    let mut arguments = match params.arguments {
        None => RawValue::from_string("{}".to_owned()).map_err(RpcError::internal)?,
        Some(a) if a.get().trim() == "null" => {
            RawValue::from_string("{}".to_owned()).map_err(RpcError::internal)?
        }
        Some(a) if starts_with(a, '{') => a.to_owned(),
        Some(_) => return Err(RpcError::invalid_params("arguments must be an object")),
    };
    // Positional params come as one array argument; the key and force retry beside it. Wrong
    // arguments are the call's error result, as the method's own invalid params are.
    let mut refused = None;
    let (argument_key, argument_force) =
        match tool.tool().array_argument.as_deref().map(|a| crate::arguments::positional(&arguments, a)) {
            Some(Ok(p)) => {
                arguments = p.params;
                (p.key, p.force_retry)
            }
            Some(Err(e)) => {
                refused = Some(e);
                (None, false)
            }
            None => (None, false),
        };
    let meta = params.meta.as_ref();
    let meta_key = match meta.and_then(|m| m.key) {
        None => None,
        Some(raw) if raw.get().trim() == "null" => None,
        Some(raw) => match text_of(raw) {
            Some(k) => Some(k),
            None => return Err(RpcError::invalid_params(format!("_meta[\"{META_KEY}\"] must be a string"))),
        },
    };
    let meta_key = match (meta_key, argument_key) {
        (Some(m), Some(a)) if *m != a => {
            refused.get_or_insert_with(|| {
                RpcError::invalid_params(format!(
                    "invalid idempotency key: _meta[\"{META_KEY}\"] and arguments.idempotency_key differ"
                ))
            });
            Some(m)
        }
        (Some(m), _) => Some(m),
        (None, a) => a.map(std::borrow::Cow::Owned),
    };
    let key = match meta_key {
        None => session.key_header.clone(),
        Some(k) if session.key_header.as_deref().is_some_and(|h| h != k) => {
            return Err(RpcError::invalid_params(format!(
                "invalid idempotency key: _meta[\"{META_KEY}\"] and the Idempotency-Key header differ"
            )));
        }
        Some(k) => Some(Arc::from(&*k)),
    };
    let force_retry =
        argument_force || meta.and_then(|m| m.force_retry).is_some_and(|f| f.get().trim() == "true");
    let token = meta
        .and_then(|m| m.progress_token)
        .and_then(|t| serde_json::from_str::<Value>(t.get()).ok())
        .filter(|t| t.is_string() || t.is_number());
    // A call that may become a task (and has someone to tell) gets a place for its task id.
    let related = (outbox.is_some() && (token.is_some() || session.log_level.is_some()))
        .then(crate::notify::RelatedTask::default);
    let progress = crate::notify::progress(
        outbox,
        token,
        session.log_level.as_deref(),
        &tool.tool().name,
        related.clone(),
    );
    // A string that is not a valid `traceparent` is ignored, like a malformed header.
    let text = |raw: Option<&RawValue>| raw.and_then(|r| serde_json::from_str::<String>(r.get()).ok());
    let trace = match meta.and_then(|m| text(m.traceparent)) {
        Some(tp) => oncerpc_core::TraceContext::parse(&tp, text(meta.and_then(|m| m.tracestate)).as_deref()),
        None => session.trace.clone(),
    };
    let meta = RequestMeta {
        trace,
        idempotency_key: key,
        force_retry,
        correlation_id: id.text().map(|t| Arc::from(&*t)),
        progress,
        key_headers: session.key_headers.clone(),
        grant: session.grant.clone(),
        subject: session.subject.clone(),
        ..RequestMeta::of_tenant(session.tenant.clone())
    };
    let mut meta = meta;
    let mut unanswered = None;
    // 2026-07-28: a tool that asks, for a client that declares elicitation, answers from the
    // call's inputResponses or asks with an input_required result.
    if tool.tool().asks
        && session.version.is_some_and(|v| crate::meta::STATELESS_VERSIONS.contains(&v))
        && crate::elicit::declared(params.meta.as_ref().and_then(|m| m.client_capabilities))
    {
        let responses = match params.input_responses.map(|r| serde_json::from_str::<Value>(r.get())) {
            None | Some(Ok(Value::Null)) => serde_json::Map::new(),
            Some(Ok(Value::Object(r))) => r,
            Some(_) => return Err(RpcError::invalid_params("inputResponses must be an object")),
        };
        let slot = crate::elicit::Unanswered::default();
        meta.ask = Some(crate::elicit::stateless_asker(responses, slot.clone()));
        unanswered = Some(slot);
    }
    let name = tool.tool().method.clone();
    let task = params.task.map(RawValue::to_owned);
    Ok(Prepared { name, tool, arguments, meta, task, related, refused, unanswered })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(params: &str) -> Result<CallParams<'_>, RpcError> {
        let p: RawParams<'_> = serde_json::from_str(params).expect("params read");
        CallParams::new(p.name, p.arguments, p.meta)
    }

    #[test]
    fn meta_is_read_with_the_other_members_and_a_non_object_is_none() {
        let call = read(
            r#"{"name":"add","_meta":{"progressToken":7,"io.oncerpc/idempotency-key":"k-1","x":[1,{"y":2}]},"arguments":{"a":1}}"#,
        )
        .unwrap();
        let meta = call.meta.expect("an object _meta");
        assert_eq!(meta.progress_token.map(RawValue::get), Some("7"));
        assert_eq!(meta.key.map(RawValue::get), Some(r#""k-1""#));
        assert_eq!(call.arguments.map(RawValue::get), Some(r#"{"a":1}"#));
        for other in
            [r#"{"_meta":[1,[2]]}"#, r#"{"_meta":"x"}"#, r#"{"_meta":null}"#, r#"{"_meta":1.5}"#, r#"{}"#]
        {
            assert!(read(other).unwrap().meta.is_none(), "{other}");
        }
        let dup = serde_json::from_str::<RawParams<'_>>(
            r#"{"_meta":{"progressToken":1,"progressToken":2},"name":"add"}"#,
        );
        let e = dup.err().expect("refused").to_string();
        assert!(e.contains("invalid _meta") && e.contains("duplicate"), "{e}");
    }
}
