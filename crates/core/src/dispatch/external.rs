//! Methods that are not in the registry: tools another server offers, found while the
//! server runs (an MCP upstream's, SPEC §16b). The registry stays what it is, built once and
//! read without locks; a door that holds an [`ExternalMethod`] calls it through the same
//! policy, schema, idempotency engine, access line and metrics as a registered method.

use std::sync::Arc;
use std::time::Instant;

use oncerpc_protocol::{Outcome, RawValue};

use super::ids::generated_id;
use super::{Dispatcher, IdempotencyInfo, RequestMeta};
use crate::method::{Handler, Method, MethodSpec};
use crate::registry::RegistryError;

/// Finds the external method of a name, as the door that offers it knows it now (`None`: not
/// offered now, e.g. its server is not connected yet). A dispatcher given one
/// ([`Dispatcher::resolve_external`]) runs events of external methods: submitted, resumed
/// after a crash (an event whose method is not found now waits for a later pass), re-driven.
pub type ExternalResolver = Arc<dyn Fn(&str) -> Option<ExternalMethod> + Send + Sync>;

/// A method built for one dispatcher outside its registry ([`Dispatcher::external_method`]).
#[derive(Clone)]
pub struct ExternalMethod(Arc<Method>);

impl ExternalMethod {
    pub fn name(&self) -> &str {
        &self.0.name
    }

    pub fn spec(&self) -> &MethodSpec {
        &self.0.spec
    }
}

impl std::fmt::Debug for ExternalMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalMethod").field("name", &self.0.name).field("kind", &self.0.spec.kind).finish()
    }
}

impl Dispatcher {
    /// A method served by this dispatcher but not registered: checked as registration checks
    /// it, counted under its name. Its idempotency scope is `(tenant, name, key)` like any
    /// method's, so it must not share a name with a registered one.
    pub fn external_method(
        &self,
        name: &str,
        spec: MethodSpec,
        handler: Arc<dyn Handler>,
    ) -> Result<ExternalMethod, RegistryError> {
        if self.registry.get(name).is_some() {
            return Err(RegistryError::Duplicate(name.into()));
        }
        let method = Method::build(name, spec, handler)?;
        let _ = method.metrics.set(self.metrics.for_method(&method.name, method.spec.kind.as_str()));
        Ok(ExternalMethod(Arc::new(method)))
    }

    /// Where this dispatcher finds external methods for their events; set once (a second
    /// resolver is ignored).
    pub fn resolve_external(&self, resolver: ExternalResolver) {
        let _ = self.external.set(resolver);
    }

    /// The method called `name`: the registry's, else an external one offered now.
    pub(crate) fn method(&self, name: &str) -> Option<Arc<Method>> {
        match self.registry.get(name) {
            Some(m) => Some(m.clone()),
            None => self.external.get().and_then(|resolve| resolve(name)).map(|m| m.0),
        }
    }

    /// [`call`](Self::call) for an external method.
    pub async fn call_external(
        &self,
        method: &ExternalMethod,
        params: Option<&RawValue>,
        meta: &RequestMeta,
    ) -> (Outcome, Option<IdempotencyInfo>, Arc<str>) {
        let cid = meta.correlation_id.clone().unwrap_or_else(generated_id);
        let started = Instant::now();
        let (outcome, info) =
            self.execute_observed(&method.0, params, cid.clone(), meta, None, started).await;
        (outcome, info, cid)
    }
}
