//! JSON-RPC 2.0 request bodies and answers, as the client writes and reads them.

use std::collections::BTreeMap;
use std::time::Duration;

use oncerpc_protocol::{ErrorCode, RawValue};
use serde_json::Value;

use crate::error::{Error, RpcFailure};
use crate::retry::Cause;
use crate::transport::{Failed, Reply};

/// One request object (`params` absent when `None`).
pub(crate) fn request(method: &str, params: Option<&Value>, id: &str) -> Value {
    let mut req = serde_json::json!({"jsonrpc": "2.0", "method": method, "id": id});
    if let Some(p) = params {
        req["params"] = p.clone();
    }
    req
}

/// Params with the reserved members (SPEC §3) put in: the key in `idempotency_key`, and
/// `force_retry: true`. Needs object params (or none).
pub(crate) fn with_reserved(params: Option<Value>, key: &str, force: bool) -> Result<Value, Error> {
    let mut obj = match params {
        None => serde_json::Map::new(),
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(Error::InvalidCall(
                "an idempotency key travels in the params here (stdio, batch entries): the params must be an object"
                    .into(),
            ));
        }
    };
    obj.insert("idempotency_key".into(), Value::String(key.to_owned()));
    if force {
        obj.insert("force_retry".into(), Value::Bool(true));
    }
    Ok(Value::Object(obj))
}

/// A response object's parts, read from its raw text (numbers in `result` kept exact).
pub(crate) struct Answer {
    pub id: Option<Box<RawValue>>,
    pub result: Result<Box<RawValue>, WireError>,
}

#[derive(Debug, Clone, serde::Deserialize)]
pub(crate) struct WireError {
    pub code: i32,
    pub message: String,
    #[serde(default)]
    pub data: Option<Value>,
}

/// Read one response object; `None` when it is not one.
pub(crate) fn answer(raw: &RawValue) -> Option<Answer> {
    let mut members: BTreeMap<String, Box<RawValue>> = serde_json::from_str(raw.get()).ok()?;
    let id = members.remove("id");
    let result = match (members.remove("result"), members.remove("error")) {
        (Some(r), None) => Ok(r),
        (None, Some(e)) => Err(serde_json::from_str::<WireError>(e.get()).ok()?),
        _ => return None,
    };
    Some(Answer { id, result })
}

/// The server's hint in an error: `data.retry_after_ms`.
pub(crate) fn data_hint(data: Option<&Value>) -> Option<Duration> {
    data?.get("retry_after_ms")?.as_u64().map(Duration::from_millis)
}

/// A JSON-RPC error read off the wire, as a failed attempt.
pub(crate) fn failed(e: WireError, reply: &Reply, key: Option<&str>) -> Failed {
    let code = ErrorCode::from_code(e.code);
    let hint = data_hint(e.data.as_ref()).or(reply.retry_after);
    let failure = RpcFailure {
        code,
        message: e.message,
        data: e.data,
        key: key.map(str::to_owned),
        status: reply.idempotency_status,
        correlation_id: reply.correlation_id.clone(),
        http_status: reply.http_status,
    };
    Failed { cause: Some(Cause::Code(code)), hint, error: Error::rpc_failure(failure) }
}

/// An answer to a single request: its result, or the failed attempt.
pub(crate) fn single(reply: &Reply, key: Option<&str>) -> Result<Box<RawValue>, Failed> {
    if reply.http_status == Some(401) {
        return Err(Failed::fatal(Error::Unauthorized));
    }
    let parsed = serde_json::from_slice::<&RawValue>(&reply.body).ok().and_then(answer);
    match parsed {
        Some(Answer { result: Ok(r), .. }) => Ok(r),
        Some(Answer { result: Err(e), .. }) => Err(failed(e, reply, key)),
        None => Err(not_an_answer(reply)),
    }
}

/// A body that is not the door's answer: retried when its status says "come back"
/// (a load balancer's `502/503/504`, a `429`), else final.
pub(crate) fn not_an_answer(reply: &Reply) -> Failed {
    let cause = match reply.http_status {
        Some(200) | None => None,
        Some(s) => Some(Cause::Status(s)),
    };
    Failed { cause, hint: reply.retry_after, error: reply.unexpected() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(status: u16, content_type: &str, body: &str) -> Reply {
        Reply {
            http_status: Some(status),
            content_type: content_type.into(),
            body: body.as_bytes().to_vec(),
            ..Reply::default()
        }
    }

    #[test]
    fn a_result_keeps_its_exact_text() {
        let r = single(
            &reply(200, "application/json", r#"{"jsonrpc":"2.0","result":100000000000000000001,"id":"1"}"#),
            None,
        );
        assert_eq!(r.unwrap().get(), "100000000000000000001");
        let r = single(&reply(200, "application/json", r#"{"jsonrpc":"2.0","result":null,"id":"1"}"#), None);
        assert_eq!(r.unwrap().get(), "null");
    }

    #[test]
    fn an_error_carries_its_code_data_and_hint() {
        let body = r#"{"jsonrpc":"2.0","error":{"code":-32001,"message":"Request in progress","data":{"retry_after_ms":250}},"id":"1"}"#;
        let f = single(&reply(200, "application/json", body), Some("k-1")).unwrap_err();
        assert_eq!(f.cause, Some(Cause::Code(ErrorCode::RequestInProgress)));
        assert_eq!(f.hint, Some(Duration::from_millis(250)));
        let rpc = f.error.rpc().unwrap();
        assert_eq!(rpc.key.as_deref(), Some("k-1"));
        assert_eq!(rpc.data, Some(serde_json::json!({"retry_after_ms": 250})));
    }

    #[test]
    fn a_non_json_answer_names_its_status_and_content_type() {
        let f = single(&reply(502, "text/html", "<html>bad gateway</html>"), None).unwrap_err();
        assert_eq!(f.cause, Some(Cause::Status(502)));
        let text = f.error.to_string();
        assert!(text.contains("502") && text.contains("text/html"), "{text}");
        let f = single(&reply(200, "text/plain", "hello"), None).unwrap_err();
        assert_eq!(f.cause, None);
        assert!(matches!(f.error, Error::Unexpected { status: 200, .. }));
    }

    #[test]
    fn malformed_answers_are_errors_not_panics() {
        for body in
            ["", "[]", "{}", "null", r#"{"result":1,"error":{}}"#, r#"{"error":{"code":"x"}}"#, "\u{0}"]
        {
            assert!(single(&reply(200, "application/json", body), None).is_err(), "{body:?}");
        }
        assert!(matches!(
            single(&reply(401, "application/json", "{}"), None).unwrap_err().error,
            Error::Unauthorized
        ));
    }

    #[test]
    fn reserved_members_need_object_params() {
        let p = with_reserved(Some(serde_json::json!({"by": 1})), "k-1", true).unwrap();
        assert_eq!(p, serde_json::json!({"by": 1, "idempotency_key": "k-1", "force_retry": true}));
        assert_eq!(with_reserved(None, "k-1", false).unwrap(), serde_json::json!({"idempotency_key": "k-1"}));
        assert!(with_reserved(Some(serde_json::json!([1])), "k-1", false).is_err());
    }
}
