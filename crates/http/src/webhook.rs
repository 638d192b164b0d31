//! Webhook signatures (SPEC §15), checked over the raw body bytes, in constant time, before
//! the body is parsed or anything is recorded. The one place signatures are verified.
//!
//! | scheme | headers | signed bytes | secret |
//! |---|---|---|---|
//! | `standard-webhooks` | `webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64> …` | `id.timestamp.body` | `whsec_<base64>` (the prefix is optional) |
//! | `github` | `X-Hub-Signature-256: sha256=<hex>` | `body` | the text, as UTF-8 |
//! | `stripe` | `Stripe-Signature: t=<unix>,v1=<hex>,v1=…` | `t.body` | the text (`whsec_…` included), as UTF-8 |
//!
//! Every scheme takes several secrets (rotation: any one may match) and, where the signature
//! carries a timestamp, refuses one further than `tolerance_secs` from now (either way). A
//! refusal is `401` with a JSON body, counted in `oncerpc_webhook_refusals_total{method,
//! reason}` and logged once (method, reason, correlation id; never a secret or a signature).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// The default `tolerance_secs` of timestamped schemes.
pub const DEFAULT_TOLERANCE_SECS: u64 = 300;

/// A signature scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    StandardWebhooks,
    Github,
    Stripe,
}

impl Scheme {
    pub fn parse(name: &str) -> Result<Scheme, String> {
        match name {
            "standard-webhooks" => Ok(Scheme::StandardWebhooks),
            "github" => Ok(Scheme::Github),
            "stripe" => Ok(Scheme::Stripe),
            other => Err(format!("unknown scheme {other:?}: use standard-webhooks, github or stripe")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::StandardWebhooks => "standard-webhooks",
            Scheme::Github => "github",
            Scheme::Stripe => "stripe",
        }
    }

    /// The headers (lower case) whose values the signature covers. A key taken from any other
    /// header is not authenticated: whoever captured a delivery could re-send it with another
    /// value and run it again. GitHub and Stripe sign no header value (GitHub's
    /// `X-GitHub-Delivery` is not signed): their keys come from the signed body.
    pub fn signed_headers(self) -> &'static [&'static str] {
        match self {
            Scheme::StandardWebhooks => &["webhook-id", "webhook-timestamp"],
            Scheme::Github | Scheme::Stripe => &[],
        }
    }
}

/// Why a delivery was refused (the `reason` label and the `401` message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// A header the scheme needs is absent.
    Missing(&'static str),
    /// A header is there but cannot be read.
    Malformed(&'static str),
    /// The signed timestamp is outside `tolerance_secs`.
    Stale,
    /// No signature matches any secret.
    Mismatch,
}

impl Refusal {
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Missing(_) => "missing",
            Refusal::Malformed(_) => "malformed",
            Refusal::Stale => "stale",
            Refusal::Mismatch => "mismatch",
        }
    }

    fn message(self) -> String {
        match self {
            Refusal::Missing(h) => format!("invalid webhook signature: the {h} header is missing"),
            Refusal::Malformed(h) => format!("invalid webhook signature: the {h} header is malformed"),
            Refusal::Stale => "invalid webhook signature: the timestamp is outside the tolerance".into(),
            Refusal::Mismatch => "invalid webhook signature: no signature matches".into(),
        }
    }
}

/// One method's verification: scheme, secrets (never printed), tolerance, and the tenant a
/// verified delivery is served as.
pub struct Verifier {
    scheme: Scheme,
    secrets: Vec<Vec<u8>>,
    tolerance: Duration,
    tenant: Option<Arc<str>>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("scheme", &self.scheme)
            .field("secrets", &self.secrets.len())
            .field("tolerance", &self.tolerance)
            .field("tenant", &self.tenant)
            .finish()
    }
}

impl Verifier {
    /// `secrets`: one or more (rotation). `tolerance_secs`: timestamped schemes only
    /// (default [`DEFAULT_TOLERANCE_SECS`]); GitHub signs no timestamp, so setting it there is
    /// an error. Errors never quote a secret.
    pub fn new(
        scheme: Scheme,
        secrets: &[String],
        tolerance_secs: Option<u64>,
        tenant: Option<Arc<str>>,
    ) -> Result<Verifier, String> {
        if secrets.is_empty() {
            return Err("verify.secret: at least one secret is needed".into());
        }
        let mut keys = Vec::with_capacity(secrets.len());
        for (i, s) in secrets.iter().enumerate() {
            let key = match scheme {
                Scheme::StandardWebhooks => {
                    let b64 = s.strip_prefix("whsec_").unwrap_or(s);
                    decode_base64(b64).ok_or_else(|| {
                        format!("verify.secret[{i}]: a standard-webhooks secret is whsec_ followed by base64")
                    })?
                }
                Scheme::Github | Scheme::Stripe => s.as_bytes().to_vec(),
            };
            if key.is_empty() {
                return Err(format!("verify.secret[{i}]: a secret must not be empty"));
            }
            keys.push(key);
        }
        let tolerance = match (scheme, tolerance_secs) {
            (Scheme::Github, Some(_)) => {
                return Err("verify.tolerance_secs: github signatures carry no timestamp".into());
            }
            (_, Some(0)) => return Err("verify.tolerance_secs must be greater than 0".into()),
            (_, t) => Duration::from_secs(t.unwrap_or(DEFAULT_TOLERANCE_SECS)),
        };
        Ok(Verifier { scheme, secrets: keys, tolerance, tenant })
    }

    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The tenant a verified delivery is served as (`None`: the API key decides).
    pub fn tenant(&self) -> Option<&Arc<str>> {
        self.tenant.as_ref()
    }

    /// Check a delivery: its headers and raw body, at `now`.
    pub fn verify(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), Refusal> {
        match self.scheme {
            Scheme::StandardWebhooks => self.standard(headers, body, now),
            Scheme::Github => self.github(headers, body),
            Scheme::Stripe => self.stripe(headers, body, now),
        }
    }

    fn standard(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), Refusal> {
        let id = header(headers, "webhook-id")?;
        let ts = header(headers, "webhook-timestamp")?;
        let sigs = header(headers, "webhook-signature")?;
        let seconds: i64 = ts.trim().parse().map_err(|_| Refusal::Malformed("webhook-timestamp"))?;
        self.fresh(seconds, now)?;
        let candidates: Vec<Vec<u8>> = sigs
            .split(' ')
            .filter_map(|s| s.split_once(','))
            .filter(|(version, _)| *version == "v1")
            .filter_map(|(_, sig)| decode_base64(sig))
            .collect();
        self.any_matches(&[id.as_bytes(), b".", ts.as_bytes(), b".", body], &candidates)
    }

    fn github(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), Refusal> {
        const NAME: &str = "X-Hub-Signature-256";
        let sig = header(headers, NAME)?;
        let hex = sig.strip_prefix("sha256=").ok_or(Refusal::Malformed(NAME))?;
        let sig = decode_hex(hex).ok_or(Refusal::Malformed(NAME))?;
        self.any_matches(&[body], &[sig])
    }

    fn stripe(&self, headers: &HeaderMap, body: &[u8], now: SystemTime) -> Result<(), Refusal> {
        const NAME: &str = "Stripe-Signature";
        let value = header(headers, NAME)?;
        let mut t: Option<&str> = None;
        let mut candidates = Vec::new();
        for item in value.split(',') {
            match item.trim().split_once('=') {
                Some(("t", v)) => t = Some(v),
                Some(("v1", v)) => candidates.extend(decode_hex(v)),
                _ => {}
            }
        }
        let t = t.ok_or(Refusal::Malformed(NAME))?;
        let seconds: i64 = t.parse().map_err(|_| Refusal::Malformed(NAME))?;
        self.fresh(seconds, now)?;
        self.any_matches(&[t.as_bytes(), b".", body], &candidates)
    }

    /// A signed timestamp within the tolerance of `now`, either way.
    fn fresh(&self, seconds: i64, now: SystemTime) -> Result<(), Refusal> {
        let now = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i128;
        if (now - i128::from(seconds)).unsigned_abs() > u128::from(self.tolerance.as_secs()) {
            return Err(Refusal::Stale);
        }
        Ok(())
    }

    /// Whether any candidate signature is the HMAC-SHA256 of `parts` under any secret.
    /// Each comparison is constant-time (`Mac::verify_slice`); every pair is tried.
    fn any_matches(&self, parts: &[&[u8]], candidates: &[Vec<u8>]) -> Result<(), Refusal> {
        let mut matched = false;
        for key in &self.secrets {
            let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
            for p in parts {
                mac.update(p);
            }
            for sig in candidates {
                matched |= mac.clone().verify_slice(sig).is_ok();
            }
        }
        if matched { Ok(()) } else { Err(Refusal::Mismatch) }
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &'static str) -> Result<&'a str, Refusal> {
    let v = headers.get(name).ok_or(Refusal::Missing(name))?;
    let v = v.to_str().map_err(|_| Refusal::Malformed(name))?;
    if v.is_empty() {
        return Err(Refusal::Missing(name));
    }
    Ok(v)
}

/// Standard base64, padding optional (the `standardwebhooks` libraries accept both).
fn decode_base64(text: &str) -> Option<Vec<u8>> {
    let trimmed = text.trim_end_matches('=');
    base64::engine::general_purpose::STANDARD_NO_PAD.decode(trimmed).ok()
}

fn decode_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| text.get(i..i + 2).and_then(|b| u8::from_str_radix(b, 16).ok()))
        .collect()
}

/// The verifiers of every signed method, and the refusal counter.
#[derive(Clone, Default)]
pub struct Webhooks {
    by_method: HashMap<String, Arc<Verifier>>,
    refusals: Option<prometheus::IntCounterVec>,
}

impl std::fmt::Debug for Webhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.by_method.iter()).finish()
    }
}

/// A delivery whose signature was verified.
pub(crate) struct Verified {
    pub tenant: Option<Arc<str>>,
}

impl Webhooks {
    pub fn new() -> Webhooks {
        Webhooks::default()
    }

    /// Verify deliveries to `method` with `verifier`.
    pub fn insert(&mut self, method: impl Into<String>, verifier: Verifier) {
        self.by_method.insert(method.into(), Arc::new(verifier));
    }

    pub fn is_empty(&self) -> bool {
        self.by_method.is_empty()
    }

    /// Register `oncerpc_webhook_refusals_total` in `registry` (done once by the router).
    pub(crate) fn register_metrics(&mut self, registry: &prometheus::Registry) {
        let counter = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                "oncerpc_webhook_refusals_total",
                "Webhook deliveries refused with 401 before anything ran, by method and reason (missing, malformed, stale, mismatch)",
            ),
            &["method", "reason"],
        )
        .expect("valid metric");
        let _ = registry.register(Box::new(counter.clone()));
        self.refusals = Some(counter);
    }

    /// Count refusals in `other`'s counter (the first front door's, registered once): a
    /// reload's webhooks keep the totals.
    pub(crate) fn share_metrics(&mut self, other: &Webhooks) {
        if other.refusals.is_some() {
            self.refusals = other.refusals.clone();
        }
    }

    /// `Ok(None)`: `method` is not a signed method. `Ok(Some)`: verified. `Err`: the `401`.
    pub(crate) fn check(
        &self,
        method: &str,
        headers: &HeaderMap,
        body: &[u8],
        cid: &str,
    ) -> Result<Option<Verified>, Box<Response>> {
        let Some(v) = self.by_method.get(method) else { return Ok(None) };
        match v.verify(headers, body, SystemTime::now()) {
            Ok(()) => Ok(Some(Verified { tenant: v.tenant.clone() })),
            Err(refusal) => {
                if let Some(c) = &self.refusals {
                    c.with_label_values(&[method, refusal.reason()]).inc();
                }
                tracing::info!(
                    correlation_id = %cid,
                    method,
                    scheme = v.scheme.as_str(),
                    reason = refusal.reason(),
                    "webhook delivery refused: {}",
                    refusal.message()
                );
                let body = serde_json::json!({ "code": "401", "message": refusal.message() });
                Err(Box::new(crate::json_response(StatusCode::UNAUTHORIZED, body.to_string(), Some(cid))))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    /// GitHub's documented example ("Validating webhook deliveries"): secret
    /// `It's a Secret to Everybody`, payload `Hello, World!`.
    #[test]
    fn github_documented_example() {
        let v = Verifier::new(Scheme::Github, &["It's a Secret to Everybody".into()], None, None).unwrap();
        let sig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        let now = SystemTime::now();
        assert_eq!(v.verify(&headers(&[("x-hub-signature-256", sig)]), b"Hello, World!", now), Ok(()));
        assert_eq!(
            v.verify(&headers(&[("x-hub-signature-256", sig)]), b"Hello, World?", now),
            Err(Refusal::Mismatch)
        );
        assert_eq!(
            v.verify(&headers(&[]), b"Hello, World!", now),
            Err(Refusal::Missing("X-Hub-Signature-256"))
        );
        let bare = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        assert!(matches!(
            v.verify(&headers(&[("x-hub-signature-256", bare)]), b"Hello, World!", now),
            Err(Refusal::Malformed(_))
        ));
        // Rotation: the old secret still verifies while both are configured.
        let rotated = Verifier::new(
            Scheme::Github,
            &["new secret".into(), "It's a Secret to Everybody".into()],
            None,
            None,
        )
        .unwrap();
        assert_eq!(rotated.verify(&headers(&[("x-hub-signature-256", sig)]), b"Hello, World!", now), Ok(()));
        assert!(Verifier::new(Scheme::Github, &["s".into()], Some(300), None).is_err());
    }

    /// A Standard Webhooks vector, its signature made by the PyPI `standardwebhooks` package
    /// (1.1.0, `Webhook(secret).sign(id, timestamp, payload)`): secret `whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw`, id `msg_p5jXN8AQM9LWM0D4loKWxJek`,
    /// timestamp 1614265330, payload `{"test": 2432232314}`.
    #[test]
    fn standard_webhooks_reference_vector() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_string();
        let v = Verifier::new(Scheme::StandardWebhooks, &[secret], None, None).unwrap();
        let sig = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
        let at = UNIX_EPOCH + Duration::from_secs(1_614_265_330);
        let h = |sig: &str, ts: &str| {
            headers(&[
                ("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek"),
                ("webhook-timestamp", ts),
                ("webhook-signature", sig),
            ])
        };
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(v.verify(&h(sig, "1614265330"), body, at), Ok(()));
        // Several signatures, one of them right; unknown versions ignored.
        let several = format!("v1,Zm9v v2,abc {sig}");
        assert_eq!(v.verify(&h(&several, "1614265330"), body, at), Ok(()));
        assert_eq!(v.verify(&h(sig, "1614265330"), br#"{"test": 2432232315}"#, at), Err(Refusal::Mismatch));
        let late = at + Duration::from_secs(301);
        assert_eq!(v.verify(&h(sig, "1614265330"), body, late), Err(Refusal::Stale));
        let early = at - Duration::from_secs(301);
        assert_eq!(v.verify(&h(sig, "1614265330"), body, early), Err(Refusal::Stale));
        assert_eq!(v.verify(&h(sig, "soon"), body, at), Err(Refusal::Malformed("webhook-timestamp")));
        assert!(Verifier::new(Scheme::StandardWebhooks, &["whsec_!!".into()], None, None).is_err());
    }

    #[test]
    fn stripe_header_parsing_and_tolerance() {
        // Made with the stripe package (16.1.0):
        // stripe.WebhookSignature.generate_signature_header('{"id":"evt_1"}', "whsec_test", 1700000000)
        let v = Verifier::new(Scheme::Stripe, &["whsec_test".into()], Some(60), None).unwrap();
        let header = "t=1700000000,v1=c89214b5b5da833daed6f0b8c5bb6bd58cea9022bd80ccc78230f3942d632925";
        let at = UNIX_EPOCH + Duration::from_secs(1_700_000_010);
        let h = |v: &str| headers(&[("stripe-signature", v)]);
        let body = br#"{"id":"evt_1"}"#;
        let ok = v.verify(&h(header), body, at);
        assert_eq!(ok, Ok(()), "the stripe package's signature");
        let two = format!("t=1700000000,v1=00,{}", &header["t=1700000000,".len()..]);
        assert_eq!(v.verify(&h(&two), body, at), Ok(()));
        assert_eq!(v.verify(&h(header), body, at + Duration::from_secs(120)), Err(Refusal::Stale));
        assert_eq!(v.verify(&h("v1=00"), body, at), Err(Refusal::Malformed("Stripe-Signature")));
        assert_eq!(v.verify(&h(header), br#"{"id":"evt_2"}"#, at), Err(Refusal::Mismatch));
    }

    /// Tampering with a header a scheme lists as signed breaks the signature; for GitHub, any
    /// header can change and the delivery still verifies (so none may be a key).
    #[test]
    fn signed_headers_are_the_ones_the_signature_covers() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_string();
        let v = Verifier::new(Scheme::StandardWebhooks, &[secret], None, None).unwrap();
        let at = UNIX_EPOCH + Duration::from_secs(1_614_265_330);
        let body = br#"{"test": 2432232314}"#;
        let good = [
            ("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJek"),
            ("webhook-timestamp", "1614265330"),
            ("webhook-signature", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="),
        ];
        assert_eq!(v.verify(&headers(&good), body, at), Ok(()));
        // Each signed header changed (the timestamp by a second, within the tolerance).
        let changed = [("webhook-id", "msg_p5jXN8AQM9LWM0D4loKWxJeK"), ("webhook-timestamp", "1614265331")];
        assert_eq!(changed.map(|(n, _)| n), Scheme::StandardWebhooks.signed_headers());
        for (name, value) in changed {
            let mut h = headers(&good);
            h.insert(name, value.parse().unwrap());
            assert_eq!(v.verify(&h, body, at), Err(Refusal::Mismatch), "{name}");
        }
        assert!(Scheme::Github.signed_headers().is_empty() && Scheme::Stripe.signed_headers().is_empty());
        let gh = Verifier::new(Scheme::Github, &["It's a Secret to Everybody".into()], None, None).unwrap();
        let sig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        for id in ["delivery-1", "delivery-2"] {
            let h = headers(&[("x-hub-signature-256", sig), ("x-github-delivery", id)]);
            assert_eq!(gh.verify(&h, b"Hello, World!", SystemTime::now()), Ok(()), "{id}");
        }
    }

    proptest::proptest! {
        /// Signed timestamps of any size and text, under any clock and tolerance: no panic
        /// (no overflow), and a Stripe delivery signed for time `t` is accepted exactly when
        /// `t` is within the tolerance of now; Standard Webhooks' with a wrong signature never.
        #[test]
        fn no_signed_timestamp_panics_and_the_tolerance_is_exact(
            t in proptest::prop_oneof!["-?[0-9]{1,25}", "\\PC{0,25}"],
            clock in proptest::prelude::any::<u64>(),
            tolerance in 1..=u64::MAX,
        ) {
            let now = UNIX_EPOCH.checked_add(Duration::from_secs(clock)).unwrap_or(UNIX_EPOCH);
            let body = br#"{"id":"evt_1"}"#;
            let stripe = Verifier::new(Scheme::Stripe, &["whsec_test".into()], Some(tolerance), None).unwrap();
            let mut mac = HmacSha256::new_from_slice(b"whsec_test").unwrap();
            mac.update(t.as_bytes());
            mac.update(b".");
            mac.update(body);
            let sig: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
            if let Ok(value) = format!("t={t},v1={sig}").parse::<axum::http::HeaderValue>() {
                let mut h = HeaderMap::new();
                h.insert("stripe-signature", value);
                let got = stripe.verify(&h, body, now);
                let secs = now.duration_since(UNIX_EPOCH).unwrap().as_secs() as i128;
                let fresh = t.parse::<i64>().ok().map(|t| (secs - i128::from(t)).unsigned_abs() <= u128::from(tolerance));
                match fresh {
                    Some(true) => proptest::prop_assert_eq!(got, Ok(())),
                    Some(false) => proptest::prop_assert_eq!(got, Err(Refusal::Stale)),
                    None => proptest::prop_assert!(got.is_err()),
                }
            }
            let sw_secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_string();
            let sw = Verifier::new(Scheme::StandardWebhooks, &[sw_secret], Some(tolerance), None).unwrap();
            if let Ok(value) = t.parse::<axum::http::HeaderValue>() {
                let mut h = headers(&[("webhook-id", "msg_1"), ("webhook-signature", "v1,AAAA")]);
                h.insert("webhook-timestamp", value);
                proptest::prop_assert!(sw.verify(&h, body, now).is_err());
            }
        }
    }

    #[test]
    fn debug_never_shows_a_secret() {
        let v = Verifier::new(Scheme::Github, &["hunter2-secret".into()], None, None).unwrap();
        assert!(!format!("{v:?}").contains("hunter2"));
    }
}
