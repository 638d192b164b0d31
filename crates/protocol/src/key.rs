//! The idempotency key's format (SPEC §3), in one place: the server refuses a key that breaks
//! it, and a client refuses it before sending anything.

use std::fmt;

/// Why a key breaks the format of SPEC §3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyFormatError {
    /// A character outside `A–Z a–z 0–9 - _ .`.
    InvalidCharacters,
    /// Shorter than 3 or longer than 128 characters.
    InvalidLength,
}

impl KeyFormatError {
    /// The message the server answers with (`-32602`).
    pub const fn message(self) -> &'static str {
        match self {
            KeyFormatError::InvalidCharacters => "invalid idempotency key: invalid characters",
            KeyFormatError::InvalidLength => {
                "invalid idempotency key: key length must be between 3 and 128 characters"
            }
        }
    }
}

impl fmt::Display for KeyFormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for KeyFormatError {}

/// SPEC §3 key format: 3–128 characters of `A–Z a–z 0–9 - _ .`.
///
/// ```
/// use oncerpc_protocol::{KeyFormatError, check_key};
/// assert!(check_key("order-1001").is_ok());
/// assert_eq!(check_key("ab"), Err(KeyFormatError::InvalidLength));
/// assert_eq!(check_key("key/1"), Err(KeyFormatError::InvalidCharacters));
/// ```
pub fn check_key(key: &str) -> Result<(), KeyFormatError> {
    if !key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')) {
        return Err(KeyFormatError::InvalidCharacters);
    }
    if !(3..=128).contains(&key.len()) {
        return Err(KeyFormatError::InvalidLength);
    }
    Ok(())
}
