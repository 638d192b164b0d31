//! The parser's nesting limit and byte-exact ids (SPEC §1).

mod common;

#[allow(unused_imports)]
use common::*;
#[allow(unused_imports)]
use oncerpc_protocol::{
    Entry, ErrorCode, Id, MAX_DEPTH, Message, Outcome, RawValue, Request, RpcError, error_body, parse,
    parse_str, write_error, write_outcome, write_result,
};

// ---------------------------------------------------------------------------------------------
// nesting

fn nested(open: &str, close: &str, n: usize, inner: &str) -> String {
    let mut s = String::with_capacity((open.len() + close.len()) * n + inner.len());
    for _ in 0..n {
        s.push_str(open);
    }
    s.push_str(inner);
    for _ in 0..n {
        s.push_str(close);
    }
    s
}

fn request_with(member: &str, value: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","method":"m",{member}:{value},"id":1}}"#)
}

#[test]
fn depth_limit_boundary_for_params() {
    assert_eq!(MAX_DEPTH, 128);
    // The request object is depth 1, so params may add MAX_DEPTH - 1 levels.
    let ok = request_with(r#""params""#, &nested("[", "]", MAX_DEPTH - 1, ""));
    let r = valid(single(&ok));
    assert_eq!(r.params.unwrap().get().len(), 2 * (MAX_DEPTH - 1));
    // ...and a handler's own serde_json parse of those params succeeds.
    serde_json::from_str::<serde_json::Value>(r.params.unwrap().get()).unwrap();

    let ok_obj = request_with(r#""params""#, &nested(r#"{"a":"#, "}", MAX_DEPTH - 1, "1"));
    valid(single(&ok_obj));

    let too_deep = request_with(r#""params""#, &nested("[", "]", MAX_DEPTH, ""));
    let e = parse_err(too_deep.as_bytes());
    assert!(e.data.unwrap().get().contains("nesting"));
    let too_deep_obj = request_with(r#""params""#, &nested(r#"{"a":"#, "}", MAX_DEPTH, "1"));
    parse_err(too_deep_obj.as_bytes());

    // Brackets inside strings do not count.
    let strings = request_with(r#""params""#, &format!(r#"["{}", "\"[[[", "\\"]"#, "[".repeat(1000)));
    valid(single(&strings));
}

#[test]
fn depth_limit_boundary_inside_a_batch() {
    // In a batch the entry object is depth 2.
    let entry = |n| request_with(r#""params""#, &nested("[", "]", n, "0"));
    let ok = format!("[{}]", entry(MAX_DEPTH - 2));
    assert_eq!(batch(&ok).len(), 1);
    parse_err(format!("[{}]", entry(MAX_DEPTH - 1)).as_bytes());
    // Nested arrays as entries count from the batch too.
    let ok = format!("[{}]", nested("[", "]", MAX_DEPTH - 1, ""));
    assert_eq!(invalid(batch(&ok).into_iter().next().unwrap()).0, None);
    parse_err(format!("[{}]", nested("[", "]", MAX_DEPTH, "")).as_bytes());
}

#[test]
fn depth_limit_applies_to_ids_unknown_members_method_and_jsonrpc() {
    // An id that is an array is invalid anyway, but a too-deep one must not be skipped blindly.
    let ok = request_with(r#""x""#, &nested("[", "]", MAX_DEPTH - 1, ""));
    valid(single(&ok));
    parse_err(request_with(r#""x""#, &nested("[", "]", MAX_DEPTH, "")).as_bytes());
    parse_err(
        format!(r#"{{"jsonrpc":"2.0","method":"m","id":{}}}"#, nested("[", "]", MAX_DEPTH, "")).as_bytes(),
    );
    // method and jsonrpc values are not strings then, but must not dodge the limit either.
    let at = |member: &str, n| {
        format!(r#"{{"jsonrpc":"2.0","method":"m",{member}:{},"id":1}}"#, nested("[", "]", n, ""))
    };
    for member in [r#""method""#, r#""jsonrpc""#] {
        assert_eq!(invalid_id(&at(member, MAX_DEPTH - 1)).as_deref(), Some("1"), "duplicate {member}");
        parse_err(at(member, MAX_DEPTH).as_bytes());
    }
    let id = invalid_id(&format!(
        r#"{{"jsonrpc":"2.0","method":{},"id":1}}"#,
        nested("[", "]", MAX_DEPTH - 1, "")
    ));
    assert_eq!(id.as_deref(), Some("1"));
    parse_err(
        format!(r#"{{"jsonrpc":"2.0","method":{},"id":1}}"#, nested("[", "]", MAX_DEPTH, "")).as_bytes(),
    );
}

const HUGE: usize = 200_000;

/// Runs `f` on a thread with a deliberately small stack: a recursive descent 200,000 levels
/// deep would overflow it immediately.
fn on_small_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new().stack_size(256 * 1024).spawn(f).unwrap().join().unwrap();
}

#[test]
fn huge_nesting_is_a_parse_error_not_a_crash() {
    on_small_stack(|| {
        let arrays = nested("[", "]", HUGE, "");
        let objects = nested(r#"{"a":"#, "}", HUGE, "1");
        let cases = [
            // params, ids, unknown members, method/jsonrpc values
            request_with(r#""params""#, &arrays),
            request_with(r#""params""#, &objects),
            format!(r#"{{"jsonrpc":"2.0","method":"m","id":{arrays}}}"#),
            format!(r#"{{"jsonrpc":"2.0","method":"m","id":{objects}}}"#),
            request_with(r#""unknown""#, &arrays),
            request_with(r#""unknown""#, &objects),
            format!(r#"{{"jsonrpc":"2.0","method":{arrays},"id":1}}"#),
            format!(r#"{{"jsonrpc":{objects},"method":"m","id":1}}"#),
            // batch entries and the body itself
            arrays.clone(),
            format!("[{arrays}]"),
            format!(r#"[{{"jsonrpc":"2.0","method":"m","id":1}},{arrays}]"#),
            format!("[{objects}]"),
            objects.clone(),
            // unterminated: must fail on syntax or depth, never crash
            "[".repeat(HUGE),
            r#"{"a":"#.repeat(HUGE),
            format!(r#"{{"jsonrpc":"2.0","method":"m","params":{}"#, "[".repeat(HUGE)),
        ];
        let failures: Vec<String> = cases
            .iter()
            .filter_map(|body| match parse(body.as_bytes()) {
                Err(e) if e.code == ErrorCode::ParseError => None,
                other => Some(format!("{} -> {}", short(body), short(&format!("{other:?}")))),
            })
            .collect();
        assert!(failures.is_empty(), "not parse errors:\n{}", failures.join("\n"));
    });
}

// ---------------------------------------------------------------------------------------------
// ids: byte-exact

#[test]
fn ids_are_byte_exact() {
    for id in [
        "1",
        "0",
        "-1",
        "1.0",
        "-0",
        "-0.0",
        "1e3",
        "1E3",
        "2E-5",
        "1e+3",
        "0.1e-0",
        "1e400",
        "-1e-400",
        "123456789012345678901234567890",
        "-123456789012345678901234567890",
        "12345678901234567890123",
        "18446744073709551616",
        "9007199254740993",
        "3.141592653589793238462643383279",
        r#""a\u0062""#,
        r#""ab""#,
        r#""""#,
        r#""\"quoted\" \\ \/ \b\f\n\r\t""#,
        r#""\u00e9 é \ud83d\ude00 😀""#,
        r#""\uD83D\uDE00""#,
        "null",
    ] {
        let body = format!(r#"{{"jsonrpc":"2.0","method":"m","id":{id}}}"#);
        assert_eq!(id_of(&body).raw(), id, "{body}");
        // The same with whitespace around the value and as a batch entry.
        let body = format!("{{\"id\" : \n{id}\t, \"jsonrpc\":\"2.0\",\"method\":\"m\"}}");
        assert_eq!(id_of(&body).raw(), id);
        let body = format!(r#"[{{"jsonrpc":"2.0","method":"m","id":{id}}}]"#);
        let r = valid(batch(&body).into_iter().next().unwrap());
        assert_eq!(r.id.unwrap().raw(), id);
    }
}

#[test]
fn ids_are_echoed_exactly_on_invalid_entries_too() {
    for id in ["1.0", "-0", "1e3", "123456789012345678901234567890", r#""a\u0062""#] {
        let body = format!(r#"{{"jsonrpc":"1.0","method":"m","id":{id}}}"#);
        assert_eq!(invalid(single(&body)).0, Some(id));
    }
}

#[test]
fn id_equality_is_byte_equality() {
    let a = id_of(r#"{"jsonrpc":"2.0","method":"m","id":1}"#);
    let b = id_of(r#"{"jsonrpc":"2.0","method":"m","id":1.0}"#);
    let c = id_of(r#"{"jsonrpc":"2.0","method":"m","id": 1}"#);
    assert_ne!(a, b);
    assert_eq!(a, c);
    let s1 = id_of(r#"{"jsonrpc":"2.0","method":"m","id":"ab"}"#);
    let s2 = id_of(r#"{"jsonrpc":"2.0","method":"m","id":"a\u0062"}"#);
    assert_ne!(s1, s2, "ids compare as received, not decoded");
    assert_eq!(format!("{b:?}"), "1.0");
    assert_eq!(b.as_raw_value().get(), "1.0");
}

#[test]
fn id_text_decodes_strings_and_keeps_numbers() {
    let text = |id: &str| {
        let body = format!(r#"{{"jsonrpc":"2.0","method":"m","id":{id}}}"#);
        id_of(&body).text().map(|t| t.into_owned())
    };
    assert_eq!(text(r#""a\u0062""#).as_deref(), Some("ab"));
    assert_eq!(text(r#""plain""#).as_deref(), Some("plain"));
    assert_eq!(text(r#""""#).as_deref(), Some(""));
    assert_eq!(text(r#""\"q\"\n""#).as_deref(), Some("\"q\"\n"));
    assert_eq!(text(r#""\ud83d\ude00""#).as_deref(), Some("😀"));
    assert_eq!(text("1.0").as_deref(), Some("1.0"));
    assert_eq!(text("-0").as_deref(), Some("-0"));
    assert_eq!(text("1e3").as_deref(), Some("1e3"));
    assert_eq!(text("123456789012345678901234567890").as_deref(), Some("123456789012345678901234567890"));
    assert_eq!(text("null"), None);
}

#[test]
fn lone_surrogate_in_a_string_id_is_kept_raw() {
    // serde_json only checks the shape of `\uXXXX` when skipping a raw value, so the id is
    // accepted and echoed byte for byte; it simply has no decoded text.
    let id = id_of(r#"{"jsonrpc":"2.0","method":"m","id":"\ud800"}"#);
    assert_eq!(id.raw(), r#""\ud800""#);
    assert_eq!(id.text(), None);
}
