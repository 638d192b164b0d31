//! The demo methods of SPEC §10, registered by `oncerpc serve` on its embedded default so a
//! newcomer can see every behaviour with curl.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oncerpc_core::{Context, MethodSpec, Registry, RegistryError, typed};
use oncerpc_protocol::{ErrorCode, RpcError};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Number, json};

/// Shared demo state: one counter per tenant, flaky-failure counts per (tenant, key).
#[derive(Default)]
pub struct DemoState {
    counters: Mutex<HashMap<Arc<str>, i64>>,
    flaky: Mutex<HashMap<(Arc<str>, String), u32>>,
}

impl DemoState {
    /// How many times `demo.flaky` executed for (tenant, key).
    pub fn flaky_attempts(&self, tenant: &str, key: &str) -> u32 {
        let map = self.flaky.lock().expect("flaky lock");
        map.iter().find(|((t, k), _)| &**t == tenant && k == key).map_or(0, |(_, n)| *n)
    }

    /// The counter of a tenant (for tests and `counter.get`).
    pub fn counter(&self, tenant: &str) -> i64 {
        self.counters.lock().expect("counter lock").get(tenant).copied().unwrap_or(0)
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum SubtractParams {
    Positional(Number, Number),
    Named { minuend: Number, subtrahend: Number },
}

/// `add`'s params: an object, so it is also a natural MCP tool (`{"a": 1, "b": 2}`).
#[derive(Deserialize)]
struct AddParams {
    a: Number,
    b: Number,
}

#[derive(Deserialize)]
struct IncrementParams {
    #[serde(default = "one")]
    by: i64,
}

fn one() -> i64 {
    1
}

#[derive(Deserialize)]
struct SleepParams {
    ms: u64,
}

#[derive(Deserialize)]
struct FlakyParams {
    fail_times: u32,
    #[serde(default)]
    idempotency_key: Option<String>,
}

/// Register every demo method into `registry`.
pub fn register(
    registry: &mut Registry,
    state: Arc<DemoState>,
    timeout: Duration,
) -> Result<(), RegistryError> {
    let number = |text: &str| json!({ "type": "number", "description": text });
    registry.register(
        "subtract",
        MethodSpec::query()
            .timeout(timeout)
            .description("Subtracts subtrahend from minuend (spec example): [minuend, subtrahend] or {minuend, subtrahend}.")
            // By position or by name; its MCP tool takes the names (the object branch).
            .params_schema(json!({ "oneOf": [
                { "type": "array", "prefixItems": [{ "type": "number" }, { "type": "number" }],
                  "minItems": 2, "maxItems": 2 },
                { "type": "object", "required": ["minuend", "subtrahend"], "additionalProperties": false,
                  "properties": {
                      "minuend": number("The number to subtract from."),
                      "subtrahend": number("The number to subtract.") } }
            ] })),
        typed(|_ctx: Context, p: SubtractParams| async move {
            let (a, b) = match p {
                SubtractParams::Positional(a, b) => (a, b),
                SubtractParams::Named { minuend, subtrahend } => (minuend, subtrahend),
            };
            arith(&a, &b, i64::checked_sub, |x, y| x - y)
        }),
    )?;
    // Positional only (params are the numbers): its MCP tool takes them as `values`.
    let mut sum_spec = MethodSpec::query()
        .timeout(timeout)
        .description("The sum of an array of numbers (spec example): [1, 2, 4] → 7.")
        .params_schema(
            json!({ "type": "array", "items": { "type": "number" }, "description": "The numbers to add." }),
        );
    sum_spec.tool.array_argument = Some("values".into());
    registry.register("sum", sum_spec, typed(|_ctx: Context, p: Vec<Number>| async move { sum(&p) }))?;
    registry.register(
        "add",
        MethodSpec::query()
            .timeout(timeout)
            .description("Adds two numbers: {\"a\": 1, \"b\": 2} → 3. The smallest MCP tool to try.")
            .params_schema(json!({
                "type": "object",
                "properties": { "a": { "type": "number" }, "b": { "type": "number" } },
                "required": ["a", "b"]
            })),
        typed(|_ctx: Context, p: AddParams| async move { arith(&p.a, &p.b, i64::checked_add, |x, y| x + y) }),
    )?;
    registry.register(
        "get_data",
        MethodSpec::query().timeout(timeout).description("Spec example: returns [\"hello\", 5]."),
        typed(|_ctx: Context, _p: IgnoredAny| async move { Ok(json!(["hello", 5])) }),
    )?;
    let notification =
        |text: &str| MethodSpec::query().timeout(timeout).notification_allowed(true).description(text);
    registry.register(
        "update",
        notification("Spec example notification: accepted and logged."),
        typed(|_ctx: Context, _p: IgnoredAny| async move {
            tracing::info!("update received");
            Ok(())
        }),
    )?;
    registry.register(
        "notify_hello",
        notification("Spec example notification: logs hello."),
        typed(|_ctx: Context, _p: IgnoredAny| async move {
            tracing::info!("hello");
            Ok(())
        }),
    )?;
    registry.register(
        "notify_sum",
        notification("Spec example notification: logs the sum of its params."),
        typed(|_ctx: Context, p: Vec<Number>| async move {
            let total = sum(&p)?;
            tracing::info!(%total, "notify_sum");
            Ok(())
        }),
    )?;

    let st = state.clone();
    registry.register(
        "counter.increment",
        MethodSpec::command()
            .timeout(timeout)
            .description("Adds `by` (default 1) to the tenant's counter and returns the new total.")
            .params_schema(json!({
                "type": ["object", "null"],
                "properties": { "by": { "type": "integer", "description": "How much to add (default 1; negative subtracts)." } }
            })),
        typed(move |ctx: Context, p: Option<IncrementParams>| {
            let st = st.clone();
            async move {
                let by = p.map_or(1, |p| p.by);
                let mut counters = st.counters.lock().expect("counter lock");
                let total = counters.entry(ctx.tenant.clone()).or_insert(0);
                *total = total.checked_add(by).ok_or_else(|| {
                    RpcError::invalid_params("invalid params: by: the counter would overflow")
                })?;
                Ok(json!({ "total": *total }))
            }
        }),
    )?;
    let st = state.clone();
    registry.register(
        "counter.get",
        MethodSpec::query().timeout(timeout).description("The tenant's counter."),
        typed(move |ctx: Context, _p: IgnoredAny| {
            let total = st.counter(&ctx.tenant);
            async move { Ok(json!({ "total": total })) }
        }),
    )?;
    registry.register(
        "demo.sleep",
        MethodSpec::command()
            .timeout(timeout)
            .description("Sleeps `ms` milliseconds, then returns {\"slept_ms\": ms}. Shows `processing`.")
            .params_schema(json!({
                "type": "object",
                "required": ["ms"],
                "properties": { "ms": { "type": "integer", "minimum": 0, "description": "How long to sleep, in milliseconds." } }
            })),
        typed(|_ctx: Context, p: SleepParams| async move {
            tokio::time::sleep(Duration::from_millis(p.ms)).await;
            Ok(json!({ "slept_ms": p.ms }))
        }),
    )?;
    let st = state;
    registry.register(
        "demo.flaky",
        MethodSpec::command()
            .timeout(timeout)
            .description(
                "Fails its first `fail_times` executions per idempotency key (-32006), then succeeds. Shows `failed` and force retry.",
            )
            .params_schema(json!({
                "type": "object",
                "required": ["fail_times"],
                "properties": { "fail_times": {
                    "type": "integer", "minimum": 0, "maximum": u32::MAX,
                    "description": "How many executions under one idempotency key fail before one succeeds."
                } }
            })),
        typed(move |ctx: Context, p: FlakyParams| {
            let st = st.clone();
            async move {
                let key = ctx.idempotency_key.as_deref().map(str::to_owned).or(p.idempotency_key).unwrap_or_default();
                let attempt = {
                    let mut map = st.flaky.lock().expect("flaky lock");
                    let n = map.entry((ctx.tenant.clone(), key)).or_insert(0);
                    *n += 1;
                    *n
                };
                if attempt <= p.fail_times {
                    Err(RpcError::new(ErrorCode::UpstreamFailed)
                        .data(json!({ "attempt": attempt, "fail_times": p.fail_times })))
                } else {
                    Ok(json!({ "attempt": attempt, "ok": true }))
                }
            }
        }),
    )?;
    Ok(())
}

fn arith(
    a: &Number,
    b: &Number,
    int: fn(i64, i64) -> Option<i64>,
    float: fn(f64, f64) -> f64,
) -> Result<Number, RpcError> {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64())
        && let Some(r) = int(x, y)
    {
        return Ok(r.into());
    }
    let (x, y) = (a.as_f64().unwrap_or(f64::NAN), b.as_f64().unwrap_or(f64::NAN));
    Number::from_f64(float(x, y))
        .ok_or_else(|| RpcError::invalid_params("invalid params: result is not a finite number"))
}

fn sum(values: &[Number]) -> Result<Number, RpcError> {
    values.iter().try_fold(Number::from(0), |acc, v| arith(&acc, v, i64::checked_add, |x, y| x + y))
}
