//! Webhooks (SPEC §15): idempotency keys derived from the payload or a header, and
//! fingerprints over a chosen subset of the params. The one place these rules live.
//!
//! * A derived key is the value at `key_from` (a JSON pointer into the params) or of the
//!   `key_header` header. A string is used as it is; a number, object or array by its
//!   canonical JSON text. A value that breaks the key format (SPEC §3) is not refused but
//!   hashed: `sha256-` + the first 57 hex digits of SHA-256 of the value (64 characters).
//! * An explicit key (params or header) wins only when it equals the derived key;
//!   otherwise `-32602`.
//! * `fingerprint_from`: SHA-256 of the canonical form of `{"<pointer>": value, …}` over the
//!   pointers that have a value, read from the raw text (never through `f64`).
//!
//! JSON pointers are resolved over the raw params text one level at a time (borrowed
//! `RawValue`s), so a number keeps its exact digits: `serde_json::Value::pointer` would read
//! `100000000000000000001` and `100000000000000000002` as one `f64`.

use std::collections::BTreeMap;
use std::sync::Arc;

use oncerpc_protocol::{RawValue, RpcError};
use sha2::{Digest, Sha256};

use crate::idempotency::{self, canonical_json};
use crate::method::KeySource;

/// How a keyed execution got its key; answered as `X-Idempotency-Key-Source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyOrigin {
    /// Given by the client (`params.idempotency_key`, `X-Idempotency-Key`, `Idempotency-Key`).
    #[default]
    Client,
    /// Derived (`key_from` / `key_header`), used as it is.
    Derived,
    /// Derived, but its value broke the key format: the key is its hash.
    Hashed,
    /// Generated for a keyless async call.
    Synthetic,
}

impl KeyOrigin {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyOrigin::Client => "client",
            KeyOrigin::Derived => "derived",
            KeyOrigin::Hashed => "hashed",
            KeyOrigin::Synthetic => "generated",
        }
    }
}

/// The prefix of a hashed derived key.
pub const HASHED_KEY_PREFIX: &str = "sha256-";

/// Whether `pointer` is a JSON pointer (RFC 6901): empty, or `/`-separated tokens in which
/// `~` is only followed by `0` or `1`.
pub fn check_pointer(pointer: &str) -> Result<(), String> {
    if !pointer.is_empty() && !pointer.starts_with('/') {
        return Err(format!("{pointer:?} is not a JSON pointer: it must start with \"/\""));
    }
    let mut chars = pointer.chars();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.next(), Some('0' | '1')) {
            return Err(format!("{pointer:?} is not a JSON pointer: \"~\" must be followed by 0 or 1"));
        }
    }
    Ok(())
}

/// Whether `pointers` can form a `fingerprint_from` subset: at least one, each a JSON pointer,
/// and none listed twice. A pointer listed twice would name one member of the fingerprint
/// document (`{"<pointer>": value, …}`) twice, which canonical JSON refuses: every request
/// would be `400`. A pointer inside another (`/a` and `/a/b`) is fine: each is its own member.
pub fn check_fingerprint_pointers(pointers: &[String]) -> Result<(), String> {
    if pointers.is_empty() {
        return Err("name at least one JSON pointer".into());
    }
    let mut seen = std::collections::HashSet::new();
    for p in pointers {
        check_pointer(p)?;
        if !seen.insert(p.as_str()) {
            return Err(format!("{p:?} is listed twice"));
        }
    }
    Ok(())
}

/// The raw value at `pointer` in `text`; `None` when there is none. `text` is valid JSON
/// (the engine walked it before).
pub fn resolve<'a>(text: &'a str, pointer: &str) -> Result<Option<&'a RawValue>, RpcError> {
    let bad = |e: serde_json::Error| RpcError::invalid_params(format!("invalid params: {e}"));
    let mut cur: &'a RawValue = serde_json::from_str(text).map_err(bad)?;
    if pointer.is_empty() {
        return Ok(Some(cur));
    }
    for token in pointer[1..].split('/') {
        let token = token.replace("~1", "/").replace("~0", "~");
        let inner: &'a str = cur.get();
        cur = match inner.as_bytes().first() {
            Some(b'{') => {
                let members: BTreeMap<String, &'a RawValue> = serde_json::from_str(inner).map_err(bad)?;
                match members.get(&token) {
                    Some(v) => v,
                    None => return Ok(None),
                }
            }
            Some(b'[') => {
                let items: Vec<&'a RawValue> = serde_json::from_str(inner).map_err(bad)?;
                let index =
                    (token == "0" || !token.starts_with('0')).then(|| token.parse::<usize>().ok()).flatten();
                match index.and_then(|i| items.get(i)) {
                    Some(v) => v,
                    None => return Ok(None),
                }
            }
            _ => return Ok(None),
        };
    }
    Ok(Some(cur))
}

/// The key a method derives for this request, with how it was made; `Ok(None)` when the
/// method derives none. A value that is absent (or `null`, or an empty string) is `-32602`:
/// the method says where its key is, and a delivery without it cannot be deduplicated.
pub fn derive_key(
    source: &KeySource,
    params: Option<&RawValue>,
    headers: &[(Arc<str>, Arc<str>)],
) -> Result<(Arc<str>, KeyOrigin), RpcError> {
    let value: Option<String> = match source {
        KeySource::Header(name) => headers.iter().find(|(n, _)| **n == **name).map(|(_, v)| v.to_string()),
        KeySource::Pointer(pointer) => {
            let text = params.map_or("null", |p| p.get());
            match resolve(text, pointer)? {
                None => None,
                Some(raw) => match raw.get().as_bytes().first() {
                    Some(b'n') => None,
                    Some(b't' | b'f') => {
                        return Err(RpcError::invalid_params(format!(
                            "invalid idempotency key: the value at {pointer} (key_from) is a boolean, not an id"
                        )));
                    }
                    Some(b'"') => Some(
                        serde_json::from_str::<String>(raw.get())
                            .map_err(|e| RpcError::invalid_params(format!("invalid params: {e}")))?,
                    ),
                    _ => Some(canonical_json(raw.get())?),
                },
            }
        }
    };
    let Some(value) = value.filter(|v| !v.is_empty()) else {
        return Err(RpcError::invalid_params(match source {
            KeySource::Pointer(p) => {
                format!("invalid idempotency key: the params have no value at {p} (key_from)")
            }
            KeySource::Header(h) => {
                format!("invalid idempotency key: the {h} header is missing (key_header)")
            }
        }));
    };
    if idempotency::validate_key(&value).is_ok() {
        return Ok((Arc::from(value), KeyOrigin::Derived));
    }
    Ok((Arc::from(hashed_key(&value)), KeyOrigin::Hashed))
}

/// `sha256-` + the first 57 hex digits of SHA-256 of `value`: 64 characters, a valid key.
pub fn hashed_key(value: &str) -> String {
    let mut key = String::with_capacity(64);
    key.push_str(HASHED_KEY_PREFIX);
    key.push_str(&idempotency::hex(&Sha256::digest(value.as_bytes()))[..64 - HASHED_KEY_PREFIX.len()]);
    key
}

/// Combine the client's key with the derived one: equal, or only one of them.
pub fn combine(
    explicit: Option<Arc<str>>,
    derived: (Arc<str>, KeyOrigin),
    source: &KeySource,
) -> Result<(Arc<str>, KeyOrigin), RpcError> {
    match explicit {
        None => Ok(derived),
        Some(k) if k == derived.0 => Ok((k, derived.1)),
        Some(_) => {
            let from = match source {
                KeySource::Pointer(p) => format!("the params at {p} (key_from)"),
                KeySource::Header(h) => format!("the {h} header (key_header)"),
            };
            Err(RpcError::invalid_params(format!(
                "invalid idempotency key: the key given differs from the one derived from {from}"
            )))
        }
    }
}

/// The fingerprint over the values at `pointers` only: SHA-256 (hex) of the canonical form
/// of `{"<pointer>": <value>, …}`, pointers without a value left out.
pub fn subset_fingerprint(pointers: &[String], params: Option<&RawValue>) -> Result<String, RpcError> {
    let text = params.map_or("null", |p| p.get());
    let mut doc = String::from("{");
    for pointer in pointers {
        if let Some(raw) = resolve(text, pointer)? {
            if doc.len() > 1 {
                doc.push(',');
            }
            doc.push_str(&serde_json::Value::from(pointer.as_str()).to_string());
            doc.push(':');
            doc.push_str(raw.get());
        }
    }
    doc.push('}');
    Ok(idempotency::hex(&Sha256::digest(canonical_json(&doc)?.as_bytes())))
}

/// `derive_key` (SPEC §16): the key of a call that brought none, from its fingerprint (its
/// canonical params) and the window of time it falls in, and the key of the window before.
/// A call whose previous window's record exists with the same fingerprint is its duplicate:
/// so identical calls less than one window apart are always duplicates, and calls two
/// windows apart never are.
pub fn call_keys(fingerprint: &str, window: std::time::Duration, now_ms: u64) -> (Arc<str>, Arc<str>) {
    let window_ms = (window.as_millis() as u64).max(1);
    let n = now_ms / window_ms;
    let fp = &fingerprint[..fingerprint.len().min(32)];
    (Arc::from(format!("call-{fp}-{n}")), Arc::from(format!("call-{fp}-{}", n.saturating_sub(1))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).unwrap()
    }

    fn at(text: &str, pointer: &str) -> Option<String> {
        resolve(text, pointer).unwrap().map(|r| r.get().to_owned())
    }

    #[test]
    fn pointers_resolve_over_the_raw_text() {
        let doc = r#"{"id":"evt_1","data":{"object":{"amount":100000000000000000001,"a/b":1,"m~n":2}},"l":[10,20]}"#;
        assert_eq!(at(doc, "/id").as_deref(), Some(r#""evt_1""#));
        assert_eq!(at(doc, "/data/object/amount").as_deref(), Some("100000000000000000001"));
        assert_eq!(at(doc, "/data/object/a~1b").as_deref(), Some("1"));
        assert_eq!(at(doc, "/data/object/m~0n").as_deref(), Some("2"));
        assert_eq!(at(doc, "/l/1").as_deref(), Some("20"));
        assert_eq!(at(doc, "/l/01"), None);
        assert_eq!(at(doc, "/l/2"), None);
        assert_eq!(at(doc, "/missing"), None);
        assert_eq!(at(doc, "/id/deeper"), None);
        assert_eq!(at("[1]", "").as_deref(), Some("[1]"));
    }

    #[test]
    fn pointer_syntax_is_checked() {
        assert!(check_pointer("").is_ok());
        assert!(check_pointer("/a/~0/~1").is_ok());
        assert!(check_pointer("id").is_err());
        assert!(check_pointer("/a~2").is_err());
        assert!(check_pointer("/a~").is_err());
    }

    #[test]
    fn fingerprint_pointer_sets_that_could_never_work_are_refused() {
        let set = |ps: &[&str]| ps.iter().map(|p| p.to_string()).collect::<Vec<_>>();
        let e = check_fingerprint_pointers(&set(&["/a", "/b", "/a"])).unwrap_err();
        assert!(e.contains("\"/a\" is listed twice"), "{e}");
        assert!(check_fingerprint_pointers(&set(&[])).unwrap_err().contains("at least one"));
        assert!(check_fingerprint_pointers(&set(&["/a", "b"])).unwrap_err().contains("JSON pointer"));
        // What passes the check works: a pointer inside another, the whole document, escapes.
        for ok in [&["/a", "/a/b"][..], &["", "/a"], &["/a~1b", "/a/b"], &["/a"]] {
            let ps = set(ok);
            assert!(check_fingerprint_pointers(&ps).is_ok(), "{ok:?}");
            let fp = subset_fingerprint(&ps, Some(&raw(r#"{"a":{"b":1},"a/b":2}"#)));
            assert!(fp.is_ok(), "{ok:?}: {fp:?}");
        }
        // Why duplicates are refused: their fingerprint document names a member twice, which
        // is an invalid request (400) whatever the params.
        let fp = subset_fingerprint(&set(&["/a", "/a"]), Some(&raw(r#"{"a":1}"#)));
        assert_eq!(fp.unwrap_err().code.code(), -32600);
    }

    #[test]
    fn derived_keys_are_used_as_they_are_or_hashed() {
        let ptr = KeySource::Pointer("/id".into());
        let (k, o) = derive_key(&ptr, Some(&raw(r#"{"id":"evt_123"}"#)), &[]).unwrap();
        assert_eq!((&*k, o), ("evt_123", KeyOrigin::Derived));
        let (k, o) = derive_key(&ptr, Some(&raw(r#"{"id":12345}"#)), &[]).unwrap();
        assert_eq!((&*k, o), ("12345", KeyOrigin::Derived));
        // A space breaks the key format: hashed, not refused.
        let (k, o) = derive_key(&ptr, Some(&raw(r#"{"id":"evt 1"}"#)), &[]).unwrap();
        assert_eq!(o, KeyOrigin::Hashed);
        assert_eq!(k.len(), 64);
        assert!(k.starts_with("sha256-"));
        assert_eq!(&*k, hashed_key("evt 1"));
        assert!(idempotency::validate_key(&k).is_ok());
        let long = "x".repeat(200);
        let (k, o) = derive_key(&ptr, Some(&raw(&format!(r#"{{"id":"{long}"}}"#))), &[]).unwrap();
        assert_eq!((k.len(), o), (64, KeyOrigin::Hashed));
        for missing in [r#"{"x":1}"#, r#"{"id":null}"#, r#"{"id":""}"#] {
            let e = derive_key(&ptr, Some(&raw(missing)), &[]).unwrap_err();
            assert_eq!(e.code.code(), -32602, "{missing}");
            assert!(e.message.contains("no value at /id"), "{}", e.message);
        }
        let e = derive_key(&ptr, Some(&raw(r#"{"id":true}"#)), &[]).unwrap_err();
        assert!(e.message.contains("boolean"));

        let hdr = KeySource::Header("webhook-id".into());
        let headers = [(Arc::from("webhook-id"), Arc::from("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W"))];
        let (k, o) = derive_key(&hdr, None, &headers).unwrap();
        assert_eq!((&*k, o), ("msg_2KWPBgLlAfxdpx2AI54pPJ85f4W", KeyOrigin::Derived));
        let e = derive_key(&hdr, None, &[]).unwrap_err();
        assert!(e.message.contains("webhook-id header is missing"), "{}", e.message);
    }

    #[test]
    fn the_hash_is_sha256_of_the_value() {
        // `printf 'evt 1' | sha256sum` = 792593d1af2cab13b17ac05818bca706a78e4b8e30c5c3c52c7d3ebce3391ab5
        assert_eq!(hashed_key("evt 1"), "sha256-792593d1af2cab13b17ac05818bca706a78e4b8e30c5c3c52c7d3ebce");
    }

    #[test]
    fn an_explicit_key_must_equal_the_derived_one() {
        let src = KeySource::Pointer("/id".into());
        let d = || (Arc::from("evt_1"), KeyOrigin::Derived);
        assert_eq!(combine(None, d(), &src).unwrap().0.as_ref(), "evt_1");
        assert_eq!(combine(Some(Arc::from("evt_1")), d(), &src).unwrap().1, KeyOrigin::Derived);
        let e = combine(Some(Arc::from("other")), d(), &src).unwrap_err();
        assert_eq!(e.code.code(), -32602);
        assert!(e.message.contains("differs"), "{}", e.message);
    }

    #[test]
    fn subset_fingerprints_see_only_their_pointers_exactly() {
        let ptrs = vec!["/data/object/id".to_string(), "/data/object/amount".to_string()];
        let fp = |t: &str| subset_fingerprint(&ptrs, Some(&raw(t))).unwrap();
        let a = fp(r#"{"attempt":1,"data":{"object":{"id":"pi_1","amount":100000000000000000001}}}"#);
        let envelope = fp(
            r#"{"attempt":2,"created":9,"data":{"object":{"amount":100000000000000000001.0,"id":"pi_1"}}}"#,
        );
        let amount = fp(r#"{"attempt":1,"data":{"object":{"id":"pi_1","amount":100000000000000000002}}}"#);
        let missing = fp(r#"{"attempt":1,"data":{"object":{"id":"pi_1"}}}"#);
        assert_eq!(a, envelope);
        assert_ne!(a, amount);
        assert_ne!(a, missing);
        assert_eq!(a.len(), 64);
    }
}
