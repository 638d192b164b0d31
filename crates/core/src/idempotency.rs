//! Idempotency rules of DESIGN §3 that do not touch a store: where the key comes from, what
//! a valid key is, the mode, and the fingerprint of params.

use std::sync::Arc;
use std::time::Duration;

use oncerpc_protocol::RpcError;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::dispatch::RESERVED_PARAMS;

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
}

impl Default for IdempotencyConfig {
    fn default() -> Self {
        IdempotencyConfig {
            mode: Mode::Dev,
            lease: Duration::from_secs(60),
            ttl: Duration::from_secs(86_400),
        }
    }
}

pub const MSG_INVALID_CHARS: &str = "invalid idempotency key: invalid characters";
pub const MSG_INVALID_LENGTH: &str =
    "invalid idempotency key: key length must be between 3 and 128 characters";
pub const MSG_KEY_REQUIRED: &str = "idempotency_key is required for commands";
pub const MSG_KEY_CONFLICT: &str =
    "invalid idempotency key: params.idempotency_key and the idempotency key header differ";

/// DESIGN §3 key format: 3–128 characters of `A–Z a–z 0–9 - _ .`.
pub fn validate_key(key: &str) -> Result<(), RpcError> {
    if !key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')) {
        return Err(RpcError::invalid_params(MSG_INVALID_CHARS));
    }
    if !(3..=128).contains(&key.len()) {
        return Err(RpcError::invalid_params(MSG_INVALID_LENGTH));
    }
    Ok(())
}

/// The idempotency-related parts of a command's params.
#[derive(Debug, Default)]
pub struct CommandParams {
    pub key: Option<Arc<str>>,
    pub force_retry: bool,
    pub fingerprint: String,
}

/// Read `idempotency_key` / `force_retry` out of params (which are then removed from
/// `value`) and fingerprint what remains.
pub fn command_params(value: &mut Value) -> Result<CommandParams, RpcError> {
    let mut out = CommandParams::default();
    if let Some(obj) = value.as_object_mut() {
        match obj.remove(RESERVED_PARAMS[0]) {
            None => {}
            Some(Value::String(k)) => out.key = Some(k.into()),
            Some(_) => return Err(RpcError::invalid_params("invalid idempotency key: must be a string")),
        }
        match obj.remove(RESERVED_PARAMS[1]) {
            None => {}
            Some(Value::Bool(b)) => out.force_retry = b,
            Some(_) => return Err(RpcError::invalid_params("invalid params: force_retry must be a boolean")),
        }
    }
    out.fingerprint = fingerprint(value);
    Ok(out)
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

/// SHA-256 (hex) of the canonical JSON of `value`: object members sorted by name, no
/// insignificant whitespace, numbers as serde_json writes them.
pub fn fingerprint(value: &Value) -> String {
    let mut buf = Vec::with_capacity(128);
    canonical(value, &mut buf);
    hex(&Sha256::digest(&buf))
}

/// Lower-case hex. Written out by hand because `write!("{b:02x}")` per byte was ~2% of the
/// server's CPU on the duplicate-command benchmark (docs/BENCHMARKS.md).
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0x0f)] as char);
    }
    out
}

fn canonical(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (k, v)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                let _ = serde_json::to_writer(&mut *out, k);
                out.push(b':');
                canonical(v, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical(v, out);
            }
            out.push(b']');
        }
        scalar => {
            let _ = serde_json::to_writer(&mut *out, scalar);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        let mut a = json!({"a":1,"b":{"y":2,"x":[1,2]},"idempotency_key":"k-1"});
        let mut b = json!({"b":{"x":[1,2],"y":2},"force_retry":true,"a":1});
        let pa = command_params(&mut a).unwrap();
        let pb = command_params(&mut b).unwrap();
        assert_eq!(pa.fingerprint, pb.fingerprint);
        assert_eq!(pa.key.as_deref(), Some("k-1"));
        assert!(pb.force_retry);
        let mut c = json!({"a":2,"b":{"x":[1,2],"y":2}});
        assert_ne!(command_params(&mut c).unwrap().fingerprint, pa.fingerprint);
    }

    #[test]
    fn fingerprint_is_the_lower_hex_sha256_of_the_canonical_json() {
        // Stored records compare fingerprints across versions and processes: the format is
        // fixed. sha256 of `{"a":[1,"x"],"b":null}`, from `sha256sum`.
        assert_eq!(
            fingerprint(&json!({"b":null,"a":[1,"x"]})),
            "854ef06dc57f5dfed10206344ab2d02e0b6c84b0e19436703a5afd0f1f9f2687"
        );
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
        let mut v = json!({"idempotency_key": 5});
        assert_eq!(command_params(&mut v).unwrap_err().code, oncerpc_protocol::ErrorCode::InvalidParams);
        let mut v = json!({"force_retry": "yes"});
        assert_eq!(command_params(&mut v).unwrap_err().code, oncerpc_protocol::ErrorCode::InvalidParams);
    }
}
