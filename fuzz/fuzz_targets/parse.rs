//! Fuzz the JSON-RPC body parser: arbitrary bytes must never panic, overflow the stack or
//! break the error-code contract, and every response oncerpc would write for what was parsed
//! must be well-formed JSON that echoes the entry's id byte for byte.

#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use oncerpc_protocol::{
    Entry, ErrorCode, Message, RawValue, RpcError, error_body, parse, write_error, write_result,
};

fuzz_target!(|data: &[u8]| {
    let entries = match parse(data) {
        Err(e) => {
            assert_eq!(e.code, ErrorCode::ParseError);
            check(&error_body(&e), "null");
            return;
        }
        Ok(Message::Single(entry)) => vec![entry],
        Ok(Message::Batch(entries)) => entries,
    };
    let result = RawValue::from_string(r#"{"ok":true,"n":19}"#.to_owned()).unwrap();
    let mut batch = b"[".to_vec();
    for entry in &entries {
        let mut out = Vec::new();
        let id = match entry {
            Entry::Valid(req) => {
                // Params, when present, are an object or an array that a handler's own
                // serde_json parse never refuses for depth (numbers beyond f64 it may refuse).
                if let Some(p) = req.params {
                    assert!(matches!(p.get().as_bytes()[0], b'{' | b'['));
                    if let Err(e) = serde_json::from_str::<serde_json::Value>(p.get()) {
                        assert!(!e.to_string().contains("recursion limit"), "{e}");
                    }
                }
                write_result(&mut out, req.id, &result);
                check(&out, req.id.map_or("null", |i| i.raw()));
                out.clear();
                write_error(&mut out, req.id, &RpcError::method_not_found());
                req.id
            }
            Entry::Invalid { id, error } => {
                assert_eq!(error.code, ErrorCode::InvalidRequest);
                write_error(&mut out, *id, error);
                *id
            }
        };
        check(&out, id.map_or("null", |i| i.raw()));
        if batch.len() > 1 {
            batch.push(b',');
        }
        batch.extend_from_slice(&out);
    }
    batch.push(b']');
    let _: Vec<&RawValue> = serde_json::from_slice(&batch).expect("a batch response is a JSON array");
});

/// `out` is one JSON object whose `id` member is exactly `want`, with `result` xor `error`.
/// (Members are read as raw values: an id like `1e400` is valid JSON but not an `f64`.)
fn check(out: &[u8], want: &str) {
    let text = std::str::from_utf8(out).expect("responses are UTF-8");
    let members: BTreeMap<String, &RawValue> =
        serde_json::from_str(text).unwrap_or_else(|e| panic!("response is not a JSON object ({e}): {text}"));
    assert_eq!(members["jsonrpc"].get(), r#""2.0""#);
    assert_eq!(members["id"].get(), want, "{text}");
    assert!(members.contains_key("result") != members.contains_key("error"), "{text}");
}
