//! Flows (DESIGN §6): a configured method whose execution is a list of upstream HTTP steps.
//!
//! Step 1 is `POST`ed the params (without oncerpc's reserved members); each next step is
//! `POST`ed the previous step's JSON output. The result is the last step's output, or the
//! `return_step`'s. A non-2xx answer, a refused connection or a body that is not JSON fails
//! the execution with `-32006 Upstream failed` (the method's deadline gives `-32005`).
//!
//! Every upstream call carries `X-Correlation-Id` and, for keyed executions, an
//! `X-Idempotency-Key` derived from (tenant, method, key, step) — see [`upstream_key`] — so
//! an upstream can deduplicate a step that a take-over re-executes.

use std::sync::Arc;

use oncerpc_core::{BoxFuture, Context, Handler, HandlerResult, RESERVED_PARAMS};
use oncerpc_protocol::{ErrorCode, RawValue, RpcError};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::config::StepConfig;

/// Most bytes of an upstream error body quoted in `error.data`.
const QUOTE_LIMIT: usize = 512;

/// A configured flow.
pub struct Flow {
    name: String,
    steps: Vec<StepConfig>,
    client: reqwest::Client,
}

impl Flow {
    pub fn new(name: &str, steps: Vec<StepConfig>, client: reqwest::Client) -> Flow {
        Flow { name: name.to_owned(), steps, client }
    }

    async fn run(&self, ctx: Context, params: Option<&RawValue>) -> HandlerResult {
        let mut input = first_input(params)?;
        let mut chosen: Option<String> = None;
        for step in &self.steps {
            let mut req = self
                .client
                .post(&step.url)
                .header("content-type", "application/json")
                .header("x-correlation-id", &*ctx.correlation_id)
                .body(input.clone());
            if let Some(key) = &ctx.idempotency_key {
                req = req.header("x-idempotency-key", upstream_key(&ctx.tenant, &self.name, key, &step.name));
            }
            let resp = req.send().await.map_err(|e| {
                tracing::warn!(step = %step.name, error = %e, "upstream unreachable");
                upstream_failed(&step.name, json!({ "error": error_chain(&e) }))
            })?;
            let status = resp.status();
            let body = resp.bytes().await.map_err(|e| {
                upstream_failed(&step.name, json!({ "status": status.as_u16(), "error": error_chain(&e) }))
            })?;
            if !status.is_success() {
                let quote = String::from_utf8_lossy(&body[..body.len().min(QUOTE_LIMIT)]).into_owned();
                tracing::warn!(step = %step.name, status = status.as_u16(), "upstream answered with an error");
                return Err(upstream_failed(&step.name, json!({ "status": status.as_u16(), "body": quote })));
            }
            let output = if body.iter().all(u8::is_ascii_whitespace) {
                "null".to_owned()
            } else {
                match serde_json::from_slice::<&RawValue>(&body) {
                    Ok(raw) => raw.get().to_owned(),
                    Err(e) => {
                        return Err(upstream_failed(
                            &step.name,
                            json!({ "status": status.as_u16(), "error": format!("the answer is not JSON: {e}") }),
                        ));
                    }
                }
            };
            if ctx.return_step.as_deref() == Some(step.name.as_str()) {
                chosen = Some(output.clone());
            }
            input = output;
        }
        let result = chosen.unwrap_or(input);
        RawValue::from_string(result).map_err(|e| RpcError::internal(format_args!("flow result: {e}")))
    }
}

impl Handler for Flow {
    fn call<'a>(&'a self, ctx: Context, params: Option<&'a RawValue>) -> BoxFuture<'a, HandlerResult> {
        Box::pin(self.run(ctx, params))
    }
}

/// The first step's body: the params without `idempotency_key` / `force_retry`; `{}` when
/// there are none. The reserved members are cut out of the text and every other member is
/// forwarded byte for byte: params never pass through a `Value`, whose `f64` would turn
/// `100000000000000000001` into `1e+20` — the upstream gets what was fingerprinted, whether
/// the key came in the params or in a header.
fn first_input(params: Option<&RawValue>) -> Result<String, RpcError> {
    let Some(p) = params else { return Ok("{}".into()) };
    if !p.get().starts_with('{') {
        return Ok(p.get().to_owned());
    }
    oncerpc_core::idempotency::without_members(p.get(), &RESERVED_PARAMS).map(|s| s.into_owned())
}

/// The idempotency key an upstream step receives: the lowercase hex SHA-256 of
/// `tenant NUL method NUL key NUL step`. Stable for every execution of one (tenant, method,
/// key), different for each step, and revealing neither the tenant nor the client's key.
pub fn upstream_key(tenant: &str, method: &str, key: &str, step: &str) -> String {
    let mut h = Sha256::new();
    for part in [tenant, method, key, step] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

fn upstream_failed(step: &str, mut data: serde_json::Value) -> RpcError {
    data["step"] = json!(step);
    RpcError::new(ErrorCode::UpstreamFailed).data(data)
}

/// `reqwest` hides the cause ("connection refused") in its source chain.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    out
}

/// Shared by every flow of an app: one connection pool.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_idle_timeout(std::time::Duration::from_secs(90))
        .connect_timeout(std::time::Duration::from_secs(5))
        .build()
        .expect("an HTTP client without TLS always builds")
}

/// Register every `[[methods]]` flow.
pub fn register_flows(
    registry: &mut oncerpc_core::Registry,
    config: &crate::Config,
    client: &reqwest::Client,
) -> Result<(), crate::ConfigError> {
    for m in &config.methods {
        let flow = Flow::new(&m.name, m.steps.clone(), client.clone());
        registry
            .register_arc(&m.name, crate::method_spec(config, m), Arc::new(flow))
            .map_err(|e| crate::ConfigError::Invalid(format!("methods.{}: {e}", m.name)))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_keys_differ_per_step_tenant_and_key_and_are_stable() {
        let a = upstream_key("acme", "orders.create", "k-1", "reserve");
        assert_eq!(a, upstream_key("acme", "orders.create", "k-1", "reserve"));
        assert_eq!(a.len(), 64);
        for other in [
            upstream_key("acme", "orders.create", "k-1", "confirm"),
            upstream_key("beta", "orders.create", "k-1", "reserve"),
            upstream_key("acme", "orders.create", "k-2", "reserve"),
            upstream_key("acme", "orders.cancel", "k-1", "reserve"),
            // NUL separators: no ambiguity between ("ab","c") and ("a","bc").
            upstream_key("acm", "eorders.create", "k-1", "reserve"),
        ] {
            assert_ne!(a, other);
        }
    }

    #[test]
    fn the_first_step_gets_the_params_without_reserved_members() {
        let p = RawValue::from_string(r#"{"sku":"A","idempotency_key":"k-1","force_retry":true}"#.into())
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&first_input(Some(&p)).unwrap()).unwrap();
        assert_eq!(v, json!({"sku":"A"}));
        let p = RawValue::from_string(r#"{"b":1,  "a":2}"#.into()).unwrap();
        assert_eq!(
            first_input(Some(&p)).unwrap(),
            r#"{"b":1,  "a":2}"#,
            "untouched when nothing is reserved"
        );
        assert_eq!(first_input(None).unwrap(), "{}");
    }
}
