//! The method registry: names → (spec, compiled schema, handler).

use std::collections::HashMap;
use std::sync::Arc;

use crate::method::{Handler, KeySource, Kind, Method, MethodSpec};

/// Why a method could not be registered.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("method {0:?} is registered twice")]
    Duplicate(String),
    #[error("method name {0:?} is reserved: names beginning with \"rpc.\" belong to the protocol")]
    Reserved(String),
    #[error("method name must not be empty")]
    EmptyName,
    #[error(
        "method {0:?} is a command and cannot allow notifications: a command needs an id to be answered and deduplicated"
    )]
    CommandNotification(String),
    #[error("method {0:?}: params_schema is not a valid JSON Schema: {1}")]
    Schema(String, String),
    #[error("method {0:?}: timeout must be greater than zero")]
    ZeroTimeout(String),
    #[error("method {0:?}: {1}")]
    Webhook(String, String),
}

/// Every method the server answers. Built once, then shared read-only by the dispatcher.
#[derive(Default)]
pub struct Registry {
    /// foldhash, seeded per process: every request looks its method up here, and SipHash was
    /// ~250 instructions of each (of a batch's entries too).
    methods: HashMap<Arc<str>, Arc<Method>, foldhash::fast::RandomState>,
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Register a method. Its params schema is compiled here, so a bad schema is a start-up
    /// error, never a request-time one.
    pub fn register(
        &mut self,
        name: &str,
        spec: MethodSpec,
        handler: impl Handler,
    ) -> Result<&mut Self, RegistryError> {
        self.register_arc(name, spec, Arc::new(handler))
    }

    pub fn register_arc(
        &mut self,
        name: &str,
        spec: MethodSpec,
        handler: Arc<dyn Handler>,
    ) -> Result<&mut Self, RegistryError> {
        if self.methods.contains_key(name) {
            return Err(RegistryError::Duplicate(name.into()));
        }
        let method = Method::build(name, spec, handler)?;
        let name = method.name.clone();
        self.methods.insert(name, Arc::new(method));
        Ok(self)
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Arc<Method>> {
        self.methods.get(name)
    }

    /// The spec of a method, if registered.
    pub fn spec(&self, name: &str) -> Option<&MethodSpec> {
        self.methods.get(name).map(|m| &m.spec)
    }

    /// Registered method names, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.methods.keys().map(|k| k.as_ref()).collect();
        v.sort_unstable();
        v
    }

    /// The longest handler deadline (used to check that leases outlive every method).
    pub fn max_timeout(&self) -> Option<std::time::Duration> {
        self.methods.values().map(|m| m.spec.timeout).max()
    }

    pub fn len(&self) -> usize {
        self.methods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.methods.is_empty()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Method> {
        self.methods.values().map(|m| m.as_ref())
    }
}

/// SPEC §15: derived keys and fingerprint subsets belong to commands; pointers must be JSON
/// pointers and header names header names (kept in lower case).
fn check_webhook_rules(spec: &mut MethodSpec) -> Result<(), String> {
    let derived = spec.key_from.is_some() || spec.fingerprint_from.is_some();
    if derived && spec.kind != Kind::Command {
        return Err("key_from, key_header and fingerprint_from apply to commands only".into());
    }
    match &mut spec.key_from {
        Some(KeySource::Pointer(p)) => {
            crate::derived::check_pointer(p).map_err(|e| format!("key_from: {e}"))?
        }
        Some(KeySource::Header(h)) => {
            let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            if h.is_empty() || !h.bytes().all(token) {
                return Err(format!("key_header: {h:?} is not a header name"));
            }
            h.make_ascii_lowercase();
        }
        None => {}
    }
    if let Some(pointers) = &spec.fingerprint_from {
        crate::derived::check_fingerprint_pointers(pointers).map_err(|e| format!("fingerprint_from: {e}"))?;
    }
    Ok(())
}

impl Method {
    /// A method checked as registration checks it (name, kind rules, timeout, webhook rules)
    /// with its params schema compiled.
    pub(crate) fn build(
        name: &str,
        spec: MethodSpec,
        handler: Arc<dyn Handler>,
    ) -> Result<Method, RegistryError> {
        if name.is_empty() {
            return Err(RegistryError::EmptyName);
        }
        if name.starts_with("rpc.") {
            return Err(RegistryError::Reserved(name.into()));
        }
        if spec.kind == Kind::Command && spec.notification_allowed {
            return Err(RegistryError::CommandNotification(name.into()));
        }
        if spec.timeout.is_zero() {
            return Err(RegistryError::ZeroTimeout(name.into()));
        }
        let mut spec = spec;
        check_webhook_rules(&mut spec).map_err(|e| RegistryError::Webhook(name.into(), e))?;
        let validator = match &spec.params_schema {
            None => None,
            Some(schema) => Some(
                jsonschema::validator_for(schema)
                    .map_err(|e| RegistryError::Schema(name.into(), e.to_string()))?,
            ),
        };
        Ok(Method { name: name.into(), spec, validator, handler, metrics: Default::default() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn register(spec: MethodSpec) -> Result<(), RegistryError> {
        let handler =
            crate::method::typed(|_, _: serde_json::Value| async { Ok::<_, oncerpc_protocol::RpcError>(1) });
        Registry::new().register("hook", spec, handler).map(|_| ())
    }

    /// `fingerprint_from = ["/a", "/a"]` made every request `400` (its fingerprint document
    /// names a member twice): refused at registration, with the key named.
    #[test]
    fn a_fingerprint_subset_listing_a_pointer_twice_is_refused() {
        let pointers = |ps: &[&str]| ps.iter().map(|p| p.to_string()).collect::<Vec<_>>();
        let e = register(MethodSpec::command().fingerprint_from(pointers(&["/a", "/a"]))).unwrap_err();
        let text = e.to_string();
        assert!(text.contains("fingerprint_from") && text.contains("listed twice"), "{text}");
        assert!(register(MethodSpec::command().fingerprint_from(pointers(&["/a", "/a/b"]))).is_ok());
    }
}
