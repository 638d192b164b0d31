//! The text of the stateless revision's HTTP headers: trimmed and checked, the Base64
//! sentinel decoded, compared with an argument's value.

use std::borrow::Cow;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

/// A header value without its surrounding spaces and tabs; `None` when it has characters a
/// header value may not (anything but visible ASCII, space and tab).
pub(super) fn header_text(raw: &[u8]) -> Option<&str> {
    if !raw.iter().all(|&b| b == b'\t' || (b' '..=b'~').contains(&b)) {
        return None;
    }
    std::str::from_utf8(raw).ok().map(|s| s.trim_matches([' ', '\t']))
}

/// A header value with the Base64 sentinel (`=?base64?…?=`) decoded; `None` when the Base64
/// or its UTF-8 is invalid. A value without the whole sentinel is taken literally.
pub(super) fn decoded(text: &str) -> Option<Cow<'_, str>> {
    match text.strip_prefix("=?base64?").and_then(|t| t.strip_suffix("?=")) {
        Some(encoded) => {
            STANDARD.decode(encoded).ok().and_then(|b| String::from_utf8(b).ok()).map(Cow::Owned)
        }
        None => Some(Cow::Borrowed(text)),
    }
}

/// Whether a header's text is the argument's value: a string as is, an integer as its
/// decimal (compared as a number), a boolean as `true`/`false`.
pub(super) fn same_value(text: &str, value: &Value) -> bool {
    match value {
        Value::String(s) => text == s,
        Value::Bool(b) => text == if *b { "true" } else { "false" },
        Value::Number(n) => match (text.parse::<f64>(), n.as_f64()) {
            (Ok(h), Some(b)) => h == b,
            _ => false,
        },
        _ => false,
    }
}
