use super::*;

#[test]
fn the_era_is_read_from_meta_or_the_version_header() {
    let modern = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
    let legacy =
        br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}"#;
    assert!(is_stateless(modern, None));
    assert!(!is_stateless(legacy, None));
    assert!(!is_stateless(legacy, Some("2025-06-18")));
    assert!(is_stateless(legacy, Some("2026-07-28")));
    assert!(is_stateless(b"not json", Some("v999")));
    assert!(!is_stateless(b"not json", None));
    assert!(!is_stateless(b"[1,2]", None));
}

#[test]
fn results_get_their_result_type_and_lists_their_hints() {
    assert_eq!(complete("{}"), r#"{"resultType":"complete"}"#);
    assert_eq!(complete(r#"{"a":1}"#), r#"{"resultType":"complete","a":1}"#);
    let list: Value = serde_json::from_str(&cacheable(r#"{"tools":[]}"#, "public")).unwrap();
    assert_eq!(list, json!({"resultType":"complete","ttlMs":LIST_TTL_MS,"cacheScope":"public","tools":[]}));
}

#[test]
fn only_the_common_call_takes_the_one_pass_read_everything_else_the_parser() {
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}"#;
    let body = |s: String| s.into_bytes();
    let common = body(format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"add","arguments":{{"a":1}},{meta}}}}}"#
    ));
    let (id, members) = fast_call(&common).expect("the common call");
    assert_eq!(id.raw(), "7");
    assert_eq!(members.name.map(RawValue::get), Some(r#""add""#));
    assert!(matches!(members.meta, Some(call::MetaMember::Object(_))));
    let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
    for other in [
            format!(r#"[{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{{meta}}}}}]"#),
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{{meta}}},"extra":1}}"#),
            format!(r#"{{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call","params":{{{meta}}}}}"#),
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools\u002fcall","params":{{{meta}}}}}"#),
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{{meta}}}}}"#),
            format!(r#"{{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{{{meta}}}}}"#),
            format!(r#"{{"jsonrpc":"2.0","id":true,"method":"tools/call","params":{{{meta}}}}}"#),
            format!(r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{{meta}}}}}"#),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":["add"]}"#.to_owned(),
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"arguments":{deep},{meta}}}}}"#),
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{{meta}}}}} x"#),
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}}"#.to_owned(),
        ] {
            assert!(fast_call(other.as_bytes()).is_none(), "{other}");
        }
}

#[test]
fn header_values_are_trimmed_checked_and_decoded() {
    assert_eq!(header_text(b"  tools/call\t"), Some("tools/call"));
    assert_eq!(header_text("caf\u{e9}".as_bytes()), None);
    assert_eq!(header_text(b"a\nb"), None);
    assert_eq!(decoded("=?base64?SGVsbG8=?=").as_deref(), Some("Hello"));
    assert_eq!(decoded("=?base64?SGVsbG8?="), None, "padding is required");
    assert_eq!(decoded("=?base64?SGVs!!!bG8=?="), None);
    assert_eq!(decoded("=?base64?SGVsbG8=").as_deref(), Some("=?base64?SGVsbG8="), "no suffix: literal");
    assert!(same_value("42.0", &json!(42)));
    assert!(same_value("true", &json!(true)));
    assert!(!same_value("x", &json!(null)));
}

#[test]
fn x_mcp_header_annotations_are_found_through_properties_only() {
    let schema = json!({"type":"object","properties":{
            "region":{"type":"string","x-mcp-header":"Region"},
            "nested":{"type":"object","properties":{"zone":{"type":"string","x-mcp-header":"Zone"}}},
            "list":{"type":"array","items":{"properties":{"x":{"x-mcp-header":"X"}}}}}});
    let mut found = crate::tools::header_params(&schema);
    found.sort();
    assert_eq!(
        found,
        vec![("Region".into(), vec!["region".into()]), ("Zone".into(), vec!["nested".into(), "zone".into()])]
    );
}
