//! Unit tests of the one-pass parser (SPEC §1): requests, invalid shapes, duplicate members,
//! batches and syntax errors.

mod common;

#[allow(unused_imports)]
use common::*;
#[allow(unused_imports)]
use oncerpc_protocol::{
    Entry, ErrorCode, Id, MAX_DEPTH, Message, Outcome, RawValue, Request, RpcError, error_body, parse,
    parse_str, write_error, write_outcome, write_result,
};

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
