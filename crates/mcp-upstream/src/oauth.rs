//! Credentials towards upstreams (SPEC §20): `[upstream.oauth]`, a step's own `oauth`, or an
//! `[[mcp.upstreams]]` entry's `oauth` makes oncerpc an OAuth 2.1 client of the upstream's
//! authorization server by the client-credentials grant. It lives here, in the lowest crate
//! that talks to upstreams: the flows crate (HTTP steps) re-exports it.
//!
//! The token is cached until shortly before it expires and fetched once for all the calls that
//! need it at that moment (single flight); a `401` from the upstream fetches a new one once.
//! The client's own token is never passed through: the upstream sees oncerpc's.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A token is fetched again this long before it expires.
const EARLY: Duration = Duration::from_secs(30);
/// One token request may take this long.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);
/// A token without `expires_in` is kept this long.
const DEFAULT_LIFETIME: Duration = Duration::from_secs(300);

/// `oauth = { token_url, client_id, client_secret, scope, audience }`: oncerpc's own client at
/// an upstream's authorization server (the client-credentials grant, `client_secret_basic`).
#[derive(Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OAuthClient {
    pub token_url: String,
    pub client_id: String,
    /// Put it in the environment: `"${NAME}"`.
    pub client_secret: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// The upstream as a resource (sent as `audience` and `resource`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audience: Option<String>,
}

impl std::fmt::Debug for OAuthClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret.
        f.debug_struct("OAuthClient")
            .field("token_url", &self.token_url)
            .field("client_id", &self.client_id)
            .field("scope", &self.scope)
            .field("audience", &self.audience)
            .finish()
    }
}

impl OAuthClient {
    /// Its own rules; `at` names the key in errors.
    pub fn check(&self, at: &str) -> Result<(), String> {
        if !(self.token_url.starts_with("https://") || self.token_url.starts_with("http://")) {
            return Err(format!("{at}.token_url must be an http:// or https:// URL"));
        }
        if self.client_id.is_empty() || self.client_secret.is_empty() {
            return Err(format!("{at}: client_id and client_secret are required"));
        }
        Ok(())
    }
}

/// The access tokens of one OAuth client.
pub struct TokenSource {
    config: OAuthClient,
    http: reqwest::Client,
    cached: Mutex<Option<(Arc<str>, Instant)>>,
    /// One fetch at a time: callers that wait for it take its token.
    fetching: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret or the token.
        f.debug_struct("TokenSource").field("token_url", &self.config.token_url).finish()
    }
}

impl TokenSource {
    pub fn new(config: OAuthClient, http: reqwest::Client) -> TokenSource {
        TokenSource { config, http, cached: Mutex::new(None), fetching: tokio::sync::Mutex::new(()) }
    }

    /// The cached token, if it has not expired (a best-effort call needs no fresh one).
    pub fn cached(&self) -> Option<Arc<str>> {
        let cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        cached.as_ref().filter(|(_, until)| Instant::now() < *until).map(|(t, _)| t.clone())
    }

    fn fresh(&self) -> Option<Arc<str>> {
        let cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        cached.as_ref().filter(|(_, until)| Instant::now() + EARLY < *until).map(|(t, _)| t.clone())
    }

    /// A token: the cached one while it is fresh, else one fetched now (once for every caller
    /// that asks meanwhile). `Err` says why in a few words (never the secret).
    pub async fn token(&self) -> Result<Arc<str>, String> {
        if let Some(t) = self.fresh() {
            return Ok(t);
        }
        let _one = self.fetching.lock().await;
        if let Some(t) = self.fresh() {
            return Ok(t);
        }
        let (token, lifetime) = tokio::time::timeout(FETCH_TIMEOUT, self.fetch()).await.map_err(|_| {
            format!("{}: no answer within {} s", self.config.token_url, FETCH_TIMEOUT.as_secs())
        })??;
        *self.cached.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((token.clone(), Instant::now() + lifetime));
        Ok(token)
    }

    /// The upstream refused `token` (`401`): forget it, unless another caller already did.
    pub fn forget(&self, token: &str) {
        let mut cached = self.cached.lock().unwrap_or_else(|e| e.into_inner());
        if cached.as_ref().is_some_and(|(t, _)| &**t == token) {
            *cached = None;
        }
    }

    async fn fetch(&self) -> Result<(Arc<str>, Duration), String> {
        let c = &self.config;
        let mut form = vec![("grant_type", "client_credentials")];
        if let Some(s) = &c.scope {
            form.push(("scope", s));
        }
        if let Some(a) = &c.audience {
            // Auth0 and others read `audience`; RFC 8707 says `resource`.
            form.push(("audience", a));
            form.push(("resource", a));
        }
        let body = form
            .iter()
            .fold(form_urlencoded::Serializer::new(String::new()), |mut s, (k, v)| {
                s.append_pair(k, v);
                s
            })
            .finish();
        let resp = self
            .http
            .post(&c.token_url)
            .basic_auth(&c.client_id, Some(&c.client_secret))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| format!("{}: {}", c.token_url, e.without_url()))?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|e| format!("{}: {}", c.token_url, e.without_url()))?;
        if !status.is_success() {
            // The error code only (RFC 6749 §5.2), never the rest of the body.
            let code = serde_json::from_slice::<Value>(&bytes)
                .ok()
                .and_then(|v| v.get("error").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or_default();
            return Err(format!("{}: HTTP {} {code}", c.token_url, status.as_u16()));
        }
        let answer: Value =
            serde_json::from_slice(&bytes).map_err(|_| format!("{}: not a token answer", c.token_url))?;
        let token = answer
            .get("access_token")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| format!("{}: no access_token in the answer", c.token_url))?;
        let lifetime =
            answer.get("expires_in").and_then(Value::as_u64).map_or(DEFAULT_LIFETIME, Duration::from_secs);
        Ok((Arc::from(token), lifetime))
    }
}
