//! Tenants and API keys (SPEC §4): plaintext or `sha256:` keys, compared in constant time.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The configured tenants. Empty: one open default tenant.
#[derive(Clone, Default)]
pub struct Tenants {
    /// One entry per configured key: (tenant, SHA-256 of the key).
    keys: Vec<(Arc<str>, [u8; 32])>,
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
        Ok(TenantLimiter { rate, clock: DefaultClock::default(), in_flight })
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
        let mut keys = Vec::new();
        for (name, api_keys) in tenants {
            let name: Arc<str> = Arc::from(name);
            for k in api_keys {
                let digest = match k.strip_prefix("sha256:") {
                    Some(hex) => parse_hex(hex).ok_or_else(|| {
                        format!("tenant {name}: a sha256: key must be 64 hexadecimal characters")
                    })?,
                    None => Sha256::digest(k.as_bytes()).into(),
                };
                keys.push((name.clone(), digest));
            }
        }
        Ok(Tenants { keys, limiters: HashMap::new() })
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

    /// The limiters of a tenant, if it has limits of its own.
    pub(crate) fn limiter(&self, tenant: &str) -> Option<&TenantLimiter> {
        self.limiters.get(tenant).map(|l| &**l)
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The tenant a presented key belongs to. Every configured key is compared, in constant
    /// time, whatever matches: the time taken does not reveal which key, or how much of it,
    /// was right.
    pub fn authenticate(&self, presented: &str) -> Option<Arc<str>> {
        let digest: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let mut found: Option<&Arc<str>> = None;
        for (name, key) in &self.keys {
            if bool::from(key.ct_eq(&digest)) {
                found = Some(name);
            }
        }
        found.cloned()
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
