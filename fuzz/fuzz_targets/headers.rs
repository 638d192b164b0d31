//! Fuzz the parsers of numbers that upstreams and webhook senders put in headers: a step's
//! `Retry-After` (delta-seconds of any length, HTTP dates of any year) and the wait it becomes
//! under a deadline, and the webhook signature headers with their timestamps (Standard
//! Webhooks' `webhook-timestamp`, Stripe's `t=`) under any clock and tolerance. Arbitrary input
//! must never panic (no overflow of an `Instant`, a `SystemTime` or an integer), and a wait
//! taken must end before the deadline.

#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;
use oncerpc::retry::{RetryPolicy, next_wait, parse_retry_after};
use oncerpc_http::{Scheme, Verifier};

fuzz_target!(|data: &[u8]| {
    if data.len() < 20 {
        return;
    }
    let (numbers, rest) = data.split_at(20);
    let word = |i: usize| u64::from_le_bytes(numbers[i..i + 8].try_into().unwrap());
    let (clock_secs, number) = (word(0), word(8));
    let attempt = u32::from_le_bytes(numbers[16..20].try_into().unwrap());
    let text = String::from_utf8_lossy(rest);
    let now = UNIX_EPOCH.checked_add(Duration::from_secs(clock_secs)).unwrap_or(UNIX_EPOCH);

    // Retry-After → the wait before the next attempt, `number` ms before the deadline.
    let asked = parse_retry_after(&text, now);
    let policy = RetryPolicy { attempts: 20, backoff_ms: number, max_backoff_ms: u64::MAX };
    let left = Duration::from_millis(number);
    if let Some(wait) = next_wait(&policy, attempt, asked, f64::from(attempt) / f64::from(u32::MAX), left) {
        assert!(wait < left, "{text:?}: a wait of {wait:?} with {left:?} left");
    }

    // The same text in each scheme's signature headers, `number` seconds of tolerance.
    let Ok(value) = HeaderValue::from_str(&text) else { return };
    let cases: [(Scheme, &str, &[&str]); 3] = [
        (
            Scheme::StandardWebhooks,
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            &["webhook-id", "webhook-timestamp", "webhook-signature"],
        ),
        (Scheme::Stripe, "whsec_test", &["stripe-signature"]),
        (Scheme::Github, "secret", &["x-hub-signature-256"]),
    ];
    for (scheme, secret, names) in cases {
        let tolerance = (scheme != Scheme::Github).then_some(number.max(1));
        let verifier = Verifier::new(scheme, &[secret.to_owned()], tolerance, None).unwrap();
        let mut headers = HeaderMap::new();
        for name in names {
            headers.insert(*name, value.clone());
        }
        let _ = verifier.verify(&headers, rest, now);
    }
});
