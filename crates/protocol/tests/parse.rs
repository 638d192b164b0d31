//! Unit tests of the one-pass parser, the response writers and the error-code table
//! (SPEC §1, §8).

use oncerpc_protocol::{
    Entry, ErrorCode, Id, MAX_DEPTH, Message, Outcome, RawValue, Request, RpcError, error_body, parse,
    parse_str, write_error, write_outcome, write_result,
};

// ---------------------------------------------------------------------------------------------
// helpers

fn single(body: &str) -> Entry<'_> {
    match parse(body.as_bytes()) {
        Ok(Message::Single(e)) => e,
        Ok(Message::Batch(_)) => panic!("expected a single entry, got a batch: {body}"),
        Err(e) => panic!("expected a single entry, got a parse error {e}: {body}"),
    }
}

fn batch(body: &str) -> Vec<Entry<'_>> {
    match parse(body.as_bytes()) {
        Ok(Message::Batch(v)) => v,
        Ok(Message::Single(_)) => panic!("expected a batch, got a single entry: {body}"),
        Err(e) => panic!("expected a batch, got a parse error {e}: {body}"),
    }
}

#[track_caller]
fn valid<'a>(entry: Entry<'a>) -> Request<'a> {
    match entry {
        Entry::Valid(r) => r,
        Entry::Invalid { id, error } => panic!("expected a valid request, got {error} (id {id:?})"),
    }
}

/// The id (raw text) and the error of an invalid entry; asserts the error is -32600.
#[track_caller]
fn invalid<'a>(entry: Entry<'a>) -> (Option<&'a str>, RpcError) {
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
fn parse_err(body: &[u8]) -> RpcError {
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
fn short(s: &str) -> String {
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
fn invalid_id(body: &str) -> Option<String> {
    invalid(single(body)).0.map(str::to_owned)
}

fn id_of(body: &str) -> Id<'_> {
    valid(single(body)).id.expect("an id")
}

fn raw(json: &str) -> Box<RawValue> {
    RawValue::from_string(json.to_owned()).unwrap()
}

// ---------------------------------------------------------------------------------------------
// single requests

#[test]
fn single_valid_request() {
    let r = valid(single(r#"{"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":1}"#));
    assert_eq!(r.method, "subtract");
    assert_eq!(r.params.map(|p| p.get()), Some("[42,23]"));
    assert_eq!(r.id.map(|i| i.raw()), Some("1"));
    assert!(!r.is_notification());
}

#[test]
fn member_order_and_whitespace_do_not_matter() {
    let r = valid(single(
        " \n{ \"id\" :\t7 , \"params\" : { \"a\" : [ 1 , 2 ] } ,\"method\" : \"m\", \"jsonrpc\" : \"2.0\" } \r\n",
    ));
    assert_eq!(r.method, "m");
    // Raw slices start at the value and end with it: no surrounding whitespace.
    assert_eq!(r.id.unwrap().raw(), "7");
    assert_eq!(r.params.unwrap().get(), "{ \"a\" : [ 1 , 2 ] }");
}

#[test]
fn named_params_and_no_params() {
    let r = valid(single(r#"{"jsonrpc":"2.0","method":"m","params":{"x":1},"id":"a"}"#));
    assert_eq!(r.params.unwrap().get(), r#"{"x":1}"#);
    let r = valid(single(r#"{"jsonrpc":"2.0","method":"m","id":"a"}"#));
    assert!(r.params.is_none());
    // Empty containers are fine.
    let r = valid(single(r#"{"jsonrpc":"2.0","method":"m","params":[],"id":1}"#));
    assert_eq!(r.params.unwrap().get(), "[]");
    let r = valid(single(r#"{"jsonrpc":"2.0","method":"m","params":{},"id":1}"#));
    assert_eq!(r.params.unwrap().get(), "{}");
}

#[test]
fn unknown_members_are_ignored() {
    let r =
        valid(single(r#"{"jsonrpc":"2.0","method":"m","id":1,"extra":{"deep":[1,2,{"x":null}]},"z":true}"#));
    assert_eq!(r.method, "m");
    assert_eq!(r.id.unwrap().raw(), "1");
}

#[test]
fn empty_method_name_is_a_valid_shape() {
    // The registry decides (-32601); the wire shape is fine.
    let r = valid(single(r#"{"jsonrpc":"2.0","method":"","id":1}"#));
    assert_eq!(r.method, "");
}

#[test]
fn notification_vs_null_id() {
    let n = valid(single(r#"{"jsonrpc":"2.0","method":"update","params":[1,2]}"#));
    assert!(n.is_notification());
    assert!(n.id.is_none());

    let r = valid(single(r#"{"jsonrpc":"2.0","method":"update","params":[1,2],"id":null}"#));
    assert!(!r.is_notification());
    let id = r.id.expect("id null is a request");
    assert!(id.is_null());
    assert_eq!(id.raw(), "null");
    assert_eq!(id.text(), None);
}

#[test]
fn escaped_method_and_jsonrpc_are_decoded() {
    let r = valid(single(r#"{"jsonrpc":"2\u002e0","method":"a\u0062\n\"c\"","id":1}"#));
    assert_eq!(r.method, "ab\n\"c\"");
    let r = valid(single(r#"{"jsonrpc":"2.0","method":"héllo 🎉 \ud83d\ude00","id":1}"#));
    assert_eq!(r.method, "héllo 🎉 😀");
}

// ---------------------------------------------------------------------------------------------
// invalid shapes: -32600, id echoed when readable

#[test]
fn invalid_shapes_echo_a_readable_id() {
    let cases: &[(&str, &str)] = &[
        // jsonrpc
        (r#"{"method":"m","id":1}"#, "1"),
        (r#"{"jsonrpc":"1.0","method":"m","id":1}"#, "1"),
        (r#"{"jsonrpc":"2.0 ","method":"m","id":1}"#, "1"),
        (r#"{"jsonrpc":"","method":"m","id":1}"#, "1"),
        (r#"{"jsonrpc":2.0,"method":"m","id":1}"#, "1"),
        (r#"{"jsonrpc":2,"method":"m","id":1}"#, "1"),
        (r#"{"jsonrpc":null,"method":"m","id":1}"#, "1"),
        (r#"{"jsonrpc":true,"method":"m","id":1}"#, "1"),
        (r#"{"jsonrpc":["2.0"],"method":"m","id":1}"#, "1"),
        (r#"{"jsonrpc":{"v":"2.0"},"method":"m","id":1}"#, "1"),
        // method
        (r#"{"jsonrpc":"2.0","id":"abc"}"#, r#""abc""#),
        (r#"{"jsonrpc":"2.0","method":1,"id":"abc"}"#, r#""abc""#),
        (r#"{"jsonrpc":"2.0","method":null,"id":"abc"}"#, r#""abc""#),
        (r#"{"jsonrpc":"2.0","method":false,"id":"abc"}"#, r#""abc""#),
        (r#"{"jsonrpc":"2.0","method":["m"],"id":"abc"}"#, r#""abc""#),
        (r#"{"jsonrpc":"2.0","method":{"name":"m"},"id":"abc"}"#, r#""abc""#),
        // params
        (r#"{"jsonrpc":"2.0","method":"m","params":"x","id":1.5}"#, "1.5"),
        (r#"{"jsonrpc":"2.0","method":"m","params":1,"id":1.5}"#, "1.5"),
        (r#"{"jsonrpc":"2.0","method":"m","params":true,"id":1.5}"#, "1.5"),
        (r#"{"jsonrpc":"2.0","method":"m","params":null,"id":1.5}"#, "1.5"),
        // a null id is readable too: echoed as null
        (r#"{"jsonrpc":"2.0","method":7,"id":null}"#, "null"),
        // id first, then the defect
        (r#"{"id":-0,"jsonrpc":"2.0"}"#, "-0"),
    ];
    for (body, want) in cases {
        let (id, err) = invalid(single(body));
        assert_eq!(id, Some(*want), "id of {body}");
        assert!(err.data.is_some(), "a reason is attached for {body}");
    }
}

#[test]
fn invalid_shape_of_a_notification_has_no_id() {
    let (id, _) = invalid(single(r#"{"jsonrpc":"1.0","method":"m"}"#));
    assert_eq!(id, None);
    let (id, _) = invalid(single(r#"{}"#));
    assert_eq!(id, None);
}

#[test]
fn unreadable_ids_are_answered_with_null() {
    for bad in ["{}", r#"{"a":1}"#, "[]", "[1]", "true", "false"] {
        let body = format!(r#"{{"jsonrpc":"2.0","method":"m","id":{bad}}}"#);
        let (id, err) = invalid(single(&body));
        assert_eq!(id, None, "{body}");
        assert!(err.data.as_ref().unwrap().get().contains("\\\"id\\\" must be"), "{err}");
    }
    // A bad id wins over every other defect; still no id.
    let (id, _) = invalid(single(r#"{"jsonrpc":"1.0","method":1,"params":2,"id":[1]}"#));
    assert_eq!(id, None);
}

#[test]
fn non_object_bodies_are_invalid_requests_with_null_id() {
    for body in ["1", "-2.5e3", r#""a string""#, "null", "true", "false", "123456789012345678901234567890"] {
        let (id, _) = invalid(single(body));
        assert_eq!(id, None, "{body}");
    }
}

#[test]
fn invalid_error_messages_name_the_problem() {
    let reason = |body: &str| invalid(single(body)).1.data.unwrap().get().to_owned();
    assert!(reason(r#"{"method":"m","id":1}"#).contains("jsonrpc"));
    assert!(reason(r#"{"jsonrpc":"2.1","method":"m","id":1}"#).contains("2.0"));
    assert!(reason(r#"{"jsonrpc":"2.0","id":1}"#).contains("method"));
    assert!(reason(r#"{"jsonrpc":"2.0","method":"m","params":3,"id":1}"#).contains("params"));
    assert!(reason("7").contains("object"));
}

// ---------------------------------------------------------------------------------------------
// duplicate and escaped member names

#[test]
fn duplicate_id_is_invalid_and_echoes_no_id() {
    let (id, err) = invalid(single(r#"{"jsonrpc":"2.0","method":"m","id":1,"id":2}"#));
    assert_eq!(id, None);
    assert!(err.data.unwrap().get().contains("duplicate"));
    // Even the same value twice.
    let (id, _) = invalid(single(r#"{"jsonrpc":"2.0","method":"m","id":1,"id":1}"#));
    assert_eq!(id, None);
}

#[test]
fn other_duplicates_echo_the_id() {
    for body in [
        r#"{"jsonrpc":"2.0","jsonrpc":"2.0","method":"m","id":9}"#,
        r#"{"jsonrpc":"2.0","method":"m","method":"m","id":9}"#,
        r#"{"jsonrpc":"2.0","method":"m","params":[],"params":[],"id":9}"#,
        r#"{"jsonrpc":"2.0","method":"m","x":1,"x":2,"id":9}"#,
        r#"{"jsonrpc":"2.0","method":"m","x":1,"y":0,"x":1,"id":9}"#,
    ] {
        let (id, err) = invalid(single(body));
        assert_eq!(id, Some("9"), "{body}");
        assert!(err.data.unwrap().get().contains("duplicate"), "{body}");
    }
    // A duplicate in a notification: no id to echo.
    let (id, _) = invalid(single(r#"{"jsonrpc":"2.0","method":"m","method":"n"}"#));
    assert_eq!(id, None);
}

#[test]
fn duplicate_message_names_the_member() {
    let (_, err) = invalid(single(r#"{"jsonrpc":"2.0","method":"m","foo":1,"foo":2,"id":9}"#));
    assert!(err.data.unwrap().get().contains("foo"));
    let (_, err) = invalid(single(r#"{"jsonrpc":"2.0","method":"m","method":"m","id":9}"#));
    assert!(err.data.unwrap().get().contains("method"));
}

#[test]
fn escaped_member_names_are_the_decoded_names() {
    // "i\u0064" is "id".
    let r = valid(single(r#"{"jsonrpc":"2.0","method":"m","i\u0064":5}"#));
    assert_eq!(r.id.unwrap().raw(), "5");
    assert!(!r.is_notification());
    let r =
        valid(single(r#"{"\u006aso\u006erpc":"2.0","\u006d\u0065thod":"m","p\u0061rams":[1],"\u0069d":3}"#));
    assert_eq!(r.method, "m");
    assert_eq!(r.params.unwrap().get(), "[1]");
    assert_eq!(r.id.unwrap().raw(), "3");

    // ...so it duplicates a plain "id".
    let (id, _) = invalid(single(r#"{"jsonrpc":"2.0","method":"m","id":1,"i\u0064":2}"#));
    assert_eq!(id, None);
    let (id, _) = invalid(single(r#"{"jsonrpc":"2.0","method":"m","\u006dethod":"n","id":1}"#));
    assert_eq!(id, Some("1"));
    // Escaped unknown names are compared decoded as well.
    let (id, _) = invalid(single(r#"{"jsonrpc":"2.0","method":"m","ab":1,"a\u0062":2,"id":4}"#));
    assert_eq!(id, Some("4"));
    // A name that merely looks like "id" is not "id".
    let r = valid(single(r#"{"jsonrpc":"2.0","method":"m","ID":1,"id ":2,"i\u0064\u0000":3}"#));
    assert!(r.is_notification());
}

#[test]
fn non_string_method_or_jsonrpc_is_never_interpreted() {
    // Regression: these values used to go through serde_json's number parser, and a number
    // beyond f64 failed the whole body with -32700 instead of -32600 with the id.
    for v in ["1e400", "-1e400", &"9".repeat(400), "[1e400]", r#"{"a":1e400}"#] {
        let id = invalid_id(&format!(r#"{{"jsonrpc":"2.0","method":{v},"id":3}}"#));
        assert_eq!(id.as_deref(), Some("3"), "method {v}");
        let id = invalid_id(&format!(r#"{{"jsonrpc":{v},"method":"m","id":3}}"#));
        assert_eq!(id.as_deref(), Some("3"), "jsonrpc {v}");
    }
    // A huge number as an unknown member, params element or id is just bytes.
    valid(single(r#"{"jsonrpc":"2.0","method":"m","x":1e400,"params":[1e400],"id":1e400}"#));
}

#[test]
fn method_strings_are_checked_like_any_string() {
    // Control characters must be escaped, lone surrogates are not text.
    parse_err(b"{\"jsonrpc\":\"2.0\",\"method\":\"a\nb\",\"id\":1}");
    parse_err(br#"{"jsonrpc":"2.0","method":"\ud800","id":1}"#);
    parse_err(br#"{"jsonrpc":"2.0","method":"\x","id":1}"#);
    parse_err(br#"{"jsonrpc":"2\u002","method":"m","id":1}"#);
    // A string without escapes is borrowed from the body.
    let body = r#"{"jsonrpc":"2.0","method":"plain.name","id":1}"#;
    let r = valid(single(body));
    assert!(matches!(r.method, std::borrow::Cow::Borrowed(_)));
    let r = valid(single(r#"{"jsonrpc":"2.0","method":"tab\there","id":1}"#));
    assert_eq!(r.method, "tab\there");
}

#[test]
fn many_distinct_unknown_members_parse_and_a_late_duplicate_is_found() {
    // Regression: duplicate detection compared every unknown member name with every earlier
    // one; ~110,000 members (1 MiB) took ~8 s of CPU in a release build (minutes in this debug
    // test). No clock here: the quadratic version makes the suite visibly stall instead.
    let mut body = String::from(r#"{"jsonrpc":"2.0","method":"m","id":1"#);
    for i in 0..120_000u32 {
        body.push_str(&format!(",\"{i:x}\":0"));
    }
    body.push('}');
    valid(single(&body));
    // ...and a duplicate at the very end is still found.
    body.pop();
    body.push_str(r#","0":1}"#);
    assert_eq!(invalid(single(&body)).0, Some("1"));
}

// ---------------------------------------------------------------------------------------------
// batches

#[test]
fn batch_entries_are_judged_independently() {
    let entries = batch(
        r#"[
            {"jsonrpc":"2.0","method":"sum","params":[1,2,4],"id":"1"},
            {"jsonrpc":"2.0","method":"notify_hello","params":[7]},
            {"jsonrpc":"2.0","method":"subtract","params":[42,23],"id":"2"},
            {"foo":"boo"},
            {"jsonrpc":"2.0","method":"foo.get","params":{"name":"myself"},"id":"5"},
            {"jsonrpc":"2.0","method":1,"id":"6"},
            {"jsonrpc":"2.0","method":"m","id":{}},
            {"jsonrpc":"2.0","method":"m","id":1,"id":1},
            1,
            [],
            [1,{"jsonrpc":"2.0","method":"m","id":1}],
            "x",
            null,
            {"jsonrpc":"2.0","method":"get_data","id":"9"}
        ]"#,
    );
    assert_eq!(entries.len(), 14);
    let mut it = entries.into_iter();
    let r = valid(it.next().unwrap());
    assert_eq!((r.method.as_ref(), r.id.unwrap().raw()), ("sum", r#""1""#));
    assert!(valid(it.next().unwrap()).is_notification());
    assert_eq!(valid(it.next().unwrap()).id.unwrap().raw(), r#""2""#);
    assert_eq!(invalid(it.next().unwrap()).0, None);
    assert_eq!(valid(it.next().unwrap()).method, "foo.get");
    assert_eq!(invalid(it.next().unwrap()).0, Some(r#""6""#));
    assert_eq!(invalid(it.next().unwrap()).0, None);
    assert_eq!(invalid(it.next().unwrap()).0, None);
    for _ in 0..5 {
        assert_eq!(invalid(it.next().unwrap()).0, None);
    }
    assert_eq!(valid(it.next().unwrap()).method, "get_data");
    assert!(it.next().is_none());
}

#[test]
fn spec_example_batch_of_scalars() {
    let entries = batch("[1,2,3]");
    assert_eq!(entries.len(), 3);
    for e in entries {
        assert_eq!(invalid(e).0, None);
    }
}

#[test]
fn empty_batch_is_an_empty_batch_message() {
    // Batch rules (empty, size, disabled) are the dispatcher's; the parser reports what it saw.
    assert!(batch("[]").is_empty());
    assert!(batch(" [ ] ").is_empty());
}

#[test]
fn a_syntax_error_anywhere_in_a_batch_fails_the_whole_body() {
    parse_err(br#"[{"jsonrpc":"2.0","method":"m","id":1},{"jsonrpc":"2.0","method":"m","id":2]"#);
    parse_err(br#"[{"jsonrpc":"2.0","method":"m","id":1},]"#);
    parse_err(br#"[{"jsonrpc":"2.0","method":"m","id":1}"#);
    parse_err(br#"[{"jsonrpc":"2.0","method":"m","id":1} {"jsonrpc":"2.0","method":"m","id":2}]"#);
}

// ---------------------------------------------------------------------------------------------
// syntax errors: -32700

#[test]
fn invalid_json_is_a_parse_error() {
    for body in [
        "",
        "   ",
        "{",
        "}",
        "[",
        r#"{"jsonrpc":"2.0","method":"foobar,"params":"bar","baz]"#,
        r#"{"jsonrpc":"2.0","method":"m",}"#,
        r#"{"jsonrpc":"2.0","method":"m" "id":1}"#,
        r#"{"jsonrpc":"2.0","method":"m","id":}"#,
        r#"{'jsonrpc':'2.0'}"#,
        r#"{jsonrpc:"2.0"}"#,
        "NaN",
        "Infinity",
        "undefined",
        "nul",
        "tru",
        r#""unterminated"#,
        "\"a\tb\"",
        r#"{"jsonrpc":"2.0","method":"m","id":"\x"}"#,
        r#"{"jsonrpc":"2.0","method":"m","id":"\u12"}"#,
        "[1,,2]",
        "/* comment */ {}",
    ] {
        parse_err(body.as_bytes());
    }
}

#[test]
fn malformed_number_ids_are_parse_errors() {
    for id in ["01", "-", "1.", ".5", "+1", "1e", "1e+", "0x10", "--1", "1.2.3", "Infinity", "-NaN"] {
        let body = format!(r#"{{"jsonrpc":"2.0","method":"m","id":{id}}}"#);
        parse_err(body.as_bytes());
    }
}

#[test]
fn invalid_utf8_is_a_parse_error() {
    let e = parse_err(b"{\"jsonrpc\":\"2.0\",\"method\":\"\xff\",\"id\":1}");
    assert!(e.data.unwrap().get().contains("UTF-8"));
    // In places the parser never decodes: an id, params, an unknown member, a member name.
    parse_err(b"{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":\"\xc3\x28\"}");
    parse_err(b"{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"params\":[\"\xed\xa0\x80\"],\"id\":1}");
    parse_err(b"{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"x\":\"\xc0\xaf\",\"id\":1}");
    parse_err(b"{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"\xfe\":1,\"id\":1}");
    parse_err(b"[{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":1},\"\x80\"]");
    // Truncated multi-byte sequence at the very end.
    parse_err(b"{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":1}\xe2\x82");
}

#[test]
fn a_byte_order_mark_is_not_json() {
    parse_err(b"\xef\xbb\xbf{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":1}");
}

#[test]
fn trailing_bytes_are_a_parse_error() {
    let ok = r#"{"jsonrpc":"2.0","method":"m","id":1}"#;
    for tail in ["x", "}", ",", "]", "1", "null", ok, "[]", "\0", " /"] {
        let body = format!("{ok}{tail}");
        parse_err(body.as_bytes());
        let body = format!("[{ok}] {tail}");
        parse_err(body.as_bytes());
    }
    // Trailing whitespace is fine.
    assert!(matches!(parse(format!("{ok} \n\t\r ").as_bytes()), Ok(Message::Single(Entry::Valid(_)))));
}

#[test]
fn parse_str_agrees_with_parse() {
    let body = r#"[{"jsonrpc":"2.0","method":"m","id":1.0},3]"#;
    let Ok(Message::Batch(a)) = parse(body.as_bytes()) else { panic!() };
    let Ok(Message::Batch(b)) = parse_str(body) else { panic!() };
    assert_eq!(a.len(), b.len());
    assert!(parse_str("{").is_err());
}

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
