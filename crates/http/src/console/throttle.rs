//! Failed console log-ins, throttled per client address and per login form: after
//! [`MAX_FAILURES`] wrong keys within [`WINDOW`] from one address (or with one form's token),
//! every log-in from it is refused `429` with `Retry-After` until the window ends — the right
//! key too, so guessing gains nothing — and then it may try again: nobody is locked out for
//! good. The right key logging in clears the form's and the address's failures.
//!
//! Behind a reverse proxy every client has the proxy's address: they share one budget, and
//! the form token still holds each form to its own. A client that fetches a fresh form for
//! every guess is held by its address.
//!
//! Bounded: at most [`MAX_TRACKED`] addresses and forms are remembered; past it the one whose
//! window began first is forgotten.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Wrong keys allowed within [`WINDOW`] from one address or form.
pub(crate) const MAX_FAILURES: u32 = 5;
/// How long failures count, from the first.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);
/// Addresses and forms remembered at once.
const MAX_TRACKED: usize = 10_000;

/// Who tried: a client address or a login form's token.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Who {
    Address(IpAddr),
    Form(String),
}

/// Failures within the current window.
struct Failures {
    count: u32,
    since: Instant,
}

#[derive(Default)]
pub(crate) struct Throttle {
    failures: Mutex<HashMap<Who, Failures>>,
}

fn who(address: Option<IpAddr>, form: &str) -> impl Iterator<Item = Who> {
    address.map(Who::Address).into_iter().chain((!form.is_empty()).then(|| Who::Form(form.to_owned())))
}

impl Throttle {
    /// `Some(wait)` when `address` or `form` used up its failures: refuse, and say when to
    /// try again.
    pub(crate) fn held(&self, address: Option<IpAddr>, form: &str, now: Instant) -> Option<Duration> {
        let failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        who(address, form)
            .filter_map(|w| failures.get(&w))
            .filter(|f| f.count >= MAX_FAILURES && now < f.since + WINDOW)
            .map(|f| f.since + WINDOW - now)
            .max()
    }

    /// A wrong key from `address` with `form`.
    pub(crate) fn failed(&self, address: Option<IpAddr>, form: &str, now: Instant) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        for w in who(address, form) {
            if !failures.contains_key(&w) && failures.len() >= MAX_TRACKED {
                failures.retain(|_, f| now < f.since + WINDOW);
                if failures.len() >= MAX_TRACKED
                    && let Some(oldest) = failures.iter().min_by_key(|(_, f)| f.since).map(|(w, _)| w.clone())
                {
                    failures.remove(&oldest);
                }
            }
            let f = failures.entry(w).or_insert(Failures { count: 0, since: now });
            if now >= f.since + WINDOW {
                *f = Failures { count: 0, since: now };
            }
            f.count += 1;
        }
    }

    /// The right key: the address and the form start afresh.
    pub(crate) fn succeeded(&self, address: Option<IpAddr>, form: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        for w in who(address, form) {
            failures.remove(&w);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_hold_an_address_and_a_form_for_the_window_then_let_them_try_again() {
        let t = Throttle::default();
        let now = Instant::now();
        let (a, b): (IpAddr, IpAddr) = ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
        for _ in 0..MAX_FAILURES - 1 {
            t.failed(Some(a), "form-1", now);
        }
        assert_eq!(t.held(Some(a), "form-1", now), None, "below the limit");
        t.failed(Some(a), "form-1", now);
        assert_eq!(t.held(Some(a), "form-2", now), Some(WINDOW), "the address is held, whatever the form");
        assert_eq!(t.held(Some(b), "form-1", now), Some(WINDOW), "the form is held, whatever the address");
        assert_eq!(t.held(Some(b), "form-2", now), None, "another client and form are not");
        let later = now + WINDOW;
        assert_eq!(t.held(Some(a), "form-1", later), None, "not for good: the window ended");
        t.failed(Some(a), "form-1", later);
        assert_eq!(t.held(Some(a), "form-1", later), None, "a new window starts from one failure");
    }

    #[test]
    fn the_right_key_clears_the_failures_and_memory_is_bounded() {
        let t = Throttle::default();
        let now = Instant::now();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        for _ in 0..MAX_FAILURES - 1 {
            t.failed(Some(a), "f", now);
        }
        t.succeeded(Some(a), "f");
        t.failed(Some(a), "f", now);
        assert_eq!(t.held(Some(a), "f", now), None, "counted afresh after a log-in");
        for i in 0..MAX_TRACKED + 10 {
            t.failed(None, &format!("form-{i}"), now);
        }
        assert!(t.failures.lock().unwrap().len() <= MAX_TRACKED);
    }
}
