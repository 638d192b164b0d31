//! Idempotency rules of SPEC §3 that do not touch a store: where the key comes from, what
//! a valid key is, the mode, and the fingerprint of params.

use std::sync::Arc;
use std::time::Duration;

use oncerpc_protocol::{KeyFormatError, RawValue, RpcError};
use serde_json::Value;
use sha2::{Digest, Sha256};

pub use crate::canonical::without_members;
use crate::canonical::{RESERVED_PARAMS, WalkError, Walker};

/// `dev`: a command without key runs without deduplication. `production`: it is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Dev,
    Production,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "dev" => Ok(Mode::Dev),
            "production" => Ok(Mode::Production),
            other => Err(format!("unknown mode {other:?}: use dev or production")),
        }
    }
}

/// Engine settings.
#[derive(Debug, Clone)]
pub struct IdempotencyConfig {
    pub mode: Mode,
    /// How long a claim is owned before another request may take it over. Must exceed
    /// every method's timeout.
    pub lease: Duration,
    /// How long a record (and so a stored outcome) lives.
    pub ttl: Duration,
    /// How long one store call may take (`store.op_timeout_ms`): past it the call fails as if
    /// the store were down (`-32004`, nothing run; see [`Bounded`](crate::Bounded)). It is
    /// also the whole budget of a claim, which is not taken from the method's `timeout`.
    pub store_timeout: Duration,
}

impl Default for IdempotencyConfig {
    fn default() -> Self {
        IdempotencyConfig {
            mode: Mode::Dev,
            lease: Duration::from_secs(60),
            ttl: Duration::from_secs(86_400),
            store_timeout: DEFAULT_STORE_TIMEOUT,
        }
    }
}

/// The default of [`IdempotencyConfig::store_timeout`] (`store.op_timeout_ms`): well under
/// the default lease, above a Redis `WAIT`'s second.
pub const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_millis(3000);

pub const MSG_INVALID_CHARS: &str = KeyFormatError::InvalidCharacters.message();
pub const MSG_INVALID_LENGTH: &str = KeyFormatError::InvalidLength.message();
pub const MSG_KEY_REQUIRED: &str = "idempotency_key is required for commands";
pub const MSG_KEY_CONFLICT: &str =
    "invalid idempotency key: params.idempotency_key and the idempotency key header differ";

/// SPEC §3 key format: 3–128 characters of `A–Z a–z 0–9 - _ .`.
/// The rule itself is `oncerpc_protocol::check_key`, which clients share.
pub fn validate_key(key: &str) -> Result<(), RpcError> {
    oncerpc_protocol::check_key(key).map_err(|e| RpcError::invalid_params(e.message()))
}

/// The idempotency-related parts of a command's params.
#[derive(Debug, Default)]
pub struct CommandParams {
    pub key: Option<Arc<str>>,
    pub force_retry: bool,
    pub fingerprint: String,
}

/// The deepest nesting accepted inside params, counted from the params' own root: the limit
/// serde_json applies when it builds a `Value` (127 levels), so a walk that passes never
/// hands the schema check or a handler params its deserialiser would refuse.
/// (`/rpc` bodies are already bounded by the protocol parser; the flows door's body is not.)
pub const MAX_PARAMS_DEPTH: usize = oncerpc_protocol::MAX_DEPTH - 1;

/// Read `idempotency_key` / `force_retry` out of the params' top-level object and
/// fingerprint the params without them, from the **raw params text**.
///
/// Errors: a duplicate member name at any depth is `-32600` (`duplicate member "amount" in
/// params`): its meaning depends on who reads it (serde_json keeps the last, other parsers
/// the first, and the flows door forwards the text upstream), so it cannot be fingerprinted
/// or executed safely. A non-string `idempotency_key`, a non-boolean `force_retry`, params
/// nested deeper than [`MAX_PARAMS_DEPTH`] or text that is not JSON are `-32602`.
pub fn command_params(params: Option<&RawValue>) -> Result<CommandParams, RpcError> {
    let text = params.map_or("null", |p| p.get());
    let walk = Walker::new(text, true, MAX_PARAMS_DEPTH).run().map_err(WalkError::into_rpc)?;
    Ok(CommandParams { key: walk.key, force_retry: walk.force_retry, fingerprint: sha256_hex(&walk.out) })
}

/// Remove the reserved members from top-level object params (what the JSON Schema sees).
pub fn remove_reserved(value: &mut Value) {
    if let Some(obj) = value.as_object_mut() {
        for k in RESERVED_PARAMS {
            obj.remove(k);
        }
    }
}

/// The canonical form of a JSON text (described on `Walker`), without removing anything: for
/// tests, tools and logs. Same errors as [`command_params`].
pub fn canonical_json(text: &str) -> Result<String, RpcError> {
    let walk = Walker::new(text, false, MAX_PARAMS_DEPTH).run().map_err(WalkError::into_rpc)?;
    // The walker writes valid UTF-8 only: copied slices of a `&str` and ASCII.
    String::from_utf8(walk.out).map_err(|e| RpcError::internal(format_args!("canonical form: {e}")))
}

/// Combine the params key with a header key: both present and different is an error.
pub fn resolve_key(
    params: Option<Arc<str>>,
    header: Option<&Arc<str>>,
) -> Result<Option<Arc<str>>, RpcError> {
    match (params, header) {
        (Some(p), Some(h)) if *p != **h => Err(RpcError::invalid_params(MSG_KEY_CONFLICT)),
        (Some(p), _) => Ok(Some(p)),
        (None, h) => Ok(h.cloned()),
    }
}

/// SHA-256 (hex) of the canonical JSON of `value` (the same canonical form as
/// [`command_params`], nothing removed). For values built in code, such as the
/// (fingerprint, return_step) pair.
pub fn fingerprint(value: &Value) -> String {
    let text = value.to_string();
    match Walker::new(&text, false, usize::MAX).run() {
        Ok(walk) => sha256_hex(&walk.out),
        // serde_json writes valid JSON without duplicate members: not reached.
        Err(_) => sha256_hex(text.as_bytes()),
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// The idempotency key an upstream receives for a keyed execution's step (an HTTP step, an
/// MCP tool step, a call of a re-exported upstream MCP tool, whose `step` is the upstream's
/// own tool name): never the client's key, which another tenant may use too, but the
/// lowercase hex SHA-256 of `tenant NUL method NUL key NUL step`. Stable for every execution of one (tenant, method,
/// key), different for each step, and revealing neither the tenant nor the client's key.
pub fn upstream_key(tenant: &str, method: &str, key: &str, step: &str) -> String {
    let mut h = Sha256::new();
    for part in [tenant, method, key, step] {
        h.update(part.as_bytes());
        h.update([0u8]);
    }
    hex(&h.finalize())
}

/// Lower-case hex. Written out by hand because `write!("{b:02x}")` per byte was ~2% of the
/// server's CPU on the duplicate-command benchmark (docs/BENCHMARKS.md); into bytes, not
/// `char`s: `String::push` encodes each as UTF-8 (706 instructions per 32-byte key). Also the
/// Redis store's hash tags.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = vec![0u8; bytes.len() * 2];
    for (pair, &b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 0x0f)];
    }
    String::from_utf8(out).expect("hex digits are ASCII")
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncerpc_protocol::ErrorCode;
    use serde_json::json;
    use std::borrow::Cow;

    fn raw(text: &str) -> Box<RawValue> {
        RawValue::from_string(text.to_owned()).expect("valid JSON in a test")
    }

    fn params(text: &str) -> Result<CommandParams, RpcError> {
        command_params(Some(&raw(text)))
    }

    fn fp(text: &str) -> String {
        params(text).unwrap_or_else(|e| panic!("{text}: {e:?}")).fingerprint
    }

    fn canon(text: &str) -> String {
        canonical_json(text).unwrap_or_else(|e| panic!("{text}: {e:?}"))
    }

    #[test]
    fn upstream_keys_differ_per_step_tenant_and_key_and_are_stable() {
        let a = upstream_key("acme", "orders.create", "k-1", "reserve");
        assert_eq!(a, upstream_key("acme", "orders.create", "k-1", "reserve"));
        assert_eq!(a.len(), 64);
        for other in [
            upstream_key("acme", "orders.create", "k-1", "confirm"),
            upstream_key("beta", "orders.create", "k-1", "reserve"),
            upstream_key("acme", "orders.create", "k-2", "reserve"),
            upstream_key("acme", "orders.cancel", "k-1", "reserve"),
            // NUL separators: no ambiguity between ("ab","c") and ("a","bc").
            upstream_key("acm", "eorders.create", "k-1", "reserve"),
        ] {
            assert_ne!(a, other);
        }
    }

    #[test]
    fn a_key_is_read_the_same_with_or_without_escapes() {
        let key = |text: &str| params(text).unwrap_or_else(|e| panic!("{text}: {e:?}")).key;
        // Taken between the quotes as it is, and decoded when it holds an escape.
        assert_eq!(key(r#"{"idempotency_key":"k-1","a":1}"#).as_deref(), Some("k-1"));
        assert_eq!(key(r#"{"idempotency_key":"k\u002d1","a":1}"#).as_deref(), Some("k-1"));
        assert_eq!(key(r#"{"a":1,"idempotency_key":"é\"q\\"}"#).as_deref(), Some("é\"q\\"));
        assert_eq!(key(r#"{"idempotency_key":""}"#).as_deref(), Some(""));
        assert!(params(r#"{"idempotency_key":7}"#).is_err(), "not a string");
    }

    #[test]
    fn key_format_messages_are_exact() {
        assert!(validate_key("abc").is_ok());
        assert!(validate_key("A-z_0.9").is_ok());
        assert!(validate_key(&"k".repeat(128)).is_ok());
        assert_eq!(validate_key("ab").unwrap_err().message, MSG_INVALID_LENGTH);
        assert_eq!(validate_key(&"k".repeat(129)).unwrap_err().message, MSG_INVALID_LENGTH);
        assert_eq!(validate_key("").unwrap_err().message, MSG_INVALID_LENGTH);
        assert_eq!(validate_key("a b c").unwrap_err().message, MSG_INVALID_CHARS);
        assert_eq!(validate_key("key/1").unwrap_err().message, MSG_INVALID_CHARS);
        assert_eq!(validate_key("clé1").unwrap_err().message, MSG_INVALID_CHARS);
    }

    #[test]
    fn fingerprint_ignores_member_order_and_reserved_members() {
        let pa = params(r#"{"a":1,"b":{"y":2,"x":[1,2]},"idempotency_key":"k-1"}"#).unwrap();
        let pb = params(r#"{"b":{"x":[1,2],"y":2},"force_retry":true,"a":1}"#).unwrap();
        assert_eq!(pa.fingerprint, pb.fingerprint);
        assert_eq!(pa.key.as_deref(), Some("k-1"));
        assert!(!pa.force_retry);
        assert!(pb.force_retry);
        assert_eq!(pb.key, None);
        assert_ne!(fp(r#"{"a":2,"b":{"x":[1,2],"y":2}}"#), pa.fingerprint);
        assert_eq!(fp(r#"{"a":1,"b":{"x":[1,2],"y":2}}"#), pa.fingerprint, "no reserved members at all");
        // `_meta` (a trace context differs between attempts) is no part of the call.
        let traced = r#"{"a":1,"_meta":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},"b":{"x":[1,2],"y":2}}"#;
        assert_eq!(fp(traced), pa.fingerprint);
        assert_eq!(fp(r#"{"_meta":7,"a":1,"b":{"x":[1,2],"y":2}}"#), pa.fingerprint, "whatever its value");
        assert_ne!(fp(r#"{"a":1,"b":{"_meta":1,"x":[1,2],"y":2}}"#), pa.fingerprint, "top level only");
    }

    #[test]
    fn fingerprint_is_the_lower_hex_sha256_of_the_canonical_json() {
        // Stored records compare fingerprints across versions and processes: the format is
        // fixed. sha256 of `{"a":[1,"x"],"b":null}`, from `sha256sum`.
        const PINNED: &str = "854ef06dc57f5dfed10206344ab2d02e0b6c84b0e19436703a5afd0f1f9f2687";
        assert_eq!(fingerprint(&json!({"b":null,"a":[1,"x"]})), PINNED);
        // The raw-text path gives the same, however the text is spelled.
        assert_eq!(fp(r#"{"b":null,"a":[1,"x"]}"#), PINNED);
        assert_eq!(
            fp(" { \"b\" : null ,\n \"a\" : [ 1.0 , \"\\u0078\" ] , \"idempotency_key\":\"k-1\" } "),
            PINNED
        );
        assert_eq!(canon(r#"{"b":null,"a":[1,"x"]}"#), r#"{"a":[1,"x"],"b":null}"#);
    }

    #[test]
    fn integer_fingerprints_are_what_serde_json_wrote_before() {
        // i64/u64 params used to be fingerprinted as serde_json writes them: unchanged.
        for v in [
            json!({"n": 0, "m": -1, "big": u64::MAX, "small": i64::MIN, "s": "x", "t": true}),
            json!([1, [2, {}]]),
        ] {
            let text = v.to_string();
            assert_eq!(canon(&text).as_bytes(), {
                let mut out = Vec::new();
                Walker::new(&text, false, usize::MAX).run().map(|w| out = w.out).unwrap();
                out
            });
            assert_eq!(fp(&text), fingerprint(&v));
        }
        assert_eq!(canon(&json!({"n": u64::MAX}).to_string()), r#"{"n":18446744073709551615}"#);
        assert_eq!(canon(&json!({"n": i64::MIN}).to_string()), r#"{"n":-9223372036854775808}"#);
    }

    #[test]
    fn equal_numbers_have_one_canonical_form() {
        for (spellings, form) in [
            (&["1", "1.0", "1e0", "10e-1", "0.1e1", "100e-2", "1E+0", "1.000e000", "0.001e3"][..], "1"),
            (&["0", "-0", "0.0", "-0.0", "0e5", "0e-5", "-0E+99", "0.000"][..], "0"),
            (&["100", "1e2", "1E2", "1.00e2", "0.1e3", "10000e-2", "1e+002"][..], "100"),
            (&["-12.5", "-125e-1", "-1.25e1", "-0.125e2", "-12.50"][..], "-12.5"),
            (&["0.1", "1e-1", "10e-2", "0.10", "0.01e1"][..], "0.1"),
            (&["0.00001", "1e-5", "100e-7"][..], "0.00001"),
            (&["0.000001", "1e-6", "0.01e-4"][..], "1e-6"),
            (&["1234567890123456.7", "12345678901234567e-1"][..], "1234567890123456.7"),
            (&["12345678901234567.8", "123456789012345678e-1"][..], "1.23456789012345678e+16"),
            (&["-0.000123e-300", "-1.23e-304"][..], "-1.23e-304"),
            (&["1e400", "10e399", "0.1e401", "1.0e400"][..], "1e+400"),
            (&["1e40", "10000000000000000000000000000000000000000", "1e+40"][..], "1e+40"),
            (
                &[
                    "10000000000000000000000000000000000000001",
                    "1.0000000000000000000000000000000000000001e40",
                ][..],
                "1.0000000000000000000000000000000000000001e+40",
            ),
            (
                &["1e39", "1000000000000000000000000000000000000000", "1.0e39"][..],
                "1000000000000000000000000000000000000000",
            ),
            (&["100000000000000000001", "1.00000000000000000001e20"][..], "100000000000000000001"),
        ] {
            for s in spellings {
                assert_eq!(canon(s), form, "{s}");
            }
        }
    }

    #[test]
    fn distinct_numbers_have_distinct_forms() {
        for (a, b) in [
            ("100000000000000000001", "100000000000000000002"),
            ("1e400", "1e401"),
            ("0.1", "0.10000000000000001"),
            ("1", "-1"),
            ("1", "\"1\""),
            ("1e-400", "0"),
            ("12345678901234567890123456789012345678901", "12345678901234567890123456789012345678902"),
            ("9007199254740993", "9007199254740992"),
        ] {
            assert_ne!(canon(a), canon(b), "{a} vs {b}");
            assert_ne!(fp(&format!("{{\"amount\":{a}}}")), fp(&format!("{{\"amount\":{b}}}")), "{a} vs {b}");
        }
    }

    #[test]
    fn decimals_an_f64_held_exactly_keep_their_old_form() {
        // Fingerprints were taken over serde_json's f64 output: where that was the exact
        // value, the canonical form is the same text, so stored records still match.
        for text in [
            "9.99",
            "0.001",
            "123.456",
            "1.5e300",
            "1e-7",
            "0.000123",
            "-42.5",
            "1234567.891",
            "1e300",
            "5e-324",
            "1.7976931348623157e308",
            "0.1",
            "-0.3",
            "2.5e-5",
            "1e40",
            "1.2345e67",
        ] {
            let old = serde_json::from_str::<Value>(text).unwrap().to_string();
            assert_eq!(canon(text), old, "{text}");
        }
    }

    #[test]
    fn huge_exponents_stay_small() {
        assert_eq!(canon("1e999999999"), "1e+999999999");
        assert_eq!(canon("-2.5e-999999999"), "-2.5e-999999999");
        assert_eq!(canon("25e-1000000000"), "2.5e-999999999");
        // Past i128: adjusted as decimal text, never expanded.
        let nines = "9".repeat(40);
        assert_eq!(canon(&format!("10e{nines}")), format!("1e+1{}", "0".repeat(40)));
        assert_eq!(canon(&format!("0.1e{nines}")), format!("1e+{}8", "9".repeat(39)));
        assert_eq!(canon(&format!("1.5e-{nines}")), format!("1.5e-{nines}"));
        assert_eq!(canon(&format!("15e-{nines}")), format!("1.5e-{}8", "9".repeat(39)));
        assert_eq!(canon(&format!("-0.00150e{nines}")), format!("-1.5e+{}6", "9".repeat(39)));
        assert_eq!(canon(&format!("1e-0000{nines}")), format!("1e-{nines}"));
        let long = "7".repeat(100_000);
        let c = canon(&format!("[1e{long},1.0e{long}]"));
        assert_eq!(c, format!("[1e+{long},1e+{long}]"));
        assert!(c.len() < 200_010);
        assert_ne!(canon(&format!("1e{long}")), canon(&format!("1e{long}1")));
        // A megabyte of zeros in the significand or the exponent is still one digit.
        assert_eq!(canon(&format!("1.{}", "0".repeat(1 << 20))), "1");
        assert_eq!(canon(&format!("0.{}1", "0".repeat(1 << 20))), format!("1e-{}", (1 << 20) + 1));
        assert_eq!(canon(&format!("1e{}", "0".repeat(1 << 20))), "1");
    }

    #[test]
    fn strings_are_compared_unescaped() {
        assert_eq!(canon(r#""a\u0062""#), r#""ab""#);
        assert_eq!(canon(r#""\/\u00e9\ud83d\ude00""#), "\"/é😀\"");
        assert_eq!(canon(r#""\u0001\n\"\\""#), r#""\u0001\n\"\\""#);
        assert_eq!(canon(r#"{"\u0061":1}"#), r#"{"a":1}"#);
        assert_eq!(fp(r#"{"k":"a\u0062"}"#), fp(r#"{"k":"ab"}"#));
        assert_ne!(fp(r#"{"k":"ab"}"#), fp(r#"{"k":"ba"}"#));
        // Lone surrogates are not strings.
        assert_eq!(params(r#"{"k":"\ud800"}"#).unwrap_err().code, ErrorCode::InvalidParams);
    }

    #[test]
    fn members_are_sorted_by_unescaped_name_at_every_depth() {
        assert_eq!(
            canon(r#"{"b":1,"a":{"d":[{"z":1,"y":2}],"c":2},"é":0,"Z":0}"#),
            r#"{"Z":0,"a":{"c":2,"d":[{"y":2,"z":1}]},"b":1,"é":0}"#
        );
        assert_eq!(canon(r#"{"\u0062":1,"a":2}"#), r#"{"a":2,"b":1}"#);
        assert_eq!(canon("[ ]"), "[]");
        assert_eq!(canon(" { } "), "{}");
        assert_eq!(canon(r#"[{},[],[[]],{"a":{}}]"#), r#"[{},[],[[]],{"a":{}}]"#);
    }

    #[test]
    fn duplicate_members_are_invalid_requests_at_any_depth() {
        for (text, name) in [
            (r#"{"amount":1,"amount":2}"#, "amount"),
            (r#"{"amount":1,"amount":1}"#, "amount"),
            (r#"{"a":1,"\u0061":2}"#, "a"),
            (r#"{"x":{"y":[1,{"deep":1,"z":0,"deep":2}]}}"#, "deep"),
            (r#"[{"q":1,"q":2}]"#, "q"),
            (r#"{"idempotency_key":"k-1","idempotency_key":"k-1"}"#, "idempotency_key"),
            (r#"{"force_retry":true,"force_retry":false}"#, "force_retry"),
        ] {
            let e = params(text).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidRequest, "{text}");
            assert_eq!(e.message, format!("duplicate member \"{name}\" in params"), "{text}");
            assert_eq!(canonical_json(text).unwrap_err().code, ErrorCode::InvalidRequest);
        }
        let long = "n".repeat(10_000);
        let e = params(&format!(r#"{{"{long}":1,"{long}":2}}"#)).unwrap_err();
        assert!(e.message.len() < 120, "{}", e.message);
    }

    #[test]
    fn reserved_members_are_only_removed_at_the_top_level() {
        let p = params(r#"{"a":{"idempotency_key":"inner","force_retry":true},"idempotency_key":"k-1"}"#)
            .unwrap();
        assert_eq!(p.key.as_deref(), Some("k-1"));
        assert!(!p.force_retry);
        assert_eq!(p.fingerprint, sha256_hex(br#"{"a":{"force_retry":true,"idempotency_key":"inner"}}"#));
        // Array params have no reserved members.
        let p = params(r#"["idempotency_key","k-1"]"#).unwrap();
        assert_eq!(p.key, None);
        assert_eq!(p.fingerprint, sha256_hex(br#"["idempotency_key","k-1"]"#));
        // An escaped name is the same name.
        let p = params(r#"{"idempotency\u005fkey":"k-2","a":1}"#).unwrap();
        assert_eq!(p.key.as_deref(), Some("k-2"));
        assert_eq!(p.fingerprint, fp(r#"{"a":1}"#));
        // Only reserved members: the empty object. No params: null.
        assert_eq!(fp(r#"{"idempotency_key":"k-1","force_retry":false}"#), sha256_hex(b"{}"));
        assert_eq!(command_params(None).unwrap().fingerprint, sha256_hex(b"null"));
        let mut v = json!({"a":{"idempotency_key":"x"},"idempotency_key":"k","force_retry":true});
        remove_reserved(&mut v);
        assert_eq!(v, json!({"a":{"idempotency_key":"x"}}));
    }

    #[test]
    fn header_and_params_keys_must_agree() {
        let h: Arc<str> = "abc".into();
        assert_eq!(resolve_key(Some("abc".into()), Some(&h)).unwrap().as_deref(), Some("abc"));
        assert_eq!(resolve_key(None, Some(&h)).unwrap().as_deref(), Some("abc"));
        assert_eq!(resolve_key(Some("xyz".into()), Some(&h)).unwrap_err().message, MSG_KEY_CONFLICT);
        assert_eq!(resolve_key(None, None).unwrap(), None);
    }

    #[test]
    fn wrong_types_of_reserved_members_are_invalid_params() {
        for text in [
            r#"{"idempotency_key": 5}"#,
            r#"{"idempotency_key": null}"#,
            r#"{"idempotency_key": ["k-1"]}"#,
            r#"{"force_retry": "yes"}"#,
            r#"{"force_retry": 1}"#,
            r#"{"force_retry": null}"#,
        ] {
            assert_eq!(params(text).unwrap_err().code, ErrorCode::InvalidParams, "{text}");
        }
        assert_eq!(params(r#"{"idempotency_key":"k\u002d1"}"#).unwrap().key.as_deref(), Some("k-1"));
    }

    #[test]
    fn deep_or_broken_text_is_an_error_not_a_panic() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(params(&deep(MAX_PARAMS_DEPTH)).is_ok());
        assert_eq!(params(&deep(MAX_PARAMS_DEPTH + 1)).unwrap_err().code, ErrorCode::InvalidParams);
        let objects = |n: usize| format!("{}1{}", r#"{"a":"#.repeat(n), "}".repeat(n));
        assert!(params(&objects(MAX_PARAMS_DEPTH)).is_ok());
        assert!(params(&objects(MAX_PARAMS_DEPTH + 1)).is_err());
        // serde_json agrees on the limit, so the schema's Value can always be built.
        assert!(serde_json::from_str::<Value>(&deep(MAX_PARAMS_DEPTH)).is_ok());
        assert!(serde_json::from_str::<Value>(&deep(MAX_PARAMS_DEPTH + 1)).is_err());
        // A Value-built fingerprint has no limit and no recursion in the walk.
        assert_eq!(canonical_json(&deep(200_000)).unwrap_err().code, ErrorCode::InvalidParams);
        for bad in [
            "",
            " ",
            "{",
            "}",
            "[",
            "]",
            "[1,]",
            "{\"a\":1,}",
            "{\"a\"}",
            "{\"a\":}",
            "{1:2}",
            "01",
            "1.",
            ".1",
            "1e",
            "1e+",
            "-",
            "--1",
            "+1",
            "tru",
            "nul",
            "\"abc",
            "\"\\",
            "\"\\u12\"",
            "\"\\x\"",
            "[1 2]",
            "{\"a\":1 \"b\":2}",
            "1 2",
            "\"\u{1}\"",
            "[\"a\",",
            "NaN",
            "Infinity",
            "{\"a\":1]",
            "[1}",
        ] {
            assert!(canonical_json(bad).is_err(), "{bad:?}");
            assert!(without_members(bad, &RESERVED_PARAMS).is_ok() || bad.starts_with('{'), "{bad:?}");
        }
    }

    #[test]
    fn members_are_removed_from_the_text_byte_for_byte() {
        let text = r#"{ "amount" : 100000000000000000001 , "idempotency_key":"k-1","note":"1.0","force_retry":true,"x":[1.50e2] }"#;
        assert_eq!(
            without_members(text, &RESERVED_PARAMS).unwrap(),
            r#"{"amount" : 100000000000000000001,"note":"1.0","x":[1.50e2]}"#
        );
        let untouched = r#"{"b":1,  "a":{"idempotency_key":"inner"}}"#;
        assert!(
            matches!(without_members(untouched, &RESERVED_PARAMS).unwrap(), Cow::Borrowed(s) if s == untouched)
        );
        assert_eq!(without_members(r#"{"idempotency\u005fkey":"k"}"#, &RESERVED_PARAMS).unwrap(), "{}");
        assert_eq!(without_members("[1,2]", &RESERVED_PARAMS).unwrap(), "[1,2]");
        assert_eq!(without_members("{}", &RESERVED_PARAMS).unwrap(), "{}");
        assert_eq!(
            without_members(
                r#"{"force_retry":false,"a":{"b":[{"c":"}"}]},"idempotency_key":"k"}"#,
                &RESERVED_PARAMS
            )
            .unwrap(),
            r#"{"a":{"b":[{"c":"}"}]}}"#
        );
    }
}
