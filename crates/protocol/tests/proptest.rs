//! Property tests of the parser and the response writers (SPEC §1).
//!
//! (a) generated valid requests round-trip: the method is decoded, the id is echoed byte for
//!     byte, singly and in batches, in order;
//! (b) no input — arbitrary bytes, JSON-ish token soup, mutated valid requests — panics;
//! (c) every `Err` is -32700 and every `Entry::Invalid` is -32600.

use oncerpc_protocol::{Entry, ErrorCode, Message, RawValue, RpcError, parse, write_error, write_result};
use proptest::prelude::*;
use proptest::test_runner::Config;
use serde_json::Value;
use std::collections::BTreeMap;

// ---------------------------------------------------------------------------------------------
// generators

/// A JSON string literal and the text it decodes to. Mixes plain ASCII, unicode (including
/// astral-plane characters) and every kind of escape, `\uXXXX` surrogate pairs included.
fn json_string() -> impl Strategy<Value = (String, String)> {
    let piece = prop_oneof![
        4 => "[a-zA-Z0-9 ._:/-]{1,4}".prop_map(|s| (s.clone(), s)),
        // Any non-control character (may be multi-byte or astral), written literally.
        2 => any::<char>()
            .prop_filter("needs escaping", |c| !c.is_control() && *c != '"' && *c != '\\')
            .prop_map(|c| (c.to_string(), c.to_string())),
        1 => prop::sample::select(vec![
            (r#"\""#, "\""),
            (r"\\", "\\"),
            (r"\/", "/"),
            (r"\b", "\u{8}"),
            (r"\f", "\u{c}"),
            (r"\n", "\n"),
            (r"\r", "\r"),
            (r"\t", "\t"),
        ])
        .prop_map(|(e, d)| (e.to_owned(), d.to_owned())),
        // \uXXXX of any scalar value: BMP directly, astral as a surrogate pair; random case.
        1 => (any::<char>(), any::<bool>()).prop_map(|(c, upper)| {
            let mut units = [0u16; 2];
            let text: String = c
                .encode_utf16(&mut units)
                .iter()
                .map(|u| if upper { format!("\\u{u:04X}") } else { format!("\\u{u:04x}") })
                .collect();
            (text, c.to_string())
        }),
    ];
    prop::collection::vec(piece, 0..10).prop_map(|pieces| {
        let mut text = String::from("\"");
        let mut decoded = String::new();
        for (t, d) in pieces {
            text.push_str(&t);
            decoded.push_str(&d);
        }
        text.push('"');
        (text, decoded)
    })
}

/// An integer's JSON text: `0` or up to 40 digits without a leading zero, maybe negative.
fn json_int() -> impl Strategy<Value = String> {
    (any::<bool>(), prop_oneof![Just("0".to_owned()), "[1-9][0-9]{0,39}"])
        .prop_map(|(neg, digits)| if neg { format!("-{digits}") } else { digits })
}

/// The JSON text of an id member's value, or `None` for an absent id (a notification).
fn id_text() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        3 => json_string().prop_map(|(t, _)| Some(t)),
        3 => json_int().prop_map(Some),
        // decimals: 1.0, -0.50, 123.000…
        1 => (json_int(), "[0-9]{1,12}").prop_map(|(i, f)| Some(format!("{i}.{f}"))),
        // exponents: 1e3, 2E-5, -0.5e+10
        1 => (json_int(), prop::option::of("[0-9]{1,6}"), "[eE]", "[+-]?", "[0-9]{1,3}").prop_map(
            |(i, f, e, s, x)| Some(format!("{i}{}{e}{s}{x}", f.map(|f| format!(".{f}")).unwrap_or_default()))
        ),
        1 => prop::sample::select(vec!["1.0", "-0", "-0.0", "1e3", "2E-5", "1E+400", "0.0e0"])
            .prop_map(|s| Some(s.to_owned())),
        1 => Just(Some("null".to_owned())),
        2 => Just(None),
    ]
}

/// Any JSON value (serde_json writes its strings with whatever escapes they need).
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        ".{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(".{0,6}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// `params`: absent, an array or an object.
fn params_text() -> impl Strategy<Value = Option<String>> {
    prop_oneof![
        1 => Just(None),
        2 => prop::collection::vec(json_value(), 0..5).prop_map(|v| Some(Value::Array(v).to_string())),
        2 => prop::collection::btree_map(".{0,6}", json_value(), 0..5)
            .prop_map(|m| Some(Value::Object(m.into_iter().collect()).to_string())),
    ]
}

/// Insignificant whitespace.
fn ws() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["", "", "", " ", "\n", "\t", "\r\n  "])
}

/// A generated valid request: its text and what the parser must find in it.
#[derive(Debug, Clone)]
struct Generated {
    text: String,
    method: String,
    id: Option<String>,
    params: Option<String>,
}

fn request() -> impl Strategy<Value = Generated> {
    (json_string(), id_text(), params_text(), prop::collection::vec(ws(), 12), any::<bool>())
        .prop_flat_map(|(method, id, params, ws, escaped_names)| {
            // Member names, sometimes spelled with escapes ("i\u0064" is "id").
            let name = move |plain: &'static str, esc: &'static str| if escaped_names { esc } else { plain };
            let mut members = vec![
                (name("jsonrpc", r"jsonrp\u0063"), r#""2.0""#.to_owned()),
                (name("method", r"\u006dethod"), method.0.clone()),
            ];
            if let Some(id) = &id {
                members.push((name("id", r"i\u0064"), id.clone()));
            }
            if let Some(p) = &params {
                members.push((name("params", r"par\u0061ms"), p.clone()));
            }
            (Just(members).prop_shuffle(), Just((method.1, id, params, ws)))
        })
        .prop_map(|(members, (method, id, params, ws))| {
            let mut text = format!("{}{{", ws[0]);
            for (i, (name, value)) in members.iter().enumerate() {
                if i > 0 {
                    text.push(',');
                }
                let w = &ws[1 + 2 * i..3 + 2 * i];
                text.push_str(&format!("{}\"{name}\"{}:{}{value}", w[0], w[1], w[0]));
            }
            text.push_str(ws[10]);
            text.push('}');
            text.push_str(ws[11]);
            Generated { text, method, id, params }
        })
}

// ---------------------------------------------------------------------------------------------
// checks

/// The entry must be the generated request, and a result written for it must echo the id.
fn check_round_trip(entry: &Entry<'_>, g: &Generated) -> Result<(), TestCaseError> {
    let Entry::Valid(r) = entry else {
        return Err(TestCaseError::fail(format!("not valid: {entry:?}\n{}", g.text)));
    };
    prop_assert_eq!(r.method.as_ref(), g.method.as_str());
    prop_assert_eq!(r.id.map(|i| i.raw()), g.id.as_deref());
    prop_assert_eq!(r.is_notification(), g.id.is_none());
    prop_assert_eq!(r.params.map(|p| p.get()), g.params.as_deref());

    let mut out = Vec::new();
    let result = RawValue::from_string("19".to_owned()).unwrap();
    write_result(&mut out, r.id, &result);
    let out = String::from_utf8(out).unwrap();
    let tail = format!(r#""id":{}}}"#, g.id.as_deref().unwrap_or("null"));
    prop_assert!(out.contains(&tail), "{} does not contain {}", out, tail);
    prop_assert!(out.ends_with(&tail));
    prop_assert!(out.starts_with(r#"{"jsonrpc":"2.0","result":19,"id":"#), "{}", out);
    let v = members(&out)?;
    prop_assert!(v.contains_key("result") && !v.contains_key("error"));
    prop_assert_eq!(v["id"].get(), g.id.as_deref().unwrap_or("null"));
    Ok(())
}

/// Checks that `text` is one JSON object and returns its members as raw values. (Not via
/// `serde_json::Value`: an id such as `1e400` is valid JSON but beyond `f64`.)
fn members(text: &str) -> Result<BTreeMap<String, &RawValue>, TestCaseError> {
    serde_json::from_str(text).map_err(|e| TestCaseError::fail(format!("not a JSON object ({e}): {text}")))
}

/// (c): the error codes of whatever `parse` returned; and every response the entries would
/// get is well-formed JSON whose id is the entry's raw id.
fn check_codes(body: &[u8]) -> Result<(), TestCaseError> {
    let entries = match parse(body) {
        Err(e) => {
            prop_assert_eq!(e.code, ErrorCode::ParseError);
            prop_assert_eq!(e.code.code(), -32700);
            return Ok(());
        }
        Ok(Message::Single(e)) => vec![e],
        Ok(Message::Batch(v)) => v,
    };
    for entry in &entries {
        let mut out = Vec::new();
        match entry {
            Entry::Invalid { id, error } => {
                prop_assert_eq!(error.code, ErrorCode::InvalidRequest);
                prop_assert_eq!(error.code.code(), -32600);
                write_error(&mut out, *id, error);
            }
            Entry::Valid(r) => {
                write_error(&mut out, r.id, &RpcError::method_not_found());
            }
        }
        let text = std::str::from_utf8(&out).unwrap();
        let v = members(text)?;
        prop_assert!(v.contains_key("error") && !v.contains_key("result"));
        let want = match entry {
            Entry::Invalid { id, .. } => id.map_or("null", |i| i.raw()),
            Entry::Valid(r) => r.id.map_or("null", |i| i.raw()),
        };
        prop_assert_eq!(v["id"].get(), want);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// properties

proptest! {
    #![proptest_config(Config { cases: 512, ..Config::default() })]

    #[test]
    fn valid_requests_round_trip(g in request()) {
        let msg = parse(g.text.as_bytes()).map_err(|e| TestCaseError::fail(format!("{e}\n{}", g.text)))?;
        let Message::Single(entry) = msg else {
            return Err(TestCaseError::fail("not a single message"));
        };
        check_round_trip(&entry, &g)?;
    }

    #[test]
    fn valid_batches_round_trip_in_order(
        gs in prop::collection::vec(request(), 1..=20),
        seps in prop::collection::vec(ws(), 21),
    ) {
        let mut body = String::from("[");
        for (i, g) in gs.iter().enumerate() {
            if i > 0 {
                body.push(',');
            }
            body.push_str(seps[i]);
            body.push_str(&g.text);
        }
        body.push_str(seps[20]);
        body.push(']');
        let msg = parse(body.as_bytes()).map_err(|e| TestCaseError::fail(format!("{e}\n{body}")))?;
        let Message::Batch(entries) = msg else {
            return Err(TestCaseError::fail("not a batch"));
        };
        prop_assert_eq!(entries.len(), gs.len());
        for (entry, g) in entries.iter().zip(&gs) {
            check_round_trip(entry, g)?;
        }
    }

    #[test]
    fn json_strings_decode_like_serde_json(s in json_string()) {
        // Sanity check of the generator itself.
        prop_assert_eq!(serde_json::from_str::<String>(&s.0).unwrap(), s.1);
    }

    #[test]
    fn a_wrong_jsonrpc_keeps_the_generated_id(g in request(), version in "[0-9. a-z]{0,5}") {
        prop_assume!(version != "2.0");
        prop_assume!(g.text.matches(r#""2.0""#).count() == 1);
        let body = g.text.replacen(r#""2.0""#, &format!("\"{version}\""), 1);
        let Ok(Message::Single(Entry::Invalid { id, error })) = parse(body.as_bytes()) else {
            return Err(TestCaseError::fail(format!("not an invalid entry: {body}")));
        };
        prop_assert_eq!(error.code.code(), -32600);
        prop_assert_eq!(id.map(|i| i.raw()), g.id.as_deref());
    }
}

proptest! {
    #![proptest_config(Config { cases: 2048, ..Config::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(body in prop::collection::vec(any::<u8>(), 0..256)) {
        check_codes(&body)?;
    }

    #[test]
    fn json_token_soup_never_panics(tokens in prop::collection::vec(
        prop::sample::select(vec![
            "{", "}", "[", "]", "\"", ":", ",", "1", "-", "0", ".", "e", "null", "true", "\"id\"",
            "\"jsonrpc\"", "\"2.0\"", "\"method\"", "\"m\"", "\"params\"", "\\", "\\u0064", "\"i\\u0064\"",
            " ", "\n", "1e400", "\u{e9}", "\u{1F600}",
        ]),
        0..64,
    )) {
        check_codes(tokens.concat().as_bytes())?;
    }

    #[test]
    fn mutated_requests_never_panic(
        gs in prop::collection::vec(request(), 1..4),
        batch in any::<bool>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), 0u8..3, any::<u8>()), 1..6),
    ) {
        let texts: Vec<&str> = gs.iter().map(|g| g.text.as_str()).collect();
        let mut body = if batch { format!("[{}]", texts.join(",")) } else { texts[0].to_owned() }.into_bytes();
        for (at, kind, byte) in edits {
            let i = at.index(body.len() + 1);
            match kind {
                0 => body.insert(i, byte),
                1 if i < body.len() => {
                    body.remove(i);
                }
                _ if i < body.len() => body[i] = byte,
                _ => body.push(byte),
            }
        }
        check_codes(&body)?;
    }
}
