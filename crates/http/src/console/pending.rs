//! Sign-ins with the identity provider under way: `state` → what the callback needs (the PKCE
//! verifier, the nonce, the browser it was started in). Kept in this process, bounded
//! ([`MAX_PENDING`]: past it the oldest goes), short-lived ([`PENDING_TTL`]) and single use: the
//! callback takes its entry out whatever happens next, so a `state` (and the code that came with
//! it) never works twice.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// A sign-in must come back within this long.
pub(crate) const PENDING_TTL: Duration = Duration::from_secs(5 * 60);
/// Sign-ins under way at once.
pub(crate) const MAX_PENDING: usize = 10_000;

/// What a sign-in's callback checks and sends.
#[derive(Clone)]
pub(crate) struct Flow {
    /// The PKCE `code_verifier` (its S256 challenge went to the provider).
    pub verifier: String,
    /// The `nonce` the ID token must carry.
    pub nonce: String,
    /// The value of the browser's binding cookie: the callback must come from the browser that
    /// started the sign-in.
    pub browser: String,
    pub started: Instant,
}

#[derive(Default)]
pub(crate) struct Pending {
    flows: Mutex<HashMap<String, Flow>>,
}

impl Pending {
    /// Remember `flow` under `state` (expired flows go first, then the oldest past the bound).
    pub(crate) fn insert(&self, state: String, flow: Flow) {
        let mut flows = self.flows.lock().unwrap_or_else(|e| e.into_inner());
        if flows.len() >= MAX_PENDING {
            let now = flow.started;
            flows.retain(|_, f| now.duration_since(f.started) < PENDING_TTL);
        }
        if flows.len() >= MAX_PENDING
            && let Some(oldest) = flows.iter().min_by_key(|(_, f)| f.started).map(|(s, _)| s.clone())
        {
            flows.remove(&oldest);
        }
        flows.insert(state, flow);
    }

    /// The flow of `state`, taken out (single use); `None` when unknown, used or expired.
    pub(crate) fn take(&self, state: &str, now: Instant) -> Option<Flow> {
        let flow = self.flows.lock().unwrap_or_else(|e| e.into_inner()).remove(state)?;
        (now.duration_since(flow.started) < PENDING_TTL).then_some(flow)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(started: Instant) -> Flow {
        Flow { verifier: "v".into(), nonce: "n".into(), browser: "b".into(), started }
    }

    #[test]
    fn a_state_works_once_and_not_after_it_expired() {
        let p = Pending::default();
        let now = Instant::now();
        p.insert("s1".into(), flow(now));
        assert!(p.take("s1", now).is_some());
        assert!(p.take("s1", now).is_none(), "single use");
        assert!(p.take("unknown", now).is_none());
        p.insert("s2".into(), flow(now));
        assert!(p.take("s2", now + PENDING_TTL).is_none(), "expired");
        assert!(p.take("s2", now).is_none(), "an expired state is gone too");
    }

    #[test]
    fn memory_is_bounded_and_the_oldest_goes() {
        let p = Pending::default();
        let now = Instant::now();
        p.insert("first".into(), flow(now));
        for i in 0..MAX_PENDING {
            p.insert(format!("s{i}"), flow(now + Duration::from_millis(1)));
        }
        assert!(p.flows.lock().unwrap().len() <= MAX_PENDING);
        assert!(p.take("first", now).is_none(), "the oldest went");
        assert!(p.take(&format!("s{}", MAX_PENDING - 1), now).is_some());
    }
}
