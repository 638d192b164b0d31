//! What a caller may call (SPEC §20): a method's `scopes` must all be held by the caller. An
//! API key of the tenant's (`api_keys`), a gateway without tenants and stdio hold every scope;
//! an access token or a scoped key (`[[tenants.keys]]`) holds the scopes it names.

use std::sync::Arc;

use oncerpc_protocol::{ErrorCode, RpcError};

/// The scopes a caller holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Grant {
    /// Every scope of its tenant.
    #[default]
    All,
    /// Only these.
    Scopes(Arc<[String]>),
}

impl Grant {
    /// The caller holds exactly `scopes`.
    pub fn scopes(scopes: impl IntoIterator<Item = String>) -> Grant {
        Grant::Scopes(scopes.into_iter().collect())
    }

    /// The first scope of `required` this caller lacks; `None`: it may call.
    pub fn lacks<'a>(&self, required: &'a [String]) -> Option<&'a str> {
        match self {
            Grant::All => None,
            Grant::Scopes(held) => required.iter().find(|r| !held.contains(r)).map(String::as_str),
        }
    }

    /// Whether the caller may call a method that requires `required`.
    pub fn allows(&self, required: &[String]) -> bool {
        self.lacks(required).is_none()
    }
}

/// `-32010 Forbidden` for `method`: what it requires in `data.scopes` (for a
/// `WWW-Authenticate: Bearer error="insufficient_scope", scope="…"` and for a client that asks
/// for a token with more), the message naming the first scope missing.
pub fn forbidden(method: &str, required: &[String], missing: &str) -> RpcError {
    RpcError::with_message(
        ErrorCode::Forbidden,
        format!(
            "Forbidden: calling {:?} requires the scope {missing:?}, which the caller's credentials do not hold",
            crate::LogSafe(method)
        ),
    )
    .data(serde_json::json!({ "scopes": required }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_must_hold_every_scope_a_method_requires() {
        let required = vec!["orders:write".to_owned(), "orders:read".to_owned()];
        assert_eq!(Grant::All.lacks(&required), None);
        let some = Grant::scopes(["orders:read".to_owned()]);
        assert_eq!(some.lacks(&required), Some("orders:write"));
        assert!(some.allows(&[]));
        let both = Grant::scopes(["orders:read".to_owned(), "orders:write".to_owned(), "x".to_owned()]);
        assert!(both.allows(&required));
        let e = forbidden("orders.create", &required, "orders:write");
        assert_eq!((e.code.code(), e.http_status()), (-32010, 403));
        assert!(e.message.contains("\"orders:write\""), "{}", e.message);
        assert_eq!(e.data.unwrap().get(), r#"{"scopes":["orders:write","orders:read"]}"#);
    }
}
