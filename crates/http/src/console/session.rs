//! Console sessions: the API-key login, the session cookie and its CSRF token (a sign-in with
//! the identity provider, `oidc.rs`, opens the same session).
//!
//! A session lives in this process (a replica that did not open it sends the operator to the
//! login page): a random token in an `HttpOnly; SameSite=Strict` cookie scoped to `/console`,
//! the tenant it is for, its own CSRF token, and when it was last used. The login form is
//! protected by a token bound to a short pre-login cookie (double submit), so that another
//! site cannot log a browser into a session of its choosing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use tokio::time::Instant;

use super::{console, field, form, html, refused, see_other, token_matches, view};
use crate::AppState;

/// The session cookie's name.
pub(crate) const COOKIE: &str = "oncerpc_console";
/// The pre-login cookie holding the login form's token.
const LOGIN_COOKIE: &str = "oncerpc_console_login";
/// How long a login form stays valid.
const LOGIN_FORM_TTL: Duration = Duration::from_secs(15 * 60);

/// A logged-in operator: the tenant it sees, and its forms' CSRF token.
#[derive(Clone)]
pub(crate) struct Session {
    pub tenant: Arc<str>,
    pub csrf: String,
}

struct Entry {
    session: Session,
    last_used: Instant,
}

/// The sessions of this process.
pub(crate) struct Sessions {
    /// Shared with the successor a reload makes: sessions outlive a reload.
    map: Arc<Mutex<HashMap<String, Entry>>>,
    idle: Duration,
    max: usize,
}

/// A fresh random token: two v4 UUIDs (244 random bits from the OS generator).
pub(super) fn token() -> String {
    format!("{}{}", oncerpc_core::generated_id(), oncerpc_core::generated_id())
}

impl Sessions {
    pub fn new(idle: Duration, max: usize) -> Sessions {
        Sessions { map: Arc::default(), idle, max: max.max(1) }
    }

    /// The same sessions under a reloaded `[console]`'s idle time and bound (each applies from
    /// the session's next use on).
    pub fn successor(&self, idle: Duration, max: usize) -> Sessions {
        Sessions { map: self.map.clone(), idle, max: max.max(1) }
    }

    /// Open a session for `tenant`; returns its cookie token. Past `max`, expired sessions go,
    /// then the least recently used one.
    pub(super) fn open(&self, tenant: Arc<str>) -> String {
        let now = Instant::now();
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() >= self.max {
            map.retain(|_, e| now.duration_since(e.last_used) < self.idle);
        }
        if map.len() >= self.max
            && let Some(oldest) = map.iter().min_by_key(|(_, e)| e.last_used).map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
        }
        let id = token();
        map.insert(id.clone(), Entry { session: Session { tenant, csrf: token() }, last_used: now });
        id
    }

    /// The live session the request's cookie names (its idle clock restarts).
    pub fn find(&self, headers: &HeaderMap) -> Option<Session> {
        let id = cookie(headers, COOKIE)?;
        let now = Instant::now();
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let entry = map.get_mut(id)?;
        if now.duration_since(entry.last_used) >= self.idle {
            map.remove(id);
            return None;
        }
        entry.last_used = now;
        Some(entry.session.clone())
    }

    fn close(&self, headers: &HeaderMap) {
        if let Some(id) = cookie(headers, COOKIE) {
            self.map.lock().unwrap_or_else(|e| e.into_inner()).remove(id);
        }
    }
}

/// The value of cookie `name` in the request.
pub(super) fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// A `Set-Cookie` for the console's path (`max_age` 0: delete it).
pub(super) fn set_cookie(st: &AppState, name: &str, value: &str, max_age: Duration) -> HeaderValue {
    let secure = if console(st).config.secure_cookie { "; Secure" } else { "" };
    let text = format!(
        "{name}={value}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        max_age.as_secs()
    );
    HeaderValue::from_str(&text).expect("tokens are plain ASCII")
}

/// `GET /console`: the events, or the login page.
pub(crate) async fn home(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    match console(&st).sessions.find(&headers) {
        Some(_) => see_other("/console/events"),
        None => see_other("/console/login"),
    }
}

/// `GET /console/login`: the form, with a fresh pre-login token.
pub(crate) async fn login_page(State(st): State<Arc<AppState>>) -> Response {
    login_form(&st, StatusCode::OK, None)
}

fn login_form(st: &AppState, status: StatusCode, error: Option<&str>) -> Response {
    let csrf = token();
    let open = st.config.tenants.is_empty();
    let provider = console(st).oidc.as_ref().map(|o| o.name());
    let mut resp = html(status, view::login(&csrf, open, provider, error));
    resp.headers_mut().append(header::SET_COOKIE, set_cookie(st, LOGIN_COOKIE, &csrf, LOGIN_FORM_TTL));
    resp
}

/// `POST /console/login` (`api_key`, `csrf`): a session for the key's tenant, or the form
/// again with `401`.
pub(crate) async fn login(
    State(st): State<Arc<AppState>>,
    peer: Option<axum::Extension<crate::peer::Peer>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let fields = match form(&st, body, &headers).await {
        Ok(f) => f,
        Err(resp) => return resp,
    };
    let _admitted = match st.admit(crate::Door::Flows) {
        Ok(a) => a,
        Err(resp) => return *resp,
    };
    let expected = cookie(&headers, LOGIN_COOKIE).unwrap_or("");
    if !token_matches(field(&fields, "csrf"), expected) {
        return refused(
            &st,
            StatusCode::FORBIDDEN,
            "csrf",
            "The login form is missing its security token (or it is stale): reload the page and try again.",
        );
    }
    // Too many wrong keys from this address or with this form: refused until the window
    // ends, whatever the key (guessing gains nothing; the right key works again after).
    let address = peer.map(|axum::Extension(p)| p.0);
    let form_token = field(&fields, "csrf").unwrap_or("");
    let throttle = &console(&st).throttle;
    if let Some(wait) = throttle.held(address, form_token, Instant::now()) {
        let secs = wait.as_secs_f64().ceil().max(1.0) as u64;
        let message = format!("Too many wrong API keys: try again in {secs} seconds.");
        let mut resp = refused(&st, StatusCode::TOO_MANY_REQUESTS, "throttled", &message);
        resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        return resp;
    }
    let presented = field(&fields, "api_key").unwrap_or("");
    let tenant = if st.config.tenants.is_empty() {
        Some(st.default_tenant.clone())
    } else {
        match st.config.tenants.caller(presented) {
            // The console re-drives any of the tenant's events: it is for keys that may call
            // every method (`api_keys`), not for a key limited to some scopes.
            Some(c) if c.grant != oncerpc_core::Grant::All => {
                return refused(
                    &st,
                    StatusCode::FORBIDDEN,
                    "scope",
                    "This API key holds only some scopes: the console needs one of the tenant's api_keys.",
                );
            }
            found => found.map(|c| c.tenant),
        }
    };
    let Some(tenant) = tenant else {
        throttle.failed(address, form_token, Instant::now());
        console(&st).refusals.with_label_values(&["login"]).inc();
        tracing::info!(status = 401, reason = "login", "console login refused: wrong API key");
        return login_form(&st, StatusCode::UNAUTHORIZED, Some("That API key is not valid."));
    };
    throttle.succeeded(address, form_token);
    tracing::info!(tenant = %oncerpc_core::LogSafe(&tenant), "console login");
    let id = console(&st).sessions.open(tenant);
    let mut resp = see_other("/console/events");
    let idle = console(&st).config.session_idle;
    let h = resp.headers_mut();
    h.append(header::SET_COOKIE, set_cookie(&st, COOKIE, &id, idle));
    h.append(header::SET_COOKIE, set_cookie(&st, LOGIN_COOKIE, "", Duration::ZERO));
    resp
}

/// `POST /console/logout` (`csrf`): end the session.
pub(crate) async fn logout(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    // The body first: waiting for it holds no in-flight permit (SPEC §12).
    let fields = match form(&st, body, &headers).await {
        Ok(f) => f,
        Err(resp) => return resp,
    };
    let session = match super::guard(&st, &headers, true) {
        Ok((_admitted, session)) => session,
        Err(resp) => return *resp,
    };
    if let Err(resp) = super::check_csrf(&st, &fields, &session) {
        return *resp;
    }
    console(&st).sessions.close(&headers);
    let mut resp = see_other("/console/login");
    resp.headers_mut().append(header::SET_COOKIE, set_cookie(&st, COOKIE, "", Duration::ZERO));
    resp
}
