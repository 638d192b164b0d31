//! Methods: what a handler is, what it is told (its [`Context`]), and how it is described.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use oncerpc_protocol::{RawValue, RpcError};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use crate::future::BoxFuture;

/// What a handler returns: a serialised result or an error object.
pub type HandlerResult = Result<Box<RawValue>, RpcError>;

/// `query` has no side effects; `command` has side effects (and, with a key, runs once).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Query,
    Command,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Query => "query",
            Kind::Command => "command",
        }
    }
}

/// How an idempotent execution was classified (SPEC §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdempotencyStatus {
    New = 0,
    Processing = 1,
    Duplicate = 2,
}

impl IdempotencyStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            IdempotencyStatus::New => "new",
            IdempotencyStatus::Processing => "processing",
            IdempotencyStatus::Duplicate => "duplicate",
        }
    }
}

/// What a handler is told about the request it serves.
#[derive(Debug, Clone)]
pub struct Context {
    /// The request id's text, or a generated id for notifications (SPEC §7).
    pub correlation_id: Arc<str>,
    /// The method being called.
    pub method: Arc<str>,
    /// The tenant the request was authenticated as (`"default"` when none are configured).
    pub tenant: Arc<str>,
    /// The idempotency key of a command, when it has one.
    pub idempotency_key: Option<Arc<str>>,
    /// The idempotency status of this execution (`new` for every execution that runs).
    pub idempotency_status: Option<IdempotencyStatus>,
    /// For flows: the step whose output is the result (`?return_step=` on the flows door).
    pub return_step: Option<Arc<str>>,
    /// The step journal of a keyed execution (SPEC §14): the steps an earlier owner
    /// finished, and where to store each new one. `None` without a key.
    pub journal: Option<crate::journal::StepJournal>,
    /// Where to report each finished step while the call runs (a door's client is waiting
    /// for it); `None` when nobody listens, and always for async events.
    pub progress: Option<crate::Progress>,
    /// The caller's W3C trace context: flows send each upstream step a `traceparent` within it.
    pub trace: Option<crate::TraceContext>,
    /// Fires when the caller cancels the call. Most handlers ignore it (a command runs on and
    /// stores its outcome); one whose work is another server's (an upstream MCP server's tool)
    /// tells that server and fails with an error the method does not store.
    pub cancel: Option<tokio_util::sync::CancellationToken>,
    /// Where the call's questions to its client go (a flow's `ask` step, MCP elicitation);
    /// `None`: the door cannot ask (and a method that asks was refused before it ran).
    pub ask: Option<crate::ask::Ask>,
}

/// A method implementation. Implement it directly for full control over raw params, or use
/// [`typed`] to get serde-deserialised params and a serialised result.
pub trait Handler: Send + Sync + 'static {
    fn call<'a>(&'a self, ctx: Context, params: Option<&'a RawValue>) -> BoxFuture<'a, HandlerResult>;
}

/// Registration data of a method (SPEC §2).
#[derive(Debug, Clone)]
pub struct MethodSpec {
    pub kind: Kind,
    pub notification_allowed: bool,
    pub params_schema: Option<serde_json::Value>,
    pub timeout: Duration,
    pub description: Option<String>,
    /// Webhooks (SPEC §15): where the idempotency key comes from when the request brings
    /// none. Commands only.
    pub key_from: Option<KeySource>,
    /// Webhooks (SPEC §15): JSON pointers into the params; when set, only their values form
    /// the fingerprint. Commands only.
    pub fingerprint_from: Option<Vec<String>>,
    /// Served only to requests whose signature the front door verified (the flows door of a
    /// method with `verify`); `/rpc` and stdio refuse it with `-32600`.
    pub signed: bool,
    /// How the MCP door shows the method as a tool.
    pub tool: ToolOptions,
    /// A call without a key gets one derived from its canonical params, so an identical call
    /// (same tenant, method and params) within this window is a duplicate (SPEC §16).
    /// Commands only.
    pub derive_key_window: Option<Duration>,
    /// A timeout (`-32005`) or upstream failure (`-32006`) of this command is not an outcome:
    /// its record is released instead of stored as failed, so a retry with the same key runs
    /// again. For handlers whose transport failures say nothing about whether the side effect
    /// happened and whose upstream has its own key (an MCP upstream's tools, SPEC §16b).
    pub transport_failures_unrecorded: bool,
    /// The scopes a caller must hold, all of them (SPEC §20); empty: any caller of the tenant.
    pub scopes: Vec<String>,
    /// The method asks its client questions while it runs (a flow with an `ask` step): only a
    /// door that can ask runs it (MCP, with a client that answers elicitation); every other
    /// door refuses it with `-32602` before anything is claimed or run.
    pub asks: bool,
}

/// How the MCP door shows a method as a tool (SPEC §16). The kind gives the rest of the
/// annotations (`readOnlyHint`, `idempotentHint`).
#[derive(Debug, Clone, Default)]
pub struct ToolOptions {
    /// Not a tool (`[[methods]] mcp = false`): `/rpc` and the other doors still serve it.
    pub hidden: bool,
    /// A human-readable name (`title`, and the `title` annotation).
    pub title: Option<String>,
    /// `destructiveHint`: the command may destroy or overwrite (absent: the client's default).
    pub destructive: Option<bool>,
    /// `openWorldHint`: the tool reaches outside oncerpc (flows: their upstreams).
    pub open_world: bool,
    /// `outputSchema`: the JSON Schema of the result (an object schema).
    pub output_schema: Option<serde_json::Value>,
    /// `tasks = "required"` (commands): over MCP `2026-07-28` the tool runs only as a task, so
    /// a call whose client does not declare the tasks extension is refused (`-32021`).
    pub task_required: bool,
    /// A method whose params are positional (an array): its tool takes them as this one
    /// argument, MCP arguments being an object (`{"values": [1, 2, 4]}` → `[1, 2, 4]`). Its
    /// `inputSchema` is an object with this property, whose schema is the params schema.
    pub array_argument: Option<String>,
}

/// Where a derived idempotency key is read (SPEC §15).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// A JSON pointer (RFC 6901) into the params (`key_from = "/id"`).
    Pointer(String),
    /// A request header, its name in lower case (`key_header = "webhook-id"`).
    Header(String),
}

/// The default handler deadline (SPEC §2).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

impl MethodSpec {
    fn new(kind: Kind) -> Self {
        MethodSpec {
            kind,
            notification_allowed: false,
            params_schema: None,
            timeout: DEFAULT_TIMEOUT,
            description: None,
            key_from: None,
            fingerprint_from: None,
            signed: false,
            tool: ToolOptions::default(),
            derive_key_window: None,
            transport_failures_unrecorded: false,
            scopes: Vec::new(),
            asks: false,
        }
    }

    /// A method without side effects.
    pub fn query() -> Self {
        Self::new(Kind::Query)
    }

    /// A method with side effects.
    pub fn command() -> Self {
        Self::new(Kind::Command)
    }

    pub fn notification_allowed(mut self, allowed: bool) -> Self {
        self.notification_allowed = allowed;
        self
    }

    pub fn params_schema(mut self, schema: serde_json::Value) -> Self {
        self.params_schema = Some(schema);
        self
    }

    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The method asks its client questions while it runs ([`MethodSpec::asks`]).
    pub fn asks(mut self, asks: bool) -> Self {
        self.asks = asks;
        self
    }

    pub fn description(mut self, text: impl Into<String>) -> Self {
        self.description = Some(text.into());
        self
    }

    /// Derive the idempotency key from the params or a header when the request has none.
    pub fn key_from(mut self, source: KeySource) -> Self {
        self.key_from = Some(source);
        self
    }

    /// Fingerprint only the values at these JSON pointers.
    pub fn fingerprint_from(mut self, pointers: Vec<String>) -> Self {
        self.fingerprint_from = Some(pointers);
        self
    }

    /// Serve only requests whose signature the front door verified.
    pub fn signed(mut self, signed: bool) -> Self {
        self.signed = signed;
        self
    }
}

/// Build a [`Handler`] from an async function over typed params.
///
/// Params are deserialised with serde (absent params are presented as `null`, so `()` and
/// `Option<T>` accept them); a failure is `-32602` whose message names the failing field
/// (through `serde_path_to_error`). The result is serialised with serde_json.
pub fn typed<P, R, F, Fut>(f: F) -> impl Handler
where
    P: DeserializeOwned + Send + 'static,
    R: Serialize + Send + 'static,
    F: Fn(Context, P) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, RpcError>> + Send + 'static,
{
    Typed { f, _p: std::marker::PhantomData::<fn(P) -> R> }
}

struct Typed<F, P, R> {
    f: F,
    _p: std::marker::PhantomData<fn(P) -> R>,
}

impl<P, R, F, Fut> Handler for Typed<F, P, R>
where
    P: DeserializeOwned + Send + 'static,
    R: Serialize + Send + 'static,
    F: Fn(Context, P) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, RpcError>> + Send + 'static,
{
    fn call<'a>(&'a self, ctx: Context, params: Option<&'a RawValue>) -> BoxFuture<'a, HandlerResult> {
        Box::pin(async move {
            let p: P = decode_params(params)?;
            let r = (self.f)(ctx, p).await?;
            serde_json::value::to_raw_value(&r)
                .map_err(|e| RpcError::internal(format_args!("result not serialisable: {e}")))
        })
    }
}

/// Deserialise params into `P`; the `-32602` message names the failing field.
pub fn decode_params<P: DeserializeOwned>(params: Option<&RawValue>) -> Result<P, RpcError> {
    let text = params.map_or("null", |p| p.get());
    // Fast path: plain serde. Only a failure is decoded again, tracking the path for the
    // message (the tracking wrapper costs on every value).
    if let Ok(p) = serde_json::from_str(text) {
        return Ok(p);
    }
    let mut de = serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let message = if path == "." {
            format!("invalid params: {inner}")
        } else {
            format!("invalid params: {path}: {inner}")
        };
        RpcError::invalid_params(message).data(serde_json::json!({ "path": path }))
    })
}

/// A registered method.
pub(crate) struct Method {
    pub name: Arc<str>,
    pub spec: MethodSpec,
    pub validator: Option<jsonschema::Validator>,
    pub handler: Arc<dyn Handler>,
    /// Set once by the dispatcher that serves this registry.
    pub metrics: std::sync::OnceLock<crate::metrics::MethodMetrics>,
}
