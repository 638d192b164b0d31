//! OAuth 2.1 / OpenID Connect access tokens (SPEC §20): JWTs of the configured issuers,
//! checked with the issuer's published keys.
//!
//! * **Keys** come from the issuer's metadata (`{issuer}/.well-known/openid-configuration`,
//!   else `…/oauth-authorization-server`) or its configured `jwks_uri`: fetched when the
//!   gateway starts (in the background: a restart never waits for the identity provider),
//!   again every `jwks_refresh_secs`, and at once for a token whose `kid` is not known (at
//!   most once per [`REFETCH_EVERY`]). A failed fetch keeps the keys there were. Only
//!   asymmetric signing keys are taken (RSA, EC, OKP): a symmetric key in a JWKS is ignored.
//! * **A token** must be at most [`MAX_TOKEN_BYTES`], name a key of its issuer, be signed with
//!   one of the issuer's `algorithms` (never `none` or an `HS*`: refused at config time) by
//!   that key's family, have the issuer's `iss`, one of its `audience`s, an `exp` in the
//!   future and no `nbf` in the future (both with `leeway_secs`). Its tenant is the issuer's
//!   `tenant`, or the value of its `tenant_claim`, which must name a configured tenant.
//! * **Verified tokens** are cached until they expire (at most [`MAX_CACHED`]): the signature
//!   is checked once per token, not once per call. The cache is keyed by the token's text under
//!   a per-process seeded hash (foldhash), not its SHA-256: hashing a 700-byte JWT with SHA-256
//!   on every call cost 0.7 × a whole query's instructions (measured under callgrind, where
//!   the software path runs), and the cache is memory only, never written or logged.
//! * **Failures**: the caller's fault is [`Refusal`] (`401`); an issuer whose keys cannot be
//!   had (never fetched, or a `kid` refetch that failed) is [`Unavailable`] (`503`, `-32011`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use oncerpc_core::Grant;
use serde_json::Value;

/// The largest token read; a longer one is refused unread.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;
/// Verified tokens kept at once.
pub const MAX_CACHED: usize = 10_000;
/// A token with an unknown `kid` refetches its issuer's keys at most this often.
pub const REFETCH_EVERY: Duration = Duration::from_secs(30);
/// Fetches that failed are tried again after 1 s, doubling up to this.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// One fetch of metadata or keys may take this long.
pub(crate) const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Where an issuer's tokens get their tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TenantFrom {
    /// Every token of the issuer is this tenant's.
    Fixed(String),
    /// The value of this claim, which must name a configured tenant.
    Claim(String),
}

/// One `[[auth.issuers]]` entry, checked.
#[derive(Debug, Clone)]
pub struct IssuerSpec {
    pub issuer: String,
    pub jwks_uri: Option<String>,
    pub audience: Vec<String>,
    pub algorithms: Vec<Algorithm>,
    pub leeway_secs: u64,
    pub tenant: TenantFrom,
    pub scopes_claim: String,
    pub jwks_refresh: Duration,
    /// RFC 7662 introspection for the issuer's opaque tokens ([`super::introspect`]).
    pub introspection: Option<Introspection>,
}

/// Why a token is refused: the caller's fault, answered `401`. The label is the `reason` of
/// `oncerpc_auth_refusals_total`; none says more than that to a client in production mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    TooLarge,
    Malformed,
    Algorithm,
    UnknownKey,
    Signature,
    Issuer,
    Audience,
    Expired,
    NotYetValid,
    Tenant,
    /// Introspection says the token is not active (unknown, revoked, expired).
    Inactive,
}

impl Refusal {
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::TooLarge => "token_too_large",
            Refusal::Malformed => "malformed_token",
            Refusal::Algorithm => "algorithm",
            Refusal::UnknownKey => "unknown_key",
            Refusal::Signature => "signature",
            Refusal::Issuer => "issuer",
            Refusal::Audience => "audience",
            Refusal::Expired => "expired",
            Refusal::NotYetValid => "not_yet_valid",
            Refusal::Tenant => "tenant",
            Refusal::Inactive => "inactive_token",
        }
    }
}

/// The issuer of a token cannot vouch for it now (its keys could not be fetched).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    pub issuer: String,
}

/// Why a token was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenError {
    Refused(Refusal),
    Unavailable(Unavailable),
}

/// A verified token: who, for which tenant, with what.
#[derive(Debug, Clone)]
pub struct Verified {
    pub tenant: Arc<str>,
    pub subject: Option<Arc<str>>,
    pub grant: Grant,
    /// When it expires (the cache forgets it then).
    pub(super) expires: Instant,
}

/// One issuer's keys, by `kid`.
#[derive(Default)]
struct Keys {
    by_kid: HashMap<String, (DecodingKey, Option<Algorithm>)>,
    /// Fetched at least once.
    loaded: bool,
}

pub(super) struct Issuer {
    pub(super) spec: IssuerSpec,
    validation: Validation,
    keys: RwLock<Keys>,
    /// When keys were last fetched because of an unknown `kid`.
    last_refetch: Mutex<Option<Instant>>,
    /// One fetch at a time.
    fetching: tokio::sync::Mutex<()>,
}

/// The configured issuers, their keys and the verified tokens.
pub struct Issuers {
    pub(super) issuers: Vec<Arc<Issuer>>,
    tenants: Vec<String>,
    cache: Mutex<Cache>,
    pub(super) http: reqwest::Client,
}

impl std::fmt::Debug for Issuers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.issuers.iter().map(|i| i.spec.issuer.as_str()).collect();
        f.debug_struct("Issuers").field("issuers", &names).finish()
    }
}

/// Whether a credential looks like a JWT (three base64url parts): it is read as a token, not
/// compared with the API keys.
pub fn looks_like_jwt(credential: &str) -> bool {
    credential.starts_with("eyJ") && credential.bytes().filter(|&b| b == b'.').count() == 2
}

impl Issuers {
    /// The issuers of `specs`, with `tenants` the configured tenant names (a `tenant_claim`
    /// must name one of them); keys not fetched yet ([`start`](Self::start)).
    pub fn new(specs: Vec<IssuerSpec>, tenants: Vec<String>, http: reqwest::Client) -> Issuers {
        let issuers = specs
            .into_iter()
            .map(|spec| {
                let mut validation = Validation::new(spec.algorithms[0]);
                validation.algorithms = spec.algorithms.clone();
                validation.leeway = spec.leeway_secs;
                validation.validate_nbf = true;
                validation.set_issuer(&[&spec.issuer]);
                validation.set_audience(&spec.audience);
                validation.set_required_spec_claims(&["exp", "iss", "aud"]);
                Arc::new(Issuer {
                    spec,
                    validation,
                    keys: RwLock::new(Keys::default()),
                    last_refetch: Mutex::new(None),
                    fetching: tokio::sync::Mutex::new(()),
                })
            })
            .collect();
        Issuers { issuers, tenants, cache: Mutex::new(Cache::default()), http }
    }

    pub fn is_empty(&self) -> bool {
        self.issuers.is_empty()
    }

    /// The issuers' URLs (RFC 9728 `authorization_servers`).
    pub fn issuer_urls(&self) -> Vec<String> {
        self.issuers.iter().map(|i| i.spec.issuer.clone()).collect()
    }

    /// Fetch every issuer's keys now and keep them fresh (inside a tokio runtime): a failed
    /// fetch is retried with backoff (1 s doubling to 10 s), a good one again after
    /// `jwks_refresh_secs`.
    pub fn start(self: &Arc<Self>) {
        for issuer in &self.issuers {
            let (issuer, http) = (issuer.clone(), self.http.clone());
            // Ends once these issuers are dropped (a reload replaced them and the requests
            // that held them finished).
            let alive = Arc::downgrade(self);
            tokio::spawn(async move {
                let mut backoff = Duration::from_secs(1);
                while alive.strong_count() > 0 {
                    match issuer.fetch(&http).await {
                        Ok(()) => {
                            backoff = Duration::from_secs(1);
                            tokio::time::sleep(issuer.spec.jwks_refresh).await;
                        }
                        Err(e) => {
                            tracing::warn!(issuer = %issuer.spec.issuer, error = %oncerpc_core::LogSafe(&e), retry_in_ms = backoff.as_millis() as u64, "identity provider: cannot fetch its signing keys");
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(MAX_BACKOFF);
                        }
                    }
                }
            });
        }
    }

    /// Fetch, within `FETCH_TIMEOUT`, the keys of every issuer whose keys were never
    /// fetched: for issuers consulted now and then (the console's sign-in) instead of kept
    /// fresh by [`start`](Self::start); a rotated key is still fetched when a token names it.
    /// `Err`: why they cannot be had (for the caller's one log line).
    pub async fn load(&self) -> Result<(), String> {
        for issuer in &self.issuers {
            if issuer.keys.read().unwrap_or_else(|e| e.into_inner()).loaded {
                continue;
            }
            tokio::time::timeout(FETCH_TIMEOUT, issuer.fetch(&self.http))
                .await
                .unwrap_or_else(|_| Err(format!("no keys within {} s", FETCH_TIMEOUT.as_secs())))?;
        }
        Ok(())
    }

    /// Verify `token` (from `Authorization: Bearer`).
    pub async fn verify(&self, token: &str) -> Result<Verified, TokenError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(TokenError::Refused(Refusal::TooLarge));
        }
        if let Some(v) = self.cached(token) {
            return Ok(v);
        }
        let refused = |r| Err(TokenError::Refused(r));
        let Ok(header) = jsonwebtoken::decode_header(token) else { return refused(Refusal::Malformed) };
        // Which issuer: the one the token names (unverified yet; checked with its keys).
        let Ok(claims) = jsonwebtoken::dangerous::insecure_decode_claims::<Value>(token) else {
            return refused(Refusal::Malformed);
        };
        let named = claims.get("iss").and_then(Value::as_str).unwrap_or_default();
        let Some(issuer) = self.issuers.iter().find(|i| i.spec.issuer == named) else {
            return refused(Refusal::Issuer);
        };
        if !issuer.spec.algorithms.contains(&header.alg) {
            return refused(Refusal::Algorithm);
        }
        let Some(kid) = header.kid.as_deref() else { return refused(Refusal::UnknownKey) };
        let key = match issuer.key(kid) {
            Some(k) => k,
            None => {
                issuer.refetch_for_unknown_kid(&self.http).await?;
                issuer.key(kid).ok_or(TokenError::Refused(Refusal::UnknownKey))?
            }
        };
        if key.1.is_some_and(|alg| alg != header.alg) {
            return refused(Refusal::Algorithm);
        }
        // The token's own algorithm only (one of the issuer's, checked above): jsonwebtoken
        // refuses a list that spans key families, so no other family's check can apply.
        let mut validation = issuer.validation.clone();
        validation.algorithms = vec![header.alg];
        let data = match jsonwebtoken::decode::<Value>(token, &key.0, &validation) {
            Ok(d) => d,
            Err(e) => return refused(refusal_of(e.kind())),
        };
        let verified = self.identity(issuer, &data.claims)?;
        self.remember(token, &verified);
        Ok(verified)
    }

    /// A verified token of the cache, unless it expired.
    pub(super) fn cached(&self, token: &str) -> Option<Verified> {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.get(token).filter(|v| v.expires > Instant::now()).cloned()
    }

    /// Keep a verified token until it expires (at most [`MAX_CACHED`] of them).
    pub(super) fn remember(&self, token: &str, verified: &Verified) {
        let now = Instant::now();
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.len() >= MAX_CACHED {
            cache.retain(|_, v| v.expires > now);
            if cache.len() >= MAX_CACHED {
                cache.clear();
            }
        }
        cache.insert(Box::from(token), verified.clone());
    }

    /// The tenant, subject and scopes of a token whose signature and claims were checked.
    pub(super) fn identity(&self, issuer: &Issuer, claims: &Value) -> Result<Verified, TokenError> {
        let tenant = match &issuer.spec.tenant {
            TenantFrom::Fixed(t) => t.clone(),
            TenantFrom::Claim(claim) => match claims.get(claim).and_then(Value::as_str) {
                Some(t) if self.tenants.iter().any(|c| c == t) => t.to_owned(),
                _ => return Err(TokenError::Refused(Refusal::Tenant)),
            },
        };
        let scopes: Vec<String> = match claims.get(&issuer.spec.scopes_claim) {
            Some(Value::String(s)) => s.split_whitespace().map(str::to_owned).collect(),
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
            _ => Vec::new(),
        };
        let exp = claims.get("exp").and_then(Value::as_u64).unwrap_or(0);
        let left = exp.saturating_sub(jsonwebtoken::get_current_timestamp());
        Ok(Verified {
            tenant: Arc::from(tenant),
            subject: claims.get("sub").and_then(Value::as_str).map(Arc::from),
            grant: Grant::scopes(scopes),
            expires: Instant::now() + Duration::from_secs(left),
        })
    }
}

impl Issuer {
    fn key(&self, kid: &str) -> Option<(DecodingKey, Option<Algorithm>)> {
        self.keys.read().unwrap_or_else(|e| e.into_inner()).by_kid.get(kid).cloned()
    }

    /// A token names a key this issuer's set does not have (keys rotated since the last
    /// fetch): fetch again, at most once per [`REFETCH_EVERY`]. `Err`: the keys cannot be
    /// had, and the token cannot be judged.
    async fn refetch_for_unknown_kid(&self, http: &reqwest::Client) -> Result<(), TokenError> {
        let due = {
            let mut last = self.last_refetch.lock().unwrap_or_else(|e| e.into_inner());
            let due = last.is_none_or(|at| at.elapsed() >= REFETCH_EVERY);
            if due {
                *last = Some(Instant::now());
            }
            due
        };
        let loaded = self.keys.read().unwrap_or_else(|e| e.into_inner()).loaded;
        if !loaded {
            // Never fetched: the background fetch is at it; this token cannot be judged now.
            return Err(self.unavailable());
        }
        if !due {
            // Not now: judged with the keys there are.
            return Ok(());
        }
        // Bounded as a whole (a refresh in progress included): a request never waits longer.
        let fetched = tokio::time::timeout(FETCH_TIMEOUT, self.fetch(http))
            .await
            .unwrap_or_else(|_| Err(format!("no keys within {} s", FETCH_TIMEOUT.as_secs())));
        match fetched {
            Ok(()) => Ok(()),
            Err(e) => {
                tracing::warn!(issuer = %self.spec.issuer, error = %oncerpc_core::LogSafe(&e), "identity provider: cannot fetch its signing keys for an unknown key id");
                Err(self.unavailable())
            }
        }
    }

    pub(super) fn unavailable(&self) -> TokenError {
        TokenError::Unavailable(Unavailable { issuer: self.spec.issuer.clone() })
    }

    /// Fetch the metadata (unless `jwks_uri` is configured) and the key set; replace the keys.
    async fn fetch(&self, http: &reqwest::Client) -> Result<(), String> {
        let _one = self.fetching.lock().await;
        let jwks_uri = match &self.spec.jwks_uri {
            Some(u) => u.clone(),
            None => self.discover(http).await?,
        };
        let set: JwkSet = get_json(http, &jwks_uri).await?;
        let mut by_kid = HashMap::new();
        for jwk in set.keys {
            let Some(kid) = jwk.common.key_id.clone() else { continue };
            if jwk.common.public_key_use.as_ref().is_some_and(|u| *u != PublicKeyUse::Signature) {
                continue;
            }
            if !matches!(
                jwk.algorithm,
                AlgorithmParameters::RSA(_)
                    | AlgorithmParameters::EllipticCurve(_)
                    | AlgorithmParameters::OctetKeyPair(_)
            ) {
                continue;
            }
            let alg = jwk.common.key_algorithm.and_then(algorithm_of);
            if let Ok(key) = DecodingKey::from_jwk(&jwk) {
                by_kid.insert(kid, (key, alg));
            }
        }
        let n = by_kid.len();
        *self.keys.write().unwrap_or_else(|e| e.into_inner()) = Keys { by_kid, loaded: true };
        tracing::info!(issuer = %self.spec.issuer, keys = n, "identity provider: signing keys fetched");
        Ok(())
    }

    /// The `jwks_uri` of the issuer's metadata: OpenID Connect discovery, else RFC 8414.
    async fn discover(&self, http: &reqwest::Client) -> Result<String, String> {
        let base = self.spec.issuer.trim_end_matches('/');
        let mut last = String::new();
        for well_known in ["openid-configuration", "oauth-authorization-server"] {
            match get_json::<Value>(http, &format!("{base}/.well-known/{well_known}")).await {
                Ok(meta) => match meta.get("jwks_uri").and_then(Value::as_str) {
                    Some(u) => return Ok(u.to_owned()),
                    None => last = format!("its {well_known} metadata has no jwks_uri"),
                },
                Err(e) => last = e,
            }
        }
        Err(last)
    }
}

/// Verified tokens by their text.
type Cache = HashMap<Box<str>, Verified, foldhash::fast::RandomState>;

/// GET `url` as JSON within [`FETCH_TIMEOUT`]; the error says why in a few words (no body).
pub(crate) async fn get_json<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    url: &str,
) -> Result<T, String> {
    let fetching = async {
        let resp = http.get(url).send().await.map_err(|e| format!("GET {url}: {}", e.without_url()))?;
        if !resp.status().is_success() {
            return Err(format!("GET {url}: HTTP {}", resp.status().as_u16()));
        }
        let body = resp.bytes().await.map_err(|e| format!("GET {url}: {}", e.without_url()))?;
        if body.len() > 1 << 20 {
            return Err(format!("GET {url}: an answer over 1 MiB"));
        }
        serde_json::from_slice(&body).map_err(|_| format!("GET {url}: not the JSON expected"))
    };
    tokio::time::timeout(FETCH_TIMEOUT, fetching)
        .await
        .map_err(|_| format!("GET {url}: no answer within {} s", FETCH_TIMEOUT.as_secs()))?
}

fn algorithm_of(alg: KeyAlgorithm) -> Option<Algorithm> {
    Some(match alg {
        KeyAlgorithm::RS256 => Algorithm::RS256,
        KeyAlgorithm::RS384 => Algorithm::RS384,
        KeyAlgorithm::RS512 => Algorithm::RS512,
        KeyAlgorithm::PS256 => Algorithm::PS256,
        KeyAlgorithm::PS384 => Algorithm::PS384,
        KeyAlgorithm::PS512 => Algorithm::PS512,
        KeyAlgorithm::ES256 => Algorithm::ES256,
        KeyAlgorithm::ES384 => Algorithm::ES384,
        KeyAlgorithm::EdDSA => Algorithm::EdDSA,
        _ => return None,
    })
}

fn refusal_of(kind: &jsonwebtoken::errors::ErrorKind) -> Refusal {
    use jsonwebtoken::errors::ErrorKind as K;
    match kind {
        K::ExpiredSignature => Refusal::Expired,
        K::ImmatureSignature => Refusal::NotYetValid,
        K::InvalidIssuer => Refusal::Issuer,
        K::InvalidAudience => Refusal::Audience,
        K::InvalidAlgorithm | K::UnsupportedAlgorithm | K::InvalidAlgorithmName | K::MissingAlgorithm => {
            Refusal::Algorithm
        }
        K::InvalidSignature => Refusal::Signature,
        _ => Refusal::Malformed,
    }
}

/// The algorithms an issuer may name: asymmetric signatures only. `none` and `HS*` are
/// refused here (a config error naming the value), so a public key can never be used as an
/// HMAC secret.
pub fn parse_algorithm(name: &str) -> Result<Algorithm, String> {
    let alg: Algorithm = name.parse().map_err(|_| format!("{name:?} is not a JWS algorithm"))?;
    match alg {
        Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512 => Err(format!(
            "{name:?} is a shared-secret algorithm: an issuer's tokens must be signed with its private key (RS256, ES256, EdDSA, …)"
        )),
        a => Ok(a),
    }
}

/// `introspection = { url, client_id, client_secret, cache_secs }` of an issuer.
#[derive(Clone)]
pub struct Introspection {
    pub url: String,
    pub client_id: String,
    pub client_secret: String,
    /// How long an answer is kept at most (the token's `exp` may end it sooner).
    pub cache: Duration,
}

impl std::fmt::Debug for Introspection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret.
        f.debug_struct("Introspection").field("url", &self.url).field("client_id", &self.client_id).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_asymmetric_algorithms_may_be_configured() {
        assert_eq!(parse_algorithm("RS256"), Ok(Algorithm::RS256));
        assert_eq!(parse_algorithm("EdDSA"), Ok(Algorithm::EdDSA));
        assert!(parse_algorithm("HS256").unwrap_err().contains("shared-secret"));
        assert!(parse_algorithm("none").unwrap_err().contains("not a JWS algorithm"));
    }

    #[test]
    fn a_jwt_is_told_from_an_api_key_by_its_shape() {
        assert!(looks_like_jwt("eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"));
        assert!(!looks_like_jwt("acme-key-0123456789"));
        assert!(!looks_like_jwt("eyJ.only-one-dot"));
    }
}
