//! The operator console at `/console` (SPEC §20): server-rendered pages (maud), tenant-scoped
//! behind an API-key login, shipped inside the binary with its one script (htmx, vendored) and
//! its stylesheet.
//!
//! * `GET /console/login`, `POST /console/login`, `POST /console/logout` (`session.rs`);
//! * `GET /console/oidc/start`, `GET /console/oidc/callback`: sign-in with the identity
//!   provider (`[console.oidc]`, `oidc.rs`), which opens the same session;
//! * `GET /console/events` (filters, cursor paging) and `GET /console/counts` (live counts per
//!   status) — `events.rs`;
//! * `GET /console/events/{id}` (params, result, steps, timeline), `GET …/live` (the part that
//!   changes while it runs), `POST …/redrive` (re-drive a failed event) — `event.rs`;
//! * `GET /console/status` — store health, in-flight, background queue, rates, top errors
//!   (`status.rs`).
//!
//! Every state-changing form (`POST`) carries a CSRF token bound to the session (the login
//! form one bound to a pre-login cookie); a `POST` without it is `403`. The session cookie is
//! `HttpOnly; SameSite=Strict; Path=/console`. The API key is only ever read from the login
//! form: it is never rendered, stored or logged. Every refusal is counted in
//! `oncerpc_console_refusals_total{reason}` and logged once.

mod event;
mod events;
pub mod oidc;
mod pending;
mod session;
mod status;
mod throttle;
mod view;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use maud::Markup;

use crate::{AppState, Door};
pub use oidc::OidcConfig;
pub(crate) use session::Session;

/// The log-in form's route.
pub(crate) const LOGIN_PATH: &str = "/console/login";

/// The console's settings (`[console]`); absent from [`HttpConfig`](crate::HttpConfig): off.
#[derive(Debug, Clone)]
pub struct ConsoleConfig {
    /// JSON pointers (RFC 6901) into params, results and step outputs whose values are shown
    /// as `"[redacted]"`.
    pub redact: Vec<String>,
    /// A session unused for this long ends.
    pub session_idle: Duration,
    /// Sessions held at once; past it the oldest ends.
    pub max_sessions: usize,
    /// Mark the session cookie `Secure` (HTTPS only).
    pub secure_cookie: bool,
    /// Sign-in with the identity provider (`[console.oidc]`), beside the API key.
    pub oidc: Option<OidcConfig>,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig {
            redact: Vec::new(),
            session_idle: Duration::from_secs(30 * 60),
            max_sessions: 10_000,
            secure_cookie: false,
            oidc: None,
        }
    }
}

/// The console's state in [`AppState`].
pub(crate) struct Console {
    pub config: ConsoleConfig,
    pub sessions: session::Sessions,
    /// `oncerpc_console_refusals_total{reason}`.
    refusals: prometheus::IntCounterVec,
    pub rates: Arc<status::Rates>,
    /// Failed log-ins per client address and form.
    pub throttle: Arc<throttle::Throttle>,
    /// Sign-in with the identity provider, when configured.
    pub oidc: Option<Arc<oidc::Oidc>>,
}

impl Console {
    pub fn new(config: ConsoleConfig, registry: &prometheus::Registry) -> Console {
        let refusals = prometheus::IntCounterVec::new(
            prometheus::Opts::new(
                "oncerpc_console_refusals_total",
                "Console requests refused, by reason (login: wrong key; throttled: a log-in from an address or form with too many wrong keys; scope: a key limited to some scopes; csrf: a form without its token; session: no or expired session; not_found; conflict: a re-drive the event's state refuses; oidc_state, oidc_denied, oidc_code, oidc_id_token, oidc_tenant, oidc_unavailable: a sign-in with the identity provider)",
            ),
            &["reason"],
        )
        .expect("valid metric");
        let _ = registry.register(Box::new(refusals.clone()));
        let sessions = session::Sessions::new(config.session_idle, config.max_sessions);
        let oidc = config.oidc.clone().map(|c| Arc::new(oidc::Oidc::new(c)));
        Console { config, sessions, refusals, rates: Arc::default(), throttle: Arc::default(), oidc }
    }

    /// The console under a reloaded `[console]`: its sessions, rates, log-in throttle and
    /// counters go on; the sign-in with the provider is kept while its settings are the same
    /// (a sign-in under way completes), made anew otherwise.
    pub fn successor(&self, config: ConsoleConfig) -> Console {
        let oidc = match (&self.oidc, &config.oidc) {
            (Some(running), Some(next)) if running.config().same_as(next) => Some(running.clone()),
            (_, next) => next.clone().map(|c| Arc::new(oidc::Oidc::new(c))),
        };
        Console {
            sessions: self.sessions.successor(config.session_idle, config.max_sessions),
            refusals: self.refusals.clone(),
            rates: self.rates.clone(),
            throttle: self.throttle.clone(),
            oidc,
            config,
        }
    }
}

/// The console's routes (merged into the front door's router when it is enabled).
pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/console", get(session::home))
        .route("/console/", get(session::home))
        .route(LOGIN_PATH, get(session::login_page).post(session::login))
        .route("/console/logout", post(session::logout))
        .route(oidc::START_PATH, get(oidc::start))
        .route(oidc::CALLBACK_PATH, get(oidc::callback))
        .route("/console/events", get(events::page))
        .route("/console/counts", get(events::counts))
        .route("/console/events/{event_id}", get(event::page))
        .route("/console/events/{event_id}/live", get(event::live))
        .route("/console/events/{event_id}/redrive", post(event::redrive))
        .route("/console/status", get(status::page))
        .route("/console/status/live", get(status::live))
        .route("/console/assets/htmx.min.js", get(htmx))
        .route("/console/assets/console.css", get(css))
}

/// The vendored htmx (Zero-Clause BSD, `assets/htmx-LICENSE.txt`).
const HTMX: &str = include_str!("assets/htmx-2.0.11.min.js");
const CSS: &str = include_str!("assets/console.css");

async fn htmx() -> Response {
    asset(HTMX, "text/javascript; charset=utf-8")
}

async fn css() -> Response {
    asset(CSS, "text/css; charset=utf-8")
}

fn asset(body: &'static str, content_type: &'static str) -> Response {
    let mut resp = (StatusCode::OK, body).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("public, max-age=3600"));
    resp
}

/// The console of `st` (the routes exist only when it is enabled).
pub(crate) fn console(st: &AppState) -> &Console {
    st.console.as_ref().expect("console routes are served only when the console is enabled")
}

/// An HTML answer with the console's headers: no caching, no framing, scripts and styles from
/// this origin only.
pub(crate) fn html(status: StatusCode, markup: Markup) -> Response {
    let mut resp = (status, markup.into_string()).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    resp
}

/// A refused console request: counted under `reason`, logged once, answered with a page that
/// says why.
pub(crate) fn refused(st: &AppState, status: StatusCode, reason: &'static str, message: &str) -> Response {
    console(st).refusals.with_label_values(&[reason]).inc();
    tracing::info!(status = status.as_u16(), reason, "console request refused");
    html(status, view::refusal(status, message))
}

/// `303 See Other` to `to` (after a form, or to the login page).
pub(crate) fn see_other(to: &str) -> Response {
    let mut resp = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    resp.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// The prologue of every page and form of a logged-in operator: the global in-flight limit,
/// the session (none: to the login page for a page, `403` for a form or a fragment), then the
/// tenant's own limits.
pub(crate) fn guard<'a>(
    st: &'a AppState,
    headers: &HeaderMap,
    page: bool,
) -> Result<(crate::Admitted<'a>, Session), Box<Response>> {
    let mut admitted = st.admit(Door::Flows)?;
    let Some(session) = console(st).sessions.find(headers) else {
        if page {
            return Err(Box::new(see_other("/console/login")));
        }
        let message = "Your session has ended: log in again.";
        return Err(Box::new(refused(st, StatusCode::FORBIDDEN, "session", message)));
    };
    admitted._tenant_permit = st.admit_tenant(Door::Flows, &session.tenant)?;
    Ok((admitted, session))
}

/// A form's fields, read within the body limits (`Err`: the answer to send).
pub(crate) async fn form(
    st: &AppState,
    body: Body,
    headers: &HeaderMap,
) -> Result<Vec<(String, String)>, Response> {
    let too_large = |_| {
        html(
            StatusCode::PAYLOAD_TOO_LARGE,
            view::refusal(StatusCode::PAYLOAD_TOO_LARGE, "The form is too large."),
        )
    };
    let timed_out = || {
        html(
            StatusCode::REQUEST_TIMEOUT,
            view::refusal(StatusCode::REQUEST_TIMEOUT, "The form did not arrive in time."),
        )
    };
    let bytes = crate::read_body(st, body, headers, too_large, timed_out).await?;
    Ok(form_urlencoded::parse(&bytes).into_owned().collect())
}

/// The value of field `name`.
pub(crate) fn field<'f>(fields: &'f [(String, String)], name: &str) -> Option<&'f str> {
    fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// Whether `presented` is `expected`, in constant time.
pub(crate) fn token_matches(presented: Option<&str>, expected: &str) -> bool {
    use subtle::ConstantTimeEq;
    presented.is_some_and(|p| !expected.is_empty() && bool::from(p.as_bytes().ct_eq(expected.as_bytes())))
}

/// A form's CSRF check against the session: `Err` is the `403`.
pub(crate) fn check_csrf(
    st: &AppState,
    fields: &[(String, String)],
    session: &Session,
) -> Result<(), Box<Response>> {
    if token_matches(field(fields, "csrf"), &session.csrf) {
        return Ok(());
    }
    Err(Box::new(refused(
        st,
        StatusCode::FORBIDDEN,
        "csrf",
        "This form is missing its security token (or it is stale): reload the page and try again.",
    )))
}
