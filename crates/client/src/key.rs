//! Which key a command is sent with.

use crate::error::Error;

/// The key a command carries on every attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeyChoice {
    /// A fresh UUIDv7, made once per call.
    Auto,
    /// The caller's.
    Given(String),
    /// None: the command is sent once, never retried.
    None,
}

impl KeyChoice {
    /// The key to use, checked (SPEC §3) before anything is sent.
    pub(crate) fn resolve(&self) -> Result<Option<String>, Error> {
        match self {
            KeyChoice::Auto => Ok(Some(new_key())),
            KeyChoice::Given(k) => {
                oncerpc_protocol::check_key(k)?;
                Ok(Some(k.clone()))
            }
            KeyChoice::None => Ok(None),
        }
    }
}

/// A new idempotency key: a UUIDv7 (time-ordered, so keys sort by creation in the store).
///
/// ```
/// let key = oncerpc_client::new_key();
/// assert!(oncerpc_protocol::check_key(&key).is_ok());
/// assert_ne!(key, oncerpc_client::new_key());
/// ```
pub fn new_key() -> String {
    uuid::Uuid::now_v7().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_key_is_refused_locally() {
        assert!(matches!(KeyChoice::Given("a b".into()).resolve(), Err(Error::InvalidKey(_))));
        assert!(matches!(KeyChoice::Given("ab".into()).resolve(), Err(Error::InvalidKey(_))));
        assert_eq!(KeyChoice::Given("order-1".into()).resolve().unwrap().as_deref(), Some("order-1"));
        assert_eq!(KeyChoice::None.resolve().unwrap(), None);
    }

    #[test]
    fn auto_keys_are_uuid_v7() {
        let k = KeyChoice::Auto.resolve().unwrap().unwrap();
        let u = uuid::Uuid::parse_str(&k).unwrap();
        assert_eq!(u.get_version_num(), 7);
    }
}
