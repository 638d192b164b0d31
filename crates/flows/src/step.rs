//! What a step is sent and what its answer means: the first step's body, how the journal
//! records a step (its identity), an MCP tool's result as a step's output, and how much of an
//! upstream's text a log line or an error quotes.

use oncerpc_core::RESERVED_PARAMS;
use oncerpc_core::journal::StepDef;
use oncerpc_protocol::{RawValue, RpcError};

use crate::config::StepConfig;

/// Most bytes of an upstream error body quoted in `error.data` (dev mode) and in the log.
pub(crate) const QUOTE_LIMIT: usize = 512;

/// A bounded quote for the log: at most [`QUOTE_LIMIT`] bytes, control characters escaped,
/// so an upstream cannot forge log lines.
pub(crate) fn log_quote(text: &str) -> String {
    let mut end = text.len().min(QUOTE_LIMIT);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out: String = text[..end].escape_debug().collect();
    if end < text.len() {
        out.push('…');
    }
    out
}

/// The first step's body: the params without `idempotency_key` / `force_retry`; `{}` when
/// there are none. The reserved members are cut out of the text and every other member is
/// forwarded byte for byte: params never pass through a `Value`, whose `f64` would turn
/// `100000000000000000001` into `1e+20` — the upstream gets what was fingerprinted, whether
/// the key came in the params or in a header.
pub(crate) fn first_input(params: Option<&RawValue>) -> Result<String, RpcError> {
    let Some(p) = params else { return Ok("{}".into()) };
    if !p.get().starts_with('{') {
        return Ok(p.get().to_owned());
    }
    oncerpc_core::idempotency::without_members(p.get(), &RESERVED_PARAMS).map(|s| s.into_owned())
}

/// What the journal records a step as (SPEC §14): its name and whether it is an HTTP step or
/// an MCP tool step. Where it is sent — URL, upstream, headers, timeouts — is deployment
/// detail: replicas that send one step to different URLs (regional endpoints, a backend moved
/// by a deploy) resume each other's executions. Journals of earlier releases named the URL
/// (and the upstream and tool) too; those entries are still accepted while they match.
pub(crate) fn step_def(step: &StepConfig) -> StepDef {
    if step.ask.is_some() {
        return StepDef::new(&step.name, &["ask"]);
    }
    match &step.mcp {
        Some(m) => {
            StepDef::new(&step.name, &["mcp"]).journaled_before_as(&[&step.url, "mcp", &m.upstream, &m.tool])
        }
        None => StepDef::new(&step.name, &["http"]).journaled_before_as(&[&step.url]),
    }
}

/// A step's output from the upstream's `CallToolResult`: its `structuredContent`, else its
/// first text parsed as JSON, else that text as a JSON string.
pub fn step_output(result: &serde_json::Value) -> String {
    if let Some(s) = result.get("structuredContent").filter(|s| !s.is_null()) {
        return s.to_string();
    }
    let text = result["content"]
        .as_array()
        .and_then(|c| c.iter().find_map(|item| item["text"].as_str()))
        .unwrap_or_default();
    match serde_json::from_str::<&serde_json::value::RawValue>(text) {
        Ok(raw) => raw.get().to_owned(),
        Err(_) => serde_json::Value::String(text.to_owned()).to_string(),
    }
}

/// The request of one attempt of `step` with `input`, and the header its step key goes in: a
/// built request ([`StepRequest`]), else a JSON `POST` of the input to the step's `url` with
/// the key in `X-Idempotency-Key`.
pub(crate) fn start<'s>(
    client: &reqwest::Client,
    step: &'s StepConfig,
    input: bytes::Bytes,
) -> Result<(reqwest::RequestBuilder, &'s str), String> {
    let Some(request) = &step.request else {
        let req = client.post(&step.url).header("content-type", "application/json").body(input);
        return Ok((req, "x-idempotency-key"));
    };
    let built = request.build(&input)?;
    let mut req = client.request(built.method, &built.url);
    for (name, value) in &built.headers {
        req = req.header(name.as_str(), value.as_str());
    }
    if let Some((body, content_type)) = built.body {
        req = req.header("content-type", content_type).body(body);
    }
    Ok((req, request.key_header()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_step_output_is_structured_content_else_the_text_as_json_else_the_text() {
        let structured = json!({"content":[{"type":"text","text":"x"}],"structuredContent":{"id":1}});
        assert_eq!(step_output(&structured), r#"{"id":1}"#);
        let json_text = json!({"content":[{"type":"text","text":"{\"id\": 2}"}]});
        assert_eq!(step_output(&json_text), r#"{"id": 2}"#);
        let plain = json!({"content":[{"type":"text","text":"sent"}]});
        assert_eq!(step_output(&plain), r#""sent""#);
    }

    #[test]
    fn log_quotes_are_bounded_and_escape_control_characters() {
        assert_eq!(log_quote("a\nfake=line\r\u{1b}[31m"), "a\\nfake=line\\r\\u{1b}[31m");
        let long = "é".repeat(QUOTE_LIMIT);
        let q = log_quote(&long);
        assert!(q.ends_with('…') && q.len() <= QUOTE_LIMIT + '…'.len_utf8(), "{}", q.len());
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
