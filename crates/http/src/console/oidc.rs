//! Console sign-in with the identity provider (`[console.oidc]`, SPEC §20): the OpenID Connect
//! authorization code flow with PKCE (S256), beside the API-key form.
//!
//! * `GET /console/oidc/start` reads the provider's endpoints (discovery at
//!   `{issuer}/.well-known/openid-configuration`, whose `issuer` must be the configured one;
//!   kept an hour), remembers a fresh `state` with its PKCE verifier, nonce and the browser's
//!   binding cookie (`pending.rs`: bounded, five minutes, single use) and sends
//!   the browser to the provider.
//! * `GET /console/oidc/callback` takes the `state` out (unknown, used, expired, or another
//!   browser's: `400`), exchanges the code at the token endpoint with the client secret
//!   (`client_secret_basic`) and the verifier, and verifies the ID token with the machinery of
//!   the access tokens ([`Issuers`]: the provider's JWKS, the signature, `iss`, `aud` = the
//!   client id, `exp`, `nbf`) and then its `nonce` (and `azp`, when present). Its tenant is
//!   decided as an `[[auth.issuers]]` entry decides it (`tenant` or `tenant_claim`).
//! * The session then is the one an API key opens (same cookie, CSRF token, idle end). The
//!   browser comes back from another site, and the session cookie is `SameSite=Strict`: the
//!   callback answers a page that moves on to the events itself (a same-site navigation that
//!   carries the new cookie).
//!
//! Every refusal is a page with its status, counted in `oncerpc_console_refusals_total{reason}`
//! (`oidc_*`) and logged once; a provider that is down, slow or answers garbage is `503` within
//! `FETCH_TIMEOUT`. The code, the tokens and the state are never logged or shown.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use base64::Engine;
use jsonwebtoken::Algorithm;
use oncerpc_core::LogSafe;
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::pending::{Flow, PENDING_TTL, Pending};
use super::session::{cookie, token};
use super::{console, html, see_other, token_matches, view};
use crate::AppState;
use crate::auth::tokens::{FETCH_TIMEOUT, IssuerSpec, Issuers, Refusal, TenantFrom, TokenError, get_json};

/// The route the provider sends the browser back to (`redirect_url`'s path).
pub const CALLBACK_PATH: &str = "/console/oidc/callback";
pub(crate) use super::view::START_PATH;
/// The cookie binding a sign-in to the browser that started it.
const BROWSER_COOKIE: &str = "oncerpc_console_oidc";
/// The provider's endpoints are read again after this long.
const METADATA_TTL: Duration = Duration::from_secs(60 * 60);

/// `[console.oidc]`, checked.
#[derive(Clone)]
pub struct OidcConfig {
    pub issuer: String,
    pub client_id: String,
    pub client_secret: String,
    /// Where the provider sends the browser back: this gateway's [`CALLBACK_PATH`].
    pub redirect_url: String,
    /// The provider's name on the login page ("Sign in with …").
    pub name: String,
    /// The scopes asked for (`openid` among them).
    pub scopes: Vec<String>,
    /// Where the ID token's tenant comes from.
    pub tenant: TenantFrom,
    pub algorithms: Vec<Algorithm>,
    pub leeway_secs: u64,
    /// The configured tenants (a `tenant_claim` must name one).
    pub tenants: Vec<String>,
    /// For discovery, keys and the token endpoint (the gateway's TLS settings).
    pub http: reqwest::Client,
}

impl OidcConfig {
    /// Whether `other` signs in the same way (every setting but the HTTP client).
    pub(crate) fn same_as(&self, other: &OidcConfig) -> bool {
        (&self.issuer, &self.client_id, &self.client_secret, &self.redirect_url, &self.name)
            == (&other.issuer, &other.client_id, &other.client_secret, &other.redirect_url, &other.name)
            && (&self.scopes, &self.tenant, &self.algorithms, self.leeway_secs, &self.tenants)
                == (&other.scopes, &other.tenant, &other.algorithms, other.leeway_secs, &other.tenants)
    }
}

impl std::fmt::Debug for OidcConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the client secret.
        f.debug_struct("OidcConfig")
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("redirect_url", &self.redirect_url)
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

/// The provider's endpoints (OpenID Connect discovery).
#[derive(Clone, Deserialize)]
struct Endpoints {
    issuer: String,
    authorization_endpoint: String,
    token_endpoint: String,
}

/// The console's sign-in with the provider.
pub(crate) struct Oidc {
    config: OidcConfig,
    pending: Pending,
    endpoints: Mutex<Option<(Endpoints, Instant)>>,
    /// The provider as the issuer of ID tokens for this client.
    id_tokens: Issuers,
}

/// Why a sign-in was refused.
#[derive(Debug)]
enum Failure {
    /// The provider cannot be reached, is too slow or answers garbage.
    Unavailable(String),
    /// No, an unknown, a used or an expired `state`, another browser's, or no code.
    State(&'static str),
    /// The provider answered with an error (the user declined, …): its code.
    Denied(String),
    /// The token endpoint refused the code (used, expired, not this verifier's): its error.
    Code(String),
    /// The ID token failed a check.
    IdToken(&'static str),
    /// The ID token names no configured tenant.
    Tenant,
}

impl Failure {
    fn status(&self) -> StatusCode {
        match self {
            Failure::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Failure::State(_) => StatusCode::BAD_REQUEST,
            Failure::Denied(_) | Failure::Tenant => StatusCode::FORBIDDEN,
            Failure::Code(_) | Failure::IdToken(_) => StatusCode::UNAUTHORIZED,
        }
    }

    fn reason(&self) -> &'static str {
        match self {
            Failure::Unavailable(_) => "oidc_unavailable",
            Failure::State(_) => "oidc_state",
            Failure::Denied(_) => "oidc_denied",
            Failure::Code(_) => "oidc_code",
            Failure::IdToken(_) => "oidc_id_token",
            Failure::Tenant => "oidc_tenant",
        }
    }

    /// What the page says.
    fn message(&self) -> String {
        match self {
            Failure::Unavailable(_) => "The identity provider cannot be reached now: try again later, or log in with an API key.".into(),
            Failure::State(_) => "This sign-in is unknown, was used already, has expired or was started in another browser: sign in again.".into(),
            Failure::Denied(e) => format!("The identity provider did not sign you in ({e})."),
            Failure::Code(_) => "The identity provider refused the sign-in code (it was used already or has expired): sign in again.".into(),
            Failure::IdToken(_) => "The identity provider's ID token did not pass its checks: sign in again.".into(),
            Failure::Tenant => "Your account is not linked to a tenant of this gateway.".into(),
        }
    }

    /// What the log line says (never a code, a token or a state).
    fn detail(&self) -> String {
        match self {
            Failure::Unavailable(e) | Failure::Denied(e) | Failure::Code(e) => e.clone(),
            Failure::State(why) | Failure::IdToken(why) => (*why).to_owned(),
            Failure::Tenant => "tenant".to_owned(),
        }
    }
}

/// An error code from the provider, as shown and logged: its own text when it is a plain
/// OAuth error code, else `other`.
fn error_code(e: Option<&str>) -> String {
    match e {
        Some(e)
            if !e.is_empty() && e.len() <= 64 && e.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') =>
        {
            e.to_owned()
        }
        _ => "other".to_owned(),
    }
}

/// PKCE S256: base64url(SHA-256(verifier)), unpadded.
fn challenge(verifier: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()))
}

impl Oidc {
    /// Its settings.
    pub(crate) fn config(&self) -> &OidcConfig {
        &self.config
    }

    pub(crate) fn new(config: OidcConfig) -> Oidc {
        let spec = IssuerSpec {
            issuer: config.issuer.clone(),
            jwks_uri: None,
            audience: vec![config.client_id.clone()],
            algorithms: config.algorithms.clone(),
            leeway_secs: config.leeway_secs,
            tenant: config.tenant.clone(),
            scopes_claim: "scope".into(),
            jwks_refresh: Duration::from_secs(300),
            introspection: None,
        };
        let id_tokens = Issuers::new(vec![spec], config.tenants.clone(), config.http.clone());
        Oidc { config, pending: Pending::default(), endpoints: Mutex::new(None), id_tokens }
    }

    /// The provider's name on the login page.
    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    async fn endpoints(&self) -> Result<Endpoints, Failure> {
        if let Some((e, at)) = &*self.endpoints.lock().unwrap_or_else(|e| e.into_inner())
            && at.elapsed() < METADATA_TTL
        {
            return Ok(e.clone());
        }
        let url = format!("{}/.well-known/openid-configuration", self.config.issuer.trim_end_matches('/'));
        let found: Endpoints = get_json(&self.config.http, &url).await.map_err(Failure::Unavailable)?;
        if found.issuer != self.config.issuer {
            return Err(Failure::Unavailable(format!("{url}: its issuer is not {}", self.config.issuer)));
        }
        *self.endpoints.lock().unwrap_or_else(|e| e.into_inner()) = Some((found.clone(), Instant::now()));
        Ok(found)
    }

    /// A new sign-in: remember it, and the provider's URL to send the browser to with the
    /// browser's binding value.
    async fn begin(&self) -> Result<(String, String), Failure> {
        let endpoints = self.endpoints().await?;
        let (state, nonce, verifier, browser) = (token(), token(), token(), token());
        let url = {
            let c = &self.config;
            let mut q = form_urlencoded::Serializer::new(String::new());
            q.append_pair("response_type", "code")
                .append_pair("client_id", &c.client_id)
                .append_pair("redirect_uri", &c.redirect_url)
                .append_pair("scope", &c.scopes.join(" "))
                .append_pair("state", &state)
                .append_pair("nonce", &nonce)
                .append_pair("code_challenge", &challenge(&verifier))
                .append_pair("code_challenge_method", "S256");
            let sep = if endpoints.authorization_endpoint.contains('?') { '&' } else { '?' };
            format!("{}{sep}{}", endpoints.authorization_endpoint, q.finish())
        };
        let flow = Flow { verifier, nonce, browser: browser.clone(), started: Instant::now() };
        self.pending.insert(state, flow);
        Ok((url, browser))
    }

    /// The callback: the tenant and subject of the signed-in user.
    async fn finish(
        &self,
        params: &HashMap<String, String>,
        headers: &HeaderMap,
    ) -> Result<(Arc<str>, Option<Arc<str>>), Failure> {
        let state = params.get("state").ok_or(Failure::State("no state"))?;
        let flow = self.pending.take(state, Instant::now()).ok_or(Failure::State("unknown state"))?;
        if !token_matches(cookie(headers, BROWSER_COOKIE), &flow.browser) {
            return Err(Failure::State("another browser"));
        }
        if params.contains_key("error") {
            return Err(Failure::Denied(error_code(params.get("error").map(String::as_str))));
        }
        let code = params.get("code").filter(|c| !c.is_empty()).ok_or(Failure::State("no code"))?;
        let endpoints = self.endpoints().await?;
        let id_token = self.exchange(&endpoints, code, &flow.verifier).await?;
        self.id_tokens.load().await.map_err(Failure::Unavailable)?;
        let verified = match self.id_tokens.verify(&id_token).await {
            Ok(v) => v,
            Err(TokenError::Refused(Refusal::Tenant)) => return Err(Failure::Tenant),
            Err(TokenError::Refused(r)) => return Err(Failure::IdToken(r.reason())),
            Err(TokenError::Unavailable(u)) => {
                return Err(Failure::Unavailable(format!("the keys of {} cannot be had", u.issuer)));
            }
        };
        // The signature was checked just now: its claims can be read.
        let claims = jsonwebtoken::dangerous::insecure_decode_claims::<Value>(&id_token)
            .map_err(|_| Failure::IdToken("malformed_token"))?;
        if !token_matches(claims.get("nonce").and_then(Value::as_str), &flow.nonce) {
            return Err(Failure::IdToken("nonce"));
        }
        if claims.get("azp").and_then(Value::as_str).is_some_and(|azp| azp != self.config.client_id) {
            return Err(Failure::IdToken("azp"));
        }
        Ok((verified.tenant, verified.subject))
    }

    /// The code for an ID token at the token endpoint, within [`FETCH_TIMEOUT`].
    async fn exchange(&self, endpoints: &Endpoints, code: &str, verifier: &str) -> Result<String, Failure> {
        let c = &self.config;
        let body = form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", "authorization_code")
            .append_pair("code", code)
            .append_pair("redirect_uri", &c.redirect_url)
            .append_pair("code_verifier", verifier)
            .finish();
        // RFC 6749 §2.3.1: the id and secret are form-encoded before Basic.
        let encode = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
        let url = &endpoints.token_endpoint;
        let unavailable = |e: String| Failure::Unavailable(format!("POST {url}: {e}"));
        let exchanging = async {
            let resp = c
                .http
                .post(url)
                .basic_auth(encode(&c.client_id), Some(encode(&c.client_secret)))
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
                .header(header::ACCEPT, "application/json")
                .body(body)
                .send()
                .await
                .map_err(|e| unavailable(e.without_url().to_string()))?;
            let status = resp.status();
            let bytes = resp.bytes().await.map_err(|e| unavailable(e.without_url().to_string()))?;
            if bytes.len() > 1 << 20 {
                return Err(unavailable("an answer over 1 MiB".into()));
            }
            let answer: Value = serde_json::from_slice(&bytes)
                .map_err(|_| unavailable(format!("HTTP {}: not JSON", status.as_u16())))?;
            if status.is_client_error() {
                return Err(Failure::Code(error_code(answer.get("error").and_then(Value::as_str))));
            }
            if !status.is_success() {
                return Err(unavailable(format!("HTTP {}", status.as_u16())));
            }
            match answer.get("id_token").and_then(Value::as_str) {
                Some(t) => Ok(t.to_owned()),
                None => Err(unavailable("no id_token in the answer".into())),
            }
        };
        tokio::time::timeout(FETCH_TIMEOUT, exchanging)
            .await
            .map_err(|_| unavailable(format!("no answer within {} s", FETCH_TIMEOUT.as_secs())))?
    }
}

/// The binding cookie (`max_age` 0: delete it). `SameSite=Lax`: it must come back with the
/// provider's redirect, a navigation from another site.
fn browser_cookie(st: &AppState, value: &str, max_age: Duration) -> HeaderValue {
    let secure = if console(st).config.secure_cookie { "; Secure" } else { "" };
    let text = format!(
        "{BROWSER_COOKIE}={value}; Path=/console/oidc; HttpOnly; SameSite=Lax; Max-Age={}{secure}",
        max_age.as_secs()
    );
    HeaderValue::from_str(&text).expect("tokens are plain ASCII")
}

/// A refused sign-in: counted, logged once, answered with a page that says why.
fn failed(st: &AppState, f: Failure) -> Response {
    let (status, reason) = (f.status(), f.reason());
    console(st).refusals.with_label_values(&[reason]).inc();
    let detail = f.detail();
    if let Failure::Unavailable(_) = f {
        tracing::warn!(status = status.as_u16(), reason, detail = %LogSafe(&detail), "console sign-in refused");
    } else {
        tracing::info!(status = status.as_u16(), reason, detail = %LogSafe(&detail), "console sign-in refused");
    }
    let mut resp = html(status, view::refusal(status, &f.message()));
    if status == StatusCode::SERVICE_UNAVAILABLE {
        resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(5));
    }
    resp
}

fn configured(st: &AppState) -> Result<&Oidc, Box<Response>> {
    console(st).oidc.as_deref().ok_or_else(|| {
        let message = "Sign-in with an identity provider is not configured.";
        Box::new(super::refused(st, StatusCode::NOT_FOUND, "not_found", message))
    })
}

/// `GET /console/oidc/start`: to the provider.
pub(crate) async fn start(State(st): State<Arc<AppState>>) -> Response {
    let _admitted = match st.admit(crate::Door::Flows) {
        Ok(a) => a,
        Err(resp) => return *resp,
    };
    let oidc = match configured(&st) {
        Ok(o) => o,
        Err(resp) => return *resp,
    };
    match oidc.begin().await {
        Ok((url, browser)) => {
            let mut resp = see_other(&url);
            resp.headers_mut().append(header::SET_COOKIE, browser_cookie(&st, &browser, PENDING_TTL));
            resp
        }
        Err(f) => failed(&st, f),
    }
}

/// `GET /console/oidc/callback`: a session for the ID token's tenant.
pub(crate) async fn callback(
    State(st): State<Arc<AppState>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let _admitted = match st.admit(crate::Door::Flows) {
        Ok(a) => a,
        Err(resp) => return *resp,
    };
    let oidc = match configured(&st) {
        Ok(o) => o,
        Err(resp) => return *resp,
    };
    let params: HashMap<String, String> =
        form_urlencoded::parse(query.as_deref().unwrap_or("").as_bytes()).into_owned().collect();
    let (tenant, subject) = match oidc.finish(&params, &headers).await {
        Ok(who) => who,
        Err(f) => {
            let mut resp = failed(&st, f);
            resp.headers_mut().append(header::SET_COOKIE, browser_cookie(&st, "", Duration::ZERO));
            return resp;
        }
    };
    let subject = subject.as_deref().unwrap_or("");
    tracing::info!(tenant = %LogSafe(&tenant), subject = %LogSafe(subject), "console sign-in with the identity provider");
    let id = console(&st).sessions.open(tenant);
    let mut resp = html(StatusCode::OK, view::signed_in());
    let idle = console(&st).config.session_idle;
    let h = resp.headers_mut();
    h.append(header::SET_COOKIE, super::session::set_cookie(&st, super::session::COOKIE, &id, idle));
    h.append(header::SET_COOKIE, browser_cookie(&st, "", Duration::ZERO));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pkce_challenge_is_rfc_7636s() {
        // RFC 7636, Appendix B.
        assert_eq!(
            challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
    }

    #[test]
    fn only_plain_error_codes_reach_a_page_or_a_log() {
        assert_eq!(error_code(Some("access_denied")), "access_denied");
        assert_eq!(error_code(Some("<script>")), "other");
        assert_eq!(error_code(None), "other");
    }
}
