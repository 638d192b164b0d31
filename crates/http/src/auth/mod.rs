//! Who is calling (SPEC §4, §20): tenants and their API keys — plaintext or `sha256:`, compared
//! in constant time, a plain `api_keys` entry holding every scope of its tenant, a
//! `[[tenants.keys]]` entry the scopes it names — and the issuers' access tokens ([`tokens`]).

mod door;
pub(crate) use door::{challenge_of, insufficient_scope};
pub mod introspect;
pub mod tokens;

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use oncerpc_core::Grant;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// A caller, as its credentials say: the tenant it acts for, what it may call, and who it is
/// (a token's `sub`, a scoped key's `name`) for the audit trail.
#[derive(Debug, Clone)]
pub struct Caller {
    pub tenant: Arc<str>,
    pub grant: Grant,
    pub subject: Option<Arc<str>>,
}

impl Caller {
    /// A caller with every scope of `tenant` and no name.
    pub fn of(tenant: Arc<str>) -> Caller {
        Caller { tenant, grant: Grant::All, subject: None }
    }
}

/// One configured API key.
#[derive(Clone)]
struct Key {
    tenant: Arc<str>,
    /// SHA-256 of the key.
    digest: [u8; 32],
    grant: Grant,
    name: Option<Arc<str>>,
}

/// The configured tenants. Empty: one open default tenant.
#[derive(Clone, Default)]
pub struct Tenants {
    /// The configured tenants' names (a tenant may have no key: its callers bring tokens).
    names: Vec<Arc<str>>,
    /// Every configured key.
    keys: Vec<Key>,
    /// Each limited tenant's own limiters, built once (shared by clones).
    limiters: HashMap<Arc<str>, Arc<TenantLimiter>>,
}

/// A tenant's own limits (SPEC §12): all absent = only the global limits apply.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TenantLimits {
    /// Sustained requests per second (token bucket); `None` = unlimited.
    pub rate_per_sec: Option<f64>,
    /// Bucket size; default `ceil(rate_per_sec)`.
    pub burst: Option<u32>,
    /// Requests of this tenant served at once; more are refused at once.
    pub max_in_flight: Option<usize>,
}

/// The limiters of one tenant.
pub(crate) struct TenantLimiter {
    /// What it was made from (a reload keeps a limiter whose limits are the same).
    limits: TenantLimits,
    rate: Option<DefaultDirectRateLimiter>,
    clock: DefaultClock,
    pub(crate) in_flight: Option<tokio::sync::Semaphore>,
}

/// Why a tenant's request was refused.
pub(crate) enum TenantRefusal {
    /// Over the rate; retry after this long.
    RateLimited(Duration),
    /// Over the tenant's `max_in_flight`.
    Overloaded,
}

impl TenantLimiter {
    fn new(name: &str, limits: TenantLimits) -> Result<TenantLimiter, String> {
        let rate = match limits.rate_per_sec {
            None => None,
            Some(rate) => {
                if !(rate.is_finite() && rate > 0.0 && rate <= 1e9) {
                    return Err(format!("tenants.{name}.rate_per_sec must be a number greater than 0"));
                }
                let burst = limits.burst.unwrap_or_else(|| rate.ceil().min(u32::MAX as f64) as u32);
                let burst = NonZeroU32::new(burst)
                    .ok_or_else(|| format!("tenants.{name}.burst must be at least 1"))?;
                let period = Duration::from_secs_f64(1.0 / rate).max(Duration::from_nanos(1));
                let quota = Quota::with_period(period)
                    .ok_or_else(|| format!("tenants.{name}.rate_per_sec is too large"))?
                    .allow_burst(burst);
                Some(RateLimiter::direct(quota))
            }
        };
        let in_flight = match limits.max_in_flight {
            None => None,
            Some(0) => return Err(format!("tenants.{name}.max_in_flight must be at least 1")),
            Some(n) => Some(tokio::sync::Semaphore::new(n.min(tokio::sync::Semaphore::MAX_PERMITS))),
        };
        Ok(TenantLimiter { limits, rate, clock: DefaultClock::default(), in_flight })
    }

    /// The rate, then the in-flight check; the permit (if any) is held for the request.
    pub(crate) fn admit(&self) -> Result<Option<tokio::sync::SemaphorePermit<'_>>, TenantRefusal> {
        if let Some(rate) = &self.rate
            && let Err(not_until) = rate.check()
        {
            return Err(TenantRefusal::RateLimited(not_until.wait_time_from(self.clock.now())));
        }
        match &self.in_flight {
            None => Ok(None),
            Some(sem) => sem.try_acquire().map(Some).map_err(|_| TenantRefusal::Overloaded),
        }
    }
}

impl std::fmt::Debug for Tenants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material, not even hashes.
        f.debug_struct("Tenants")
            .field("keys", &self.keys.len())
            .field("limited", &self.limiters.len())
            .finish()
    }
}

impl Tenants {
    /// Build from `(name, api_keys)`; a key is plaintext or `sha256:<64 hex digits>`.
    pub fn new<'a>(tenants: impl IntoIterator<Item = (&'a str, &'a [String])>) -> Result<Tenants, String> {
        let mut out = Tenants::default();
        for (name, api_keys) in tenants {
            let name: Arc<str> = Arc::from(name);
            out.names.push(name.clone());
            for k in api_keys {
                out.keys.push(Key {
                    tenant: name.clone(),
                    digest: digest_of(&name, k)?,
                    grant: Grant::All,
                    name: None,
                });
            }
        }
        Ok(out)
    }

    /// A `[[tenants.keys]]` entry of tenant `tenant`: `key` (plaintext or `sha256:`) holds
    /// only `scopes`, and names its caller `name` in the audit trail.
    pub fn add_scoped_key(
        &mut self,
        tenant: &str,
        key: &str,
        name: &str,
        scopes: &[String],
    ) -> Result<(), String> {
        let tenant: Arc<str> = self
            .names
            .iter()
            .find(|n| ***n == *tenant)
            .cloned()
            .ok_or_else(|| format!("tenants.keys: {tenant:?} is not a configured tenant"))?;
        let digest = digest_of(&tenant, key)?;
        let grant = Grant::scopes(scopes.iter().cloned());
        self.keys.push(Key { tenant, digest, grant, name: Some(Arc::from(name)) });
        Ok(())
    }

    /// The configured tenants' names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(|n| &**n)
    }

    /// Give tenant `name` its own limits (rate, burst, max_in_flight). Errors name the key
    /// (`tenants.<name>.<key>`).
    pub fn limit(&mut self, name: &str, limits: TenantLimits) -> Result<(), String> {
        if limits == TenantLimits::default() {
            self.limiters.remove(name);
            return Ok(());
        }
        if limits.burst.is_some() && limits.rate_per_sec.is_none() {
            return Err(format!("tenants.{name}.burst needs tenants.{name}.rate_per_sec"));
        }
        let limiter = TenantLimiter::new(name, limits)?;
        self.limiters.insert(Arc::from(name), Arc::new(limiter));
        Ok(())
    }

    /// Take over `previous`'s limiter of each tenant whose limits are the same (a reload): its
    /// rate bucket and in-flight count go on, so a reload neither refills a bucket nor lets a
    /// tenant past its `max_in_flight`. A tenant whose limits changed starts afresh.
    pub fn keep_limiters(&mut self, previous: &Tenants) {
        for (name, limiter) in self.limiters.iter_mut() {
            if let Some(old) = previous.limiters.get(name)
                && old.limits == limiter.limits
            {
                *limiter = old.clone();
            }
        }
    }

    /// The limiters of a tenant, if it has limits of its own.
    pub(crate) fn limiter(&self, tenant: &str) -> Option<&TenantLimiter> {
        self.limiters.get(tenant).map(|l| &**l)
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The tenant a presented key belongs to.
    pub fn authenticate(&self, presented: &str) -> Option<Arc<str>> {
        self.caller(presented).map(|c| c.tenant)
    }

    /// The caller a presented key makes. Every configured key is compared, in constant time,
    /// whatever matches: the time taken does not reveal which key, or how much of it, was
    /// right.
    pub fn caller(&self, presented: &str) -> Option<Caller> {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let mut found: Option<&Key> = None;
        for key in &self.keys {
            if bool::from(key.digest.ct_eq(&digest)) {
                found = Some(key);
            }
        }
        found.map(|k| Caller { tenant: k.tenant.clone(), grant: k.grant.clone(), subject: k.name.clone() })
    }
}

/// The SHA-256 a key is compared as: of its text, or as configured (`sha256:` + 64 hex digits).
fn digest_of(tenant: &str, key: &str) -> Result<[u8; 32], String> {
    match key.strip_prefix("sha256:") {
        Some(hex) => parse_hex(hex)
            .ok_or_else(|| format!("tenant {tenant}: a sha256: key must be 64 hexadecimal characters")),
        None => Ok(Sha256::digest(key.as_bytes()).into()),
    }
}

fn parse_hex(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, chunk) in hex.as_bytes().chunks(2).enumerate() {
        let s = std::str::from_utf8(chunk).ok()?;
        out[i] = u8::from_str_radix(s, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plaintext_and_sha256_keys_authenticate_their_tenant() {
        // sha256("test") = 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
        let a = vec!["acme-secret".to_string()];
        let b = vec!["sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".to_string()];
        let t = Tenants::new([("acme", a.as_slice()), ("beta", b.as_slice())]).unwrap();
        assert_eq!(t.authenticate("acme-secret").as_deref(), Some("acme"));
        assert_eq!(t.authenticate("test").as_deref(), Some("beta"));
        assert_eq!(
            t.authenticate("sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"),
            None
        );
        assert_eq!(t.authenticate("acme-secreT"), None);
        assert_eq!(t.authenticate(""), None);
        assert!(format!("{t:?}").contains("keys: 2"));
        assert!(!format!("{t:?}").contains("acme-secret"));
    }

    #[test]
    fn malformed_sha256_keys_are_refused() {
        let bad = vec!["sha256:abc".to_string()];
        assert!(Tenants::new([("x", bad.as_slice())]).is_err());
        let bad = vec![format!("sha256:{}", "zz".repeat(32))];
        assert!(Tenants::new([("x", bad.as_slice())]).is_err());
    }
}
