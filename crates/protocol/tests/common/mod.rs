//! Helpers shared by the protocol's integration tests.
#![allow(dead_code, unused_imports)]

use oncerpc_protocol::{
    Entry, ErrorCode, Id, MAX_DEPTH, Message, Outcome, RawValue, Request, RpcError, error_body, parse,
    parse_str, write_error, write_outcome, write_result,
};

// ---------------------------------------------------------------------------------------------
// helpers

pub fn single(body: &str) -> Entry<'_> {
    match parse(body.as_bytes()) {
        Ok(Message::Single(e)) => e,
        Ok(Message::Batch(_)) => panic!("expected a single entry, got a batch: {body}"),
        Err(e) => panic!("expected a single entry, got a parse error {e}: {body}"),
    }
}

pub fn batch(body: &str) -> Vec<Entry<'_>> {
    match parse(body.as_bytes()) {
        Ok(Message::Batch(v)) => v,
        Ok(Message::Single(_)) => panic!("expected a batch, got a single entry: {body}"),
        Err(e) => panic!("expected a batch, got a parse error {e}: {body}"),
    }
}

#[track_caller]
pub fn valid<'a>(entry: Entry<'a>) -> Request<'a> {
    match entry {
        Entry::Valid(r) => r,
        Entry::Invalid { id, error } => panic!("expected a valid request, got {error} (id {id:?})"),
    }
}

/// The id (raw text) and the error of an invalid entry; asserts the error is -32600.
#[track_caller]
pub fn invalid<'a>(entry: Entry<'a>) -> (Option<&'a str>, RpcError) {
    match entry {
        Entry::Invalid { id, error } => {
            assert_eq!(error.code, ErrorCode::InvalidRequest, "{error}");
            assert_eq!(error.code.code(), -32600);
            (id.map(|i| i.raw()), error)
        }
        Entry::Valid(r) => panic!("expected an invalid entry, got {r:?}"),
    }
}

#[track_caller]
pub fn parse_err(body: &[u8]) -> RpcError {
    match parse(body) {
        Err(e) => {
            assert_eq!(e.code, ErrorCode::ParseError, "{e}");
            assert_eq!(e.code.code(), -32700);
            e
        }
        Ok(m) => panic!(
            "expected a parse error, got {} for {}",
            short(&format!("{m:?}")),
            short(&String::from_utf8_lossy(body))
        ),
    }
}

/// Deep-nesting bodies are megabytes long: keep failure messages readable.
pub fn short(s: &str) -> String {
    let n = s.chars().count();
    if n <= 160 {
        return s.to_owned();
    }
    let head: String = s.chars().take(80).collect();
    let tail: String = s.chars().skip(n - 60).collect();
    format!("{head}…({} bytes)…{tail}", s.len())
}

/// The id (owned) of a body that must be a single invalid entry.
#[track_caller]
pub fn invalid_id(body: &str) -> Option<String> {
    invalid(single(body)).0.map(str::to_owned)
}

pub fn id_of(body: &str) -> Id<'_> {
    valid(single(body)).id.expect("an id")
}

pub fn raw(json: &str) -> Box<RawValue> {
    RawValue::from_string(json.to_owned()).unwrap()
}
