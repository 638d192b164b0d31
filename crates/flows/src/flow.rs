//! Flows (SPEC §6): a configured method whose execution is a list of upstream HTTP steps.
//!
//! Step 1 is `POST`ed the params (without oncerpc's reserved members); each next step is
//! `POST`ed the previous step's JSON output. The result is the last step's output, or the
//! `return_step`'s. A non-2xx answer (a `3xx` too unless `[upstream] follow_redirects`), a
//! refused connection, an answer larger than `[upstream] max_response_bytes` or one that is not
//! JSON fails the execution with `-32006 Upstream failed` (the method's deadline gives
//! `-32005`). In production mode `error.data` keeps only `step` and `status`; the details go
//! to the log (SPEC §12).
//!
//! Every upstream call carries `X-Correlation-Id` and, for keyed executions, an
//! `X-Idempotency-Key` derived from (tenant, method, key, step) — see [`upstream_key`](oncerpc_core::idempotency::upstream_key) — so
//! an upstream can deduplicate a step that a take-over or a retry re-executes.
//!
//! A step with `retry = { attempts, … }` tries again after a transient failure (see
//! `retry.rs`), within the method's deadline; each attempt has `timeout_ms` if set, and is
//! counted in `oncerpc_step_attempts_total{method,step,outcome}`.
//!
//! Each finished step but the last is journaled with its name and the fingerprints of its
//! definition (name and URL) and of the flow's; a take-over resumes only while the finished
//! steps are still this flow's first steps (`oncerpc_core::journal::resume`), so a deploy in
//! between never skips a step or feeds a step another step's output.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use oncerpc_core::{BoxFuture, Context, Handler, HandlerResult};
use oncerpc_protocol::{ErrorCode, RawValue, RpcError};
use serde_json::json;
use tracing::Instrument;

use crate::answers::{flow_changed, not_started, upstream_failed};
pub use crate::attempts::StepAttempts;
use crate::body::{ReadError, read_capped, read_prefix};
use crate::config::{McpStep, StepConfig, UpstreamConfig};
use crate::oauth::{TokenPool, TokenSource};
use crate::retry::{self, Attempt};
use crate::step::{QUOTE_LIMIT, first_input, log_quote, step_def, step_output};
use oncerpc_core::journal::{JournalError, StepDef, StepStatus, StepView};

/// What every flow of an app shares besides the HTTP client: the `[upstream]` response cap
/// and whether clients may see upstream details (`mode`).
#[derive(Debug, Clone, Copy)]
pub struct UpstreamPolicy {
    /// A step answer larger than this fails the step (`-32006`); reading stops there.
    pub max_response_bytes: usize,
    /// `mode = "production"`: `error.data` of a failed step keeps only `step` and `status`;
    /// URLs, OS errors and upstream bodies go to the log only.
    pub production: bool,
}

impl Default for UpstreamPolicy {
    fn default() -> Self {
        UpstreamPolicy { max_response_bytes: UpstreamConfig::default().max_response_bytes, production: false }
    }
}

/// A configured flow.
pub struct Flow {
    name: String,
    steps: Vec<StepConfig>,
    /// Each step's name and definition fingerprint, and the flow's, as the journal records them.
    defs: Vec<StepDef>,
    fingerprint: String,
    client: reqwest::Client,
    policy: UpstreamPolicy,
    /// The method's time limit: no retry waits past it.
    timeout: Duration,
    attempts: StepAttempts,
    /// The MCP upstreams `mcp` steps call.
    mcp: Option<Arc<oncerpc_mcp_upstream::Upstreams>>,
    /// The OAuth clients of steps that have their own (`oauth`), by step name …
    step_tokens: std::collections::HashMap<String, Arc<TokenSource>>,
    /// … and of every other step (`[upstream.oauth]`).
    tokens: Option<Arc<TokenSource>>,
}

/// Why a step failed. The log always gets the detail; `error.data` only in dev mode.
enum Failure {
    /// No answer: the `reqwest` error chain (URL, OS error), and why the TLS handshake
    /// failed when it did.
    Unreachable(String, Option<&'static str>),
    /// The answer broke off while being read.
    Read(String),
    /// A non-2xx (a `3xx` too, when redirects are not followed): the start of its body.
    Status(Vec<u8>),
    /// A `4xx` of a step whose request is built ([`StepConfig::request`], an API's own
    /// operation): the API's answer to the caller's request, given to the caller in both
    /// modes under `data.body` (JSON when it is).
    Rejected(Vec<u8>),
    /// The answer is larger than `max_response_bytes`.
    TooLarge(usize),
    /// The answer is not JSON.
    NotJson(String),
    /// The attempt's own `timeout_ms` ran out.
    Timeout(u64),
    /// An `mcp` step: the upstream could not be called, or its tool answered an error.
    Mcp(String),
}

impl Flow {
    pub fn new(
        name: &str,
        steps: Vec<StepConfig>,
        client: reqwest::Client,
        policy: UpstreamPolicy,
        timeout: Duration,
        attempts: StepAttempts,
    ) -> Flow {
        let defs: Vec<StepDef> = steps.iter().map(step_def).collect();
        let fingerprint = oncerpc_core::journal::flow_fingerprint(&defs);
        let step_tokens = steps
            .iter()
            .filter_map(|s| {
                let oauth = s.oauth.clone()?;
                Some((s.name.clone(), Arc::new(TokenSource::new(oauth, client.clone()))))
            })
            .collect();
        Flow {
            name: name.to_owned(),
            steps,
            defs,
            fingerprint,
            client,
            policy,
            timeout,
            attempts,
            mcp: None,
            step_tokens,
            tokens: None,
        }
    }

    /// The OAuth client (`[upstream.oauth]`) of the steps that have none of their own: one
    /// [`TokenSource`] shared by every flow of an app, so a token is fetched once for all.
    pub fn with_tokens(mut self, tokens: Option<Arc<TokenSource>>) -> Flow {
        self.tokens = tokens;
        self
    }

    /// The steps' own OAuth clients (`oauth`) taken from `pool`: a step whose client equals
    /// another flow's step's (every operation of one `[[openapi]]` document) shares its token.
    pub fn with_token_pool(mut self, pool: &TokenPool) -> Flow {
        for s in &self.steps {
            if let Some(oauth) = &s.oauth {
                self.step_tokens.insert(s.name.clone(), pool.source(oauth, &self.client));
            }
        }
        self
    }

    /// The MCP upstreams its `mcp` steps call.
    pub fn with_mcp(mut self, upstreams: Option<Arc<oncerpc_mcp_upstream::Upstreams>>) -> Flow {
        self.mcp = upstreams;
        self
    }

    async fn run(&self, ctx: Context, params: Option<&RawValue>) -> HandlerResult {
        let deadline = deadline_after(self.timeout);
        let mut input = first_input(params)?;
        let mut resumed = self.resumed(&ctx).await?.into_iter();
        let mut chosen: Option<String> = None;
        let last = self.steps.len() - 1;
        for (n, step) in self.steps.iter().enumerate() {
            let (output, resumed) = match resumed.next() {
                Some(stored) => (stored, true),
                None => {
                    let result = self.run_step(&ctx, n, n == last, step, input, deadline).await;
                    self.report(&ctx, n, result.is_ok(), false);
                    (result?, false)
                }
            };
            if resumed {
                self.report(&ctx, n, true, true);
            }
            if ctx.return_step.as_deref() == Some(step.name.as_str()) {
                chosen = Some(output.clone());
            }
            input = output;
        }
        let result = chosen.unwrap_or(input);
        RawValue::from_string(result).map_err(|e| RpcError::internal(format_args!("flow result: {e}")))
    }

    /// Tell the waiting client (MCP progress) that step `n` finished.
    fn report(&self, ctx: &Context, n: usize, ok: bool, resumed: bool) {
        if let Some(progress) = &ctx.progress {
            progress.report(&oncerpc_core::StepProgress {
                step: &self.steps[n].name,
                done: n as u32 + 1,
                total: self.steps.len() as u32,
                ok,
                resumed,
            });
        }
    }

    /// The outputs of the steps an earlier owner of this execution finished (they are never
    /// called again), when they are still this flow's first steps; else the execution fails
    /// (`-32603`, its message says which step changed) and its step views keep only the
    /// finished steps. See `journal::resume`.
    async fn resumed(&self, ctx: &Context) -> Result<Vec<String>, RpcError> {
        let Some(journal) = &ctx.journal else { return Ok(Vec::new()) };
        let e = match journal.resume(&self.fingerprint, &self.defs) {
            Ok(outputs) => return Ok(outputs),
            Err(e) => e,
        };
        tracing::warn!(
            correlation_id = %ctx.correlation_id,
            method = %self.name,
            error = %e,
            "cannot resume the flow from its journal"
        );
        journal.keep_views(journal.resumed_steps()).await;
        Err(flow_changed(&e))
    }

    /// Step `n`'s answer, stored in the journal before the next step starts. The last step's
    /// output is stored by the completion itself.
    async fn run_step(
        &self,
        ctx: &Context,
        n: usize,
        last: bool,
        step: &StepConfig,
        input: String,
        deadline: Instant,
    ) -> Result<String, RpcError> {
        let index = n as u32;
        let started_at_ms = oncerpc_core::store::now_ms();
        let key = self.step_key(ctx, step);
        let view = |status, attempts, finished_at_ms| StepView {
            name: step.name.clone(),
            status,
            attempts,
            started_at_ms,
            finished_at_ms,
            key: key.clone(),
            output: None,
            error: None,
        };
        if let Some(journal) = &ctx.journal {
            journal.report(n, view(StepStatus::Running, 0, None)).await;
        }
        let (result, attempts) = match &step.ask {
            Some(ask) => (crate::ask::run(ctx, &step.name, ask).await, 1),
            None => self.call_step(ctx, step, input, deadline).await,
        };
        if let Some(journal) = &ctx.journal {
            let finished = Some(oncerpc_core::store::now_ms());
            let shown = match &result {
                Ok(output) => StepView {
                    output: Some(output.clone()),
                    ..view(StepStatus::Succeeded, attempts, finished)
                },
                Err(e) => StepView {
                    error: Some(e.message.to_string()),
                    ..view(StepStatus::Failed, attempts, finished)
                },
            };
            journal.report(n, shown).await;
        }
        let output = result?;
        if let (Some(journal), false) = (&ctx.journal, last) {
            match journal.record(index, &self.defs[n], &self.fingerprint, &output).await {
                Ok(()) => {}
                Err(JournalError::Fenced) => {
                    tracing::warn!(step = %step.name, "taken over during the flow: not running its next steps");
                    return Err(RpcError::new(ErrorCode::StoreUnavailable));
                }
                // Not fatal: after a take-over the step would run again, with its step key.
                Err(JournalError::Store(e)) => {
                    tracing::warn!(step = %step.name, error = %e, "could not store the step's output")
                }
            }
        }
        Ok(output)
    }

    /// `POST` one step, with its retries: its JSON output, and the attempts made.
    async fn call_step(
        &self,
        ctx: &Context,
        step: &StepConfig,
        input: String,
        deadline: Instant,
    ) -> (Result<String, RpcError>, u32) {
        let input = bytes::Bytes::from(input);
        // An attempt is only started with its whole `timeout_ms` left before the deadline.
        let budget = step.timeout_ms.map_or(Duration::ZERO, Duration::from_millis);
        if deadline.saturating_duration_since(Instant::now()) < budget {
            return (Err(not_started(step, deadline)), 0);
        }
        let mut attempt = 1;
        loop {
            // Each attempt is a span of its own when spans are exported (`[telemetry]`).
            let span = oncerpc_core::trace::step_span(&step.name, attempt);
            let attempting = async {
                // While the request is out, a deadline that fires says so (`step_in_flight`).
                let _sending = ctx.journal.as_ref().map(|j| j.sending(&step.name));
                match step.timeout_ms {
                    Some(ms) => tokio::time::timeout(
                        Duration::from_millis(ms),
                        self.attempt(ctx, step, input.clone()),
                    )
                    .await
                    .unwrap_or_else(|_| {
                        Err((self.fail(ctx, step, None, Failure::Timeout(ms)), Attempt::Transient(None)))
                    }),
                    None => self.attempt(ctx, step, input.clone()).await,
                }
            };
            let outcome =
                if span.is_disabled() { attempting.await } else { attempting.instrument(span.clone()).await };
            if outcome.is_err() {
                oncerpc_core::trace::set_error(&span);
            }
            let kind = match &outcome {
                Ok(_) => Attempt::Succeeded,
                Err((_, kind)) => *kind,
            };
            self.attempts.0.with_label_values(&[&self.name, &step.name, kind.label()]).inc();
            match outcome {
                Ok(output) => return (Ok(output), attempt),
                Err((e, Attempt::Transient(asked))) if attempt < step.retry.attempts => {
                    // The wait and the next attempt's whole `timeout_ms` must fit.
                    let left = deadline.saturating_duration_since(Instant::now()).saturating_sub(budget);
                    let Some(wait) = retry::next_wait(&step.retry, attempt, asked, retry::unit(), left)
                    else {
                        return (Err(e), attempt);
                    };
                    tokio::time::sleep(wait).await;
                    attempt += 1;
                }
                Err((e, _)) => return (Err(e), attempt),
            }
        }
    }

    /// The `X-Idempotency-Key` of a keyed execution's requests to `step`.
    fn step_key(&self, ctx: &Context, step: &StepConfig) -> Option<String> {
        let key = ctx.idempotency_key.as_ref()?;
        Some(oncerpc_core::idempotency::upstream_key(&ctx.tenant, &self.name, key, &step.name))
    }

    /// One attempt of a step: its JSON output, or its failure and whether another attempt
    /// may cure it.
    async fn attempt(
        &self,
        ctx: &Context,
        step: &StepConfig,
        input: bytes::Bytes,
    ) -> Result<String, (RpcError, Attempt)> {
        if let Some(mcp) = &step.mcp {
            return self.mcp_attempt(ctx, step, mcp, &input).await;
        }
        // oncerpc's own token for the upstream, if it needs one; a 401 fetches a new one, once.
        let source = self.step_tokens.get(&step.name).or(self.tokens.as_ref());
        let token = match source {
            Some(s) => Some(s.token().await.map_err(|e| self.no_token(ctx, step, &e))?),
            None => None,
        };
        let mut resp = self.send(ctx, step, input.clone(), token.as_deref()).await?;
        if resp.status() == reqwest::StatusCode::UNAUTHORIZED
            && let (Some(s), Some(t)) = (source, &token)
        {
            s.forget(t);
            let fresh = s.token().await.map_err(|e| self.no_token(ctx, step, &e))?;
            tracing::info!(step = %step.name, "upstream refused oncerpc's token: a new one was fetched");
            resp = self.send(ctx, step, input, Some(&fresh)).await?;
        }
        let status = resp.status();
        if !status.is_success() {
            let kind = if retry::transient_status(status.as_u16()) {
                let asked = resp
                    .headers()
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| retry::parse_retry_after(v, SystemTime::now()));
                Attempt::Transient(asked)
            } else {
                Attempt::Permanent
            };
            if step.request.is_some() && status.is_client_error() && kind == Attempt::Permanent {
                let limit = self.policy.max_response_bytes.min(REJECTED_LIMIT);
                let body = read_prefix(&mut resp, limit).await;
                return Err((self.fail(ctx, step, Some(status), Failure::Rejected(body)), kind));
            }
            // Only the start of an error body is ever read: it is quoted, never used.
            let body = read_prefix(&mut resp, QUOTE_LIMIT).await;
            return Err((self.fail(ctx, step, Some(status), Failure::Status(body)), kind));
        }
        self.answer(ctx, step, status, resp).await
    }

    /// The token for a step's upstream could not be had: the step fails, a retry may cure it.
    fn no_token(&self, ctx: &Context, step: &StepConfig, why: &str) -> (RpcError, Attempt) {
        let failure = Failure::Unreachable(format!("oncerpc's token for the upstream: {why}"), None);
        (self.fail(ctx, step, None, failure), Attempt::Transient(None))
    }

    /// Send one HTTP step request (with `token` as its Bearer credential).
    async fn send(
        &self,
        ctx: &Context,
        step: &StepConfig,
        input: bytes::Bytes,
        token: Option<&str>,
    ) -> Result<reqwest::Response, (RpcError, Attempt)> {
        let (req, key_header) = crate::step::start(&self.client, step, input)
            .map_err(|e| (RpcError::with_message(ErrorCode::InvalidParams, e), Attempt::Permanent))?;
        let mut req = req.header("x-correlation-id", &*ctx.correlation_id);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(key) = self.step_key(ctx, step) {
            req = req.header(key_header, key);
        }
        // W3C Trace Context: the step request is a span of the gateway's own, a child of the
        // caller's; its id is logged so the upstream's parent id leads back here. Exported
        // (`[telemetry]`), it is the step's exported span, in the request's trace.
        let exported = oncerpc_core::trace::export().and_then(|e| e.traceparent(&tracing::Span::current()));
        let traceparent = match (exported, &ctx.trace) {
            (Some(tp), _) => Some(tp),
            (None, Some(trace)) => Some(trace.child().0),
            (None, None) => None,
        };
        if let Some(traceparent) = traceparent {
            let span_id = traceparent.split('-').nth(2).unwrap_or_default();
            // The request's span carries the trace id.
            tracing::debug!(step = %step.name, span_id = %span_id, "upstream step request");
            req = req.header("traceparent", &traceparent);
            if let Some(state) = ctx.trace.as_ref().and_then(|t| t.state.as_ref()) {
                req = req.header("tracestate", state);
            }
        }
        req.send().await.map_err(|e| {
            let tls = crate::upstream::tls_reason(&e);
            // A refused or reset connection may be back; a certificate will not change.
            let kind = if tls.is_some() { Attempt::Permanent } else { Attempt::Transient(None) };
            (self.fail(ctx, step, None, Failure::Unreachable(oncerpc_core::error_chain(&e), tls)), kind)
        })
    }

    /// A 2xx answer's body as the step's output: JSON (`null` when empty), at most
    /// `max_response_bytes`.
    async fn answer(
        &self,
        ctx: &Context,
        step: &StepConfig,
        status: reqwest::StatusCode,
        mut resp: reqwest::Response,
    ) -> Result<String, (RpcError, Attempt)> {
        let max = self.policy.max_response_bytes;
        let body = read_capped(&mut resp, max).await.map_err(|e| match e {
            ReadError::TooLarge => {
                (self.fail(ctx, step, Some(status), Failure::TooLarge(max)), Attempt::Permanent)
            }
            ReadError::Io(e) => (
                self.fail(ctx, step, Some(status), Failure::Read(oncerpc_core::error_chain(&e))),
                Attempt::Transient(None),
            ),
        })?;
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok("null".to_owned());
        }
        match serde_json::from_slice::<&RawValue>(&body) {
            Ok(raw) => Ok(raw.get().to_owned()),
            Err(e) => Err((
                self.fail(ctx, step, Some(status), Failure::NotJson(format!("the answer is not JSON: {e}"))),
                Attempt::Permanent,
            )),
        }
    }

    /// One attempt of an `mcp` step: `tools/call` of the upstream's tool with the step's input
    /// as arguments and the step's key. The upstream down or slow is transient (`-32006`,
    /// `-32005`); an `isError` result fails the step.
    async fn mcp_attempt(
        &self,
        ctx: &Context,
        step: &StepConfig,
        mcp: &McpStep,
        input: &[u8],
    ) -> Result<String, (RpcError, Attempt)> {
        let permanent = |why: String| (self.fail(ctx, step, None, Failure::Mcp(why)), Attempt::Permanent);
        let Some(upstreams) = &self.mcp else { return Err(permanent("no MCP upstreams".into())) };
        let arguments = match serde_json::from_slice::<serde_json::Value>(input) {
            Ok(serde_json::Value::Object(o)) => o,
            _ => return Err(permanent("the step's input is not a JSON object (a tool's arguments)".into())),
        };
        let key = ctx
            .idempotency_key
            .as_ref()
            .map(|k| oncerpc_core::idempotency::upstream_key(&ctx.tenant, &self.name, k, &step.name));
        match upstreams.call(&mcp.upstream, &mcp.tool, arguments, key.as_deref()).await {
            Ok(result) if result["isError"] == json!(true) => {
                Err(permanent(format!("the tool answered an error: {}", step_output(&result))))
            }
            Ok(result) => Ok(step_output(&result)),
            Err(e) => Err((
                self.fail(ctx, step, None, Failure::Mcp(e.message.into_owned())),
                Attempt::Transient(None),
            )),
        }
    }

    /// Log a failed step with every detail and its correlation id, and build its `-32006`: `{step, status}` in production, plus the detail in dev.
    fn fail(
        &self,
        ctx: &Context,
        step: &StepConfig,
        status: Option<reqwest::StatusCode>,
        failure: Failure,
    ) -> RpcError {
        let status = status.map(|s| s.as_u16());
        let (member, detail, tls) = match failure {
            Failure::Unreachable(e, tls) => ("error", e, tls),
            Failure::Read(e) => ("error", e, None),
            Failure::NotJson(e) => ("error", e, None),
            Failure::Status(body) => ("body", String::from_utf8_lossy(&body).into_owned(), None),
            Failure::Rejected(body) => return self.rejected(ctx, step, status, &body),
            Failure::TooLarge(max) => ("reason", format!("response larger than {max} bytes"), None),
            Failure::Timeout(ms) => {
                ("reason", format!("no answer within the step's timeout_ms ({ms})"), None)
            }
            Failure::Mcp(e) => ("reason", e, None),
        };
        tracing::warn!(
            correlation_id = %ctx.correlation_id,
            step = %step.name,
            status,
            url = %step.url,
            mcp = step.mcp.as_ref().map(|m| tracing::field::display(format!("{}/{}", m.upstream, m.tool))),
            tls,
            detail = %log_quote(&detail),
            "upstream step failed"
        );
        let mut data = json!({});
        if let Some(s) = status {
            data["status"] = json!(s);
        }
        if !self.policy.production {
            data[member] = json!(detail);
        }
        upstream_failed(&step.name, data)
    }
}

impl Flow {
    /// A `4xx` of a built request: the API's answer, for the caller (a model among them) to
    /// correct its call by. Not an outage: logged at `info`.
    fn rejected(&self, ctx: &Context, step: &StepConfig, status: Option<u16>, body: &[u8]) -> RpcError {
        let text = String::from_utf8_lossy(body);
        tracing::info!(correlation_id = %ctx.correlation_id, step = %step.name, status, url = %step.url, "the API refused the request (not sent again)");
        let message = format!(
            "The API refused the request (HTTP {}): {}. Sending the same arguments again gets the same \
             answer; to try again, correct the arguments and use a new idempotency key.",
            status.unwrap_or_default(),
            log_quote(&text)
        );
        let body = serde_json::from_str(&text).unwrap_or_else(|_| json!(text));
        let data = json!({ "step": step.name, "status": status, "body": body });
        RpcError::with_message(ErrorCode::UpstreamFailed, message).data(data)
    }
}

/// Most bytes of a refused request's answer (a `4xx` of a built request) given to the caller.
const REJECTED_LIMIT: usize = 64 * 1024;

/// `timeout` from now, or as far as the clock goes (a `timeout_ms` of centuries never
/// overflows an `Instant`).
fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .or_else(|| now.checked_add(Duration::from_secs(u64::from(u32::MAX))))
        .unwrap_or(now)
}

impl Handler for Flow {
    fn call<'a>(&'a self, ctx: Context, params: Option<&'a RawValue>) -> BoxFuture<'a, HandlerResult> {
        Box::pin(self.run(ctx, params))
    }
}
