//! The response writers and the error-code table (SPEC §1, §8).

mod common;

#[allow(unused_imports)]
use common::*;
#[allow(unused_imports)]
use oncerpc_protocol::{
    Entry, ErrorCode, Id, MAX_DEPTH, Message, Outcome, RawValue, Request, RpcError, error_body, parse,
    parse_str, write_error, write_outcome, write_result,
};

// ---------------------------------------------------------------------------------------------
// response writers

#[test]
fn write_result_is_byte_exact() {
    let body = r#"{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":1.0}"#;
    let r = valid(single(body));
    let mut out = Vec::new();
    write_result(&mut out, r.id, &raw("19"));
    assert_eq!(String::from_utf8(out).unwrap(), r#"{"jsonrpc":"2.0","result":19,"id":1.0}"#);

    for (id, want) in [
        ("-0", r#"{"jsonrpc":"2.0","result":19,"id":-0}"#),
        ("1e3", r#"{"jsonrpc":"2.0","result":19,"id":1e3}"#),
        (
            "123456789012345678901234567890",
            r#"{"jsonrpc":"2.0","result":19,"id":123456789012345678901234567890}"#,
        ),
        (r#""a\u0062""#, r#"{"jsonrpc":"2.0","result":19,"id":"a\u0062"}"#),
        ("null", r#"{"jsonrpc":"2.0","result":19,"id":null}"#),
    ] {
        let body = format!(r#"{{"jsonrpc":"2.0","method":"m","id":{id}}}"#);
        let mut out = Vec::new();
        write_result(&mut out, Some(id_of(&body)), &raw("19"));
        assert_eq!(String::from_utf8(out).unwrap(), want);
    }

    let mut out = Vec::new();
    write_result(&mut out, None, &raw(r#"{"a":[1,"x"]}"#));
    assert_eq!(String::from_utf8(out).unwrap(), r#"{"jsonrpc":"2.0","result":{"a":[1,"x"]},"id":null}"#);
}

#[test]
fn writers_append_to_the_buffer() {
    let mut out = b"[".to_vec();
    write_result(&mut out, None, &raw("1"));
    out.push(b',');
    write_error(&mut out, None, &RpcError::method_not_found());
    out.push(b']');
    assert_eq!(
        String::from_utf8(out).unwrap(),
        r#"[{"jsonrpc":"2.0","result":1,"id":null},{"jsonrpc":"2.0","error":{"code":-32601,"message":"Method not found"},"id":null}]"#
    );
}

#[test]
fn write_error_is_byte_exact() {
    let id = id_of(r#"{"jsonrpc":"2.0","method":"m","id":"a\u0062"}"#);
    let mut out = Vec::new();
    write_error(&mut out, Some(id), &RpcError::method_not_found());
    assert_eq!(
        String::from_utf8(out).unwrap(),
        r#"{"jsonrpc":"2.0","error":{"code":-32601,"message":"Method not found"},"id":"a\u0062"}"#
    );

    let mut out = Vec::new();
    let e = RpcError::invalid_params("bad \"x\"").data(serde_json::json!({"path":"x"}));
    write_error(&mut out, Some(id_of(r#"{"jsonrpc":"2.0","method":"m","id":7}"#)), &e);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        r#"{"jsonrpc":"2.0","error":{"code":-32602,"message":"bad \"x\"","data":{"path":"x"}},"id":7}"#
    );

    let body = error_body(&RpcError::new(ErrorCode::ParseError));
    assert_eq!(
        String::from_utf8(body).unwrap(),
        r#"{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"},"id":null}"#
    );
    let body = error_body(&RpcError::invalid_request("empty batch"));
    assert_eq!(
        String::from_utf8(body).unwrap(),
        r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request","data":"empty batch"},"id":null}"#
    );
}

#[test]
fn write_outcome_writes_one_of_result_or_error() {
    let id = id_of(r#"{"jsonrpc":"2.0","method":"m","id":2E-5}"#);
    let mut out = Vec::new();
    write_outcome(&mut out, Some(id), &Outcome::Result(raw("[true]")));
    assert_eq!(String::from_utf8(out).unwrap(), r#"{"jsonrpc":"2.0","result":[true],"id":2E-5}"#);

    let mut out = Vec::new();
    write_outcome(&mut out, Some(id), &Outcome::Error(RpcError::new(ErrorCode::Timeout)));
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text, r#"{"jsonrpc":"2.0","error":{"code":-32005,"message":"Timeout"},"id":2E-5}"#);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(v.get("result").is_none());

    assert!(!Outcome::Result(raw("1")).is_error());
    assert!(Outcome::Error(RpcError::new(ErrorCode::Timeout)).is_error());
    assert_eq!(Outcome::Result(raw(r#"{"a":1}"#)).body_json(), r#"{"a":1}"#);
    assert_eq!(
        Outcome::Error(RpcError::new(ErrorCode::Overloaded)).body_json(),
        r#"{"code":-32007,"message":"Overloaded"}"#
    );
    assert_eq!(Outcome::Result(raw("1")), Outcome::Result(raw("1")));
    assert_ne!(Outcome::Result(raw("1")), Outcome::Result(raw("1.0")));
    assert_ne!(Outcome::Result(raw("1")), Outcome::Error(RpcError::new(ErrorCode::Timeout)));
}

#[test]
fn an_invalid_entry_is_answered_with_its_own_id() {
    let Entry::Invalid { id, error } = single(r#"{"jsonrpc":"2.0","method":5,"id":1.0}"#) else { panic!() };
    let mut out = Vec::new();
    write_error(&mut out, id, &error);
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.starts_with(r#"{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request","data":"#)
    );
    assert!(text.ends_with(r#","id":1.0}"#), "{text}");
    serde_json::from_str::<serde_json::Value>(&text).unwrap();
}

// ---------------------------------------------------------------------------------------------
// RpcError and the code table

#[test]
fn rpc_error_json_round_trip() {
    let cases = [
        RpcError::new(ErrorCode::MethodNotFound),
        RpcError::with_message(ErrorCode::InvalidRequest, "Batch requests not supported"),
        RpcError::new(ErrorCode::RequestInProgress).data(serde_json::json!({"retry_after_ms": 250})),
        RpcError::invalid_params("invalid params: .a: expected \"u64\"\n\u{1F600}")
            .data(serde_json::json!({"path": ".a"})),
        RpcError::parse_error("EOF while parsing"),
        RpcError::internal("the handler panicked"),
        RpcError::with_message(ErrorCode::Application(-32099), "custom").data([1, 2, 3]),
        RpcError::with_message(ErrorCode::Application(42), "positive app code"),
        RpcError::with_message(ErrorCode::Application(i32::MIN), "min"),
    ];
    for e in cases {
        let json = e.to_json();
        let back = RpcError::from_json(json.get()).unwrap();
        assert_eq!(back, e, "{}", json.get());
        assert_eq!(back.to_json().get(), json.get(), "byte-identical after a round trip");
        // And it is an ordinary JSON object with the expected members.
        let v: serde_json::Value = serde_json::from_str(json.get()).unwrap();
        assert_eq!(v["code"], e.code.code());
        assert_eq!(v["message"], e.message.as_ref());
        assert_eq!(v.get("data").is_some(), e.data.is_some());
    }
}

#[test]
fn rpc_error_to_json_is_byte_exact() {
    assert_eq!(
        RpcError::new(ErrorCode::KeyReused).to_json().get(),
        r#"{"code":-32002,"message":"Idempotency key reused with different params"}"#
    );
    assert_eq!(
        RpcError::new(ErrorCode::RequestInProgress)
            .data(serde_json::json!({"retry_after_ms":5}))
            .to_json()
            .get(),
        r#"{"code":-32001,"message":"Request in progress","data":{"retry_after_ms":5}}"#
    );
    assert_eq!(
        RpcError::parse_error("x").to_json().get(),
        r#"{"code":-32700,"message":"Parse error","data":"x"}"#
    );
}

#[test]
fn rpc_error_from_json_accepts_stored_variants() {
    // Member order and whitespace do not matter; data is kept byte for byte.
    let e = RpcError::from_json(r#" { "data" : {"b":1, "a":2} , "message":"m", "code":-32603 } "#).unwrap();
    assert_eq!(e.code, ErrorCode::InternalError);
    assert_eq!(e.message, "m");
    assert_eq!(e.data.unwrap().get(), r#"{"b":1, "a":2}"#);
    // Missing required members are errors.
    assert!(RpcError::from_json(r#"{"message":"m"}"#).is_err());
    assert!(RpcError::from_json(r#"{"code":-32603}"#).is_err());
    assert!(RpcError::from_json(r#"{"code":"x","message":"m"}"#).is_err());
    assert!(RpcError::from_json("not json").is_err());
}

#[test]
fn rpc_error_display_and_http_status() {
    let e = RpcError::new(ErrorCode::Timeout).reason("slow");
    assert_eq!(e.to_string(), r#"-32005 Timeout ("slow")"#);
    assert_eq!(e.http_status(), 504);
    assert_eq!(ErrorCode::MethodNotFound.to_string(), "-32601 Method not found");
    assert_eq!(RpcError::from(ErrorCode::Overloaded), RpcError::new(ErrorCode::Overloaded));
}

#[test]
fn error_code_table_matches_design_section_8() {
    // (code, variant, HTTP status on the flows door) — SPEC §8, row by row.
    let design: [(i32, ErrorCode, u16); 21] = [
        (-32700, ErrorCode::ParseError, 400),
        (-32600, ErrorCode::InvalidRequest, 400),
        (-32601, ErrorCode::MethodNotFound, 404),
        (-32602, ErrorCode::InvalidParams, 400),
        (-32603, ErrorCode::InternalError, 500),
        (-32001, ErrorCode::RequestInProgress, 200),
        (-32002, ErrorCode::KeyReused, 422),
        (-32003, ErrorCode::ForceRetryRefused, 409),
        (-32004, ErrorCode::StoreUnavailable, 503),
        (-32005, ErrorCode::Timeout, 504),
        (-32006, ErrorCode::UpstreamFailed, 502),
        (-32007, ErrorCode::Overloaded, 503),
        (-32008, ErrorCode::RateLimited, 429),
        (-32009, ErrorCode::Cancelled, 409),
        (-32010, ErrorCode::Forbidden, 403),
        (-32011, ErrorCode::IdentityUnavailable, 503),
        (-32012, ErrorCode::Declined, 409),
        (-32013, ErrorCode::InputRequired, 409),
        (-32020, ErrorCode::HeaderMismatch, 400),
        (-32021, ErrorCode::MissingRequiredClientCapability, 400),
        (-32022, ErrorCode::UnsupportedProtocolVersion, 400),
    ];
    assert_eq!(ErrorCode::TABLE.len(), design.len());
    for (entry, (code, variant, status)) in ErrorCode::TABLE.into_iter().zip(design) {
        assert_eq!(entry, variant);
        assert_eq!(entry.code(), code);
        assert_eq!(ErrorCode::from_code(code), entry, "from_code({code})");
        assert_eq!(ErrorCode::from_code(entry.code()), entry);
        assert_eq!(entry.http_status(), status, "{entry}");
        assert_eq!(RpcError::new(entry).http_status(), status);
        assert!(!entry.message().is_empty());
    }
    let mut codes: Vec<i32> = ErrorCode::TABLE.iter().map(|c| c.code()).collect();
    codes.sort_unstable();
    codes.dedup();
    assert_eq!(codes.len(), ErrorCode::TABLE.len(), "codes are unique");
}

#[test]
fn spec_messages_are_the_spec_wording() {
    assert_eq!(ErrorCode::ParseError.message(), "Parse error");
    assert_eq!(ErrorCode::InvalidRequest.message(), "Invalid Request");
    assert_eq!(ErrorCode::MethodNotFound.message(), "Method not found");
    assert_eq!(ErrorCode::InvalidParams.message(), "Invalid params");
    assert_eq!(ErrorCode::InternalError.message(), "Internal error");
}

#[test]
fn unknown_codes_are_application_codes() {
    for code in [-32000, -32014, -32099, -32604, -32699, -32701, 0, 1, 42, i32::MIN, i32::MAX] {
        assert_eq!(ErrorCode::from_code(code), ErrorCode::Application(code));
        assert_eq!(ErrorCode::Application(code).code(), code);
        assert_eq!(ErrorCode::Application(code).http_status(), 500);
    }
}
