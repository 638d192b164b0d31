//! The background budget (`limits.max_background`, SPEC §12): keyed executions and async
//! events running at once, including those whose client left, and each tenant's share of it.
//!
//! A place is taken before anything is claimed, and refused at once (`-32007`, no queueing),
//! so a refused request leaves nothing behind. Background work counts against the tenant that
//! made it: a tenant with a share can hold at most that many places, so one tenant filling the
//! pool with async events is refused itself while the others keep theirs.

use std::collections::HashMap;
use std::sync::Arc;

use oncerpc_protocol::{ErrorCode, RpcError};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::metrics::Metrics;

/// A place in the budget, held until the execution's outcome is stored.
#[derive(Debug)]
pub struct Permit {
    _global: OwnedSemaphorePermit,
    _tenant: Option<OwnedSemaphorePermit>,
}

/// The global pool and the tenants' shares.
pub(crate) struct Budget {
    global: Arc<Semaphore>,
    /// The pool's size.
    max: usize,
    /// Tenants with a share below the pool; a tenant not named here has only the pool.
    shares: HashMap<Arc<str>, Arc<Semaphore>>,
    metrics: Metrics,
}

impl Budget {
    /// A pool of `max` places (at least one); `shares` names each tenant's own ceiling (at
    /// least one place, and no more than the pool, which a larger one would be anyway).
    pub fn new(max: usize, shares: &HashMap<Arc<str>, usize>, metrics: Metrics) -> Self {
        let max = max.max(1);
        let shares = shares
            .iter()
            .filter(|(_, share)| **share < max)
            .map(|(tenant, share)| (tenant.clone(), Arc::new(Semaphore::new((*share).max(1)))))
            .collect();
        Budget { global: Arc::new(Semaphore::new(max)), max, shares, metrics }
    }

    /// Places taken now, and the pool's size.
    pub fn usage(&self) -> (usize, usize) {
        (self.max.saturating_sub(self.global.available_permits()), self.max)
    }

    /// A place for work of `tenant`, or `-32007 Overloaded` at once: the tenant's share is
    /// checked first (a tenant over it is refused without touching the others' places), then
    /// the pool.
    pub fn permit(&self, tenant: &str) -> Result<Permit, RpcError> {
        let tenant_place = match self.shares.get(tenant) {
            None => None,
            Some(share) => Some(share.clone().try_acquire_owned().map_err(|_| {
                self.metrics.tenant_refused(tenant, "background");
                tracing::warn!(
                    tenant = %crate::LogSafe(tenant),
                    "the tenant's share of the execution budget (tenants.max_background) is spent: refused before claiming"
                );
                RpcError::new(ErrorCode::Overloaded)
            })?),
        };
        let global = self.global.clone().try_acquire_owned().map_err(|_| {
            self.metrics.overloaded("background");
            tracing::warn!("execution budget (limits.max_background) spent: refused before claiming");
            RpcError::new(ErrorCode::Overloaded)
        })?;
        Ok(Permit { _global: global, _tenant: tenant_place })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(max: usize, shares: &[(&str, usize)]) -> Budget {
        let shares = shares.iter().map(|(t, n)| (Arc::from(*t), *n)).collect();
        Budget::new(max, &shares, Metrics::new())
    }

    #[test]
    fn a_tenant_over_its_share_is_refused_and_the_others_are_not() {
        let b = budget(4, &[("greedy", 2), ("other", 2)]);
        let held: Vec<Permit> = (0..2).map(|_| b.permit("greedy").expect("within the share")).collect();
        let refused = b.permit("greedy").expect_err("over the share");
        assert_eq!(refused.code, ErrorCode::Overloaded);
        let other = b.permit("other").expect("another tenant keeps its places");
        drop(held);
        b.permit("greedy").expect("places come back when the work ends");
        drop(other);
    }

    #[test]
    fn the_pool_is_the_ceiling_and_tenants_without_a_share_use_only_it() {
        let b = budget(3, &[("a", 10)]);
        let held: Vec<Permit> =
            (0..3).map(|_| b.permit("a").expect("a share above the pool is the pool")).collect();
        assert_eq!(b.permit("b").expect_err("the pool is spent").code, ErrorCode::Overloaded);
        assert_eq!(b.permit("a").expect_err("the pool is spent").code, ErrorCode::Overloaded);
        drop(held);
        b.permit("b").expect("a tenant without a share has the pool");
    }

    #[test]
    fn a_refusal_by_the_pool_gives_the_tenant_place_back() {
        let b = budget(1, &[]);
        let b = Budget { shares: [(Arc::from("t"), Arc::new(Semaphore::new(1)))].into(), ..b };
        let other = b.permit("u").expect("the pool's one place");
        assert!(b.permit("t").is_err(), "the pool is spent");
        drop(other);
        b.permit("t").expect("the tenant's place was not kept by the refused attempt");
    }
}
