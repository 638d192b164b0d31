//! Session ids of the session era over HTTP (`Mcp-Session-Id`): signed tokens, so that any
//! replica sharing the secret accepts a session another one opened, with no sticky routing and
//! no store round trip.
//!
//! A token names its tenant, the negotiated revision and when it was issued, and carries an
//! HMAC-SHA256 over them: `<tenant, base64url>.<revision>.<issued ms>.<nonce>.<mac>`. It is
//! refused when the MAC does not match (forged, or another deployment's secret), when it is
//! older than [`SESSION_LIFETIME`], or when it was ended here (`DELETE`). What a session
//! changes after `initialize` (ended, its log level) is this process's (bounded): another
//! replica honours an ended session until it expires, and sends log messages only at the
//! level set on it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::SESSION_VERSIONS;

/// How long a session lives after `initialize`.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// Sessions whose state (ended, log level) is remembered; the oldest are forgotten first.
const STATES_KEPT: usize = 100_000;

/// A verified session: its tenant and revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionId {
    pub tenant: String,
    pub version: &'static str,
    pub issued_ms: u64,
    /// The token's random part: the session's name in the store.
    pub nonce: String,
    /// The client declared the `elicitation` capability (form mode) at `initialize`: a
    /// flow's `ask` step may ask it ([`crate::elicit`]).
    pub elicitation: bool,
}

/// What a token's revision part adds when the client answers questions: `2025-11-25+e`.
pub const ELICITATION_FLAG: &str = "+e";

/// Why a session id is refused: every one is answered `404` (start a new session).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    #[error("unknown session")]
    Unknown,
    #[error("the session expired")]
    Expired,
    #[error("the session was ended")]
    Ended,
    /// The store that keeps sessions did not answer: `503`, try again.
    #[error("the session store is unavailable")]
    Unavailable,
}

/// Issues and checks session ids with one secret.
pub struct SessionTokens {
    secret: Vec<u8>,
    states: Arc<Mutex<States>>,
}

/// Per session token, what this process knows; the insertion order, to forget the oldest.
type States = (HashMap<String, State>, VecDeque<String>);

/// What this process knows of a session beyond its token.
#[derive(Debug, Default, Clone)]
struct State {
    ended: bool,
    log_level: Option<String>,
    /// When this process last served a message of the session.
    last_seen_ms: u64,
}

impl SessionTokens {
    /// Tokens signed with `secret` (replicas that share it accept each other's sessions);
    /// `None`: a random secret of this process.
    pub fn new(secret: Option<&[u8]>) -> SessionTokens {
        let secret = match secret {
            Some(s) => s.to_vec(),
            None => (0..4).flat_map(|_| uuid::Uuid::new_v4().into_bytes()).collect(),
        };
        SessionTokens { secret, states: Arc::new(Mutex::new((HashMap::new(), VecDeque::new()))) }
    }

    /// A new session id for `tenant` at revision `version`.
    pub fn issue(&self, tenant: &str, version: &str, now_ms: u64) -> String {
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let body = format!("{}.{version}.{now_ms}.{nonce}", URL_SAFE_NO_PAD.encode(tenant));
        let mac = self.mac(&body);
        format!("{body}.{mac}")
    }

    /// Check a session id presented at `now_ms`.
    pub fn verify(&self, token: &str, now_ms: u64) -> Result<SessionId, SessionError> {
        let (body, mac) = token.rsplit_once('.').ok_or(SessionError::Unknown)?;
        let expected = self.mac(body);
        // Constant time: a MAC compared byte by byte would leak how much of a forgery fits.
        if expected.len() != mac.len()
            || !bool::from(subtle::ConstantTimeEq::ct_eq(expected.as_bytes(), mac.as_bytes()))
        {
            return Err(SessionError::Unknown);
        }
        let mut parts = body.split('.');
        let (Some(tenant), Some(version), Some(issued), Some(nonce), None) =
            (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(SessionError::Unknown);
        };
        let tenant = URL_SAFE_NO_PAD.decode(tenant).ok().and_then(|t| String::from_utf8(t).ok());
        let (version, elicitation) = match version.strip_suffix(ELICITATION_FLAG) {
            Some(v) => (v, true),
            None => (version, false),
        };
        let version = SESSION_VERSIONS.iter().copied().find(|v| *v == version);
        let (Some(tenant), Some(version), Ok(issued_ms)) = (tenant, version, issued.parse::<u64>()) else {
            return Err(SessionError::Unknown);
        };
        if now_ms.saturating_sub(issued_ms) > SESSION_LIFETIME.as_millis() as u64 {
            return Err(SessionError::Expired);
        }
        if self.state(token).is_some_and(|s| s.ended) {
            return Err(SessionError::Ended);
        }
        Ok(SessionId { tenant, version, issued_ms, nonce: nonce.to_owned(), elicitation })
    }

    /// End a session (`DELETE`): this process refuses it from now on.
    pub fn end(&self, token: &str) {
        self.update(token, |s| s.ended = true);
    }

    /// The log level set on a (verified) session here, if any.
    pub fn log_level(&self, token: &str) -> Option<String> {
        self.state(token).and_then(|s| s.log_level)
    }

    /// Remember the log level a (verified) session set with `logging/setLevel`.
    pub fn set_log_level(&self, token: &str, level: &str) {
        self.update(token, |s| s.log_level = Some(level.to_owned()));
    }

    /// A (verified) session served a message here at `now_ms`.
    pub fn seen(&self, token: &str, now_ms: u64) {
        self.update(token, |s| s.last_seen_ms = now_ms);
    }

    /// The gauge of sessions this process served a message of within `window`
    /// (`oncerpc_mcp_sessions_active`); register it where `/metrics` gathers.
    pub fn active_gauge(&self, window: Duration) -> ActiveSessions {
        let desc = prometheus::core::Collector::desc(&ActiveSessions::gauge(0))[0].clone();
        ActiveSessions { states: self.states.clone(), window, desc }
    }

    fn state(&self, token: &str) -> Option<State> {
        self.states.lock().ok()?.0.get(token).cloned()
    }

    fn update(&self, token: &str, change: impl FnOnce(&mut State)) {
        let Ok(mut states) = self.states.lock() else { return };
        let (map, order) = &mut *states;
        if !map.contains_key(token) {
            order.push_back(token.to_owned());
        }
        change(map.entry(token.to_owned()).or_default());
        while order.len() > STATES_KEPT {
            if let Some(old) = order.pop_front() {
                map.remove(&old);
            }
        }
    }

    fn mac(&self, body: &str) -> String {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.secret).expect("HMAC takes any key length");
        mac.update(body.as_bytes());
        mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// `oncerpc_mcp_sessions_active`: the sessions that sent this process a message within the
/// idle time (not ended), counted when `/metrics` is read.
pub struct ActiveSessions {
    states: Arc<Mutex<States>>,
    window: Duration,
    desc: prometheus::core::Desc,
}

impl ActiveSessions {
    fn gauge(value: i64) -> prometheus::IntGauge {
        let g = prometheus::IntGauge::new(
            "oncerpc_mcp_sessions_active",
            "MCP sessions (session era) that sent this process a message within mcp.session_idle_secs and were not ended",
        )
        .expect("valid metric");
        g.set(value);
        g
    }

    /// The sessions active at `now_ms`.
    pub fn count(&self, now_ms: u64) -> usize {
        let since = now_ms.saturating_sub(self.window.as_millis() as u64);
        self.states
            .lock()
            .map(|s| s.0.values().filter(|s| !s.ended && s.last_seen_ms > since).count())
            .unwrap_or(0)
    }
}

impl prometheus::core::Collector for ActiveSessions {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        vec![&self.desc]
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        prometheus::core::Collector::collect(&Self::gauge(self.count(now) as i64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_accepted_by_any_holder_of_the_secret_and_names_its_tenant() {
        let a = SessionTokens::new(Some(b"shared"));
        let b = SessionTokens::new(Some(b"shared"));
        let t = a.issue("acme.eu", "2025-06-18", 1_000);
        let id = b.verify(&t, 2_000).unwrap();
        assert_eq!((&*id.tenant, id.version, id.issued_ms), ("acme.eu", "2025-06-18", 1_000));
        assert_eq!(id.nonce.len(), 32);
        assert!(!id.elicitation);
        let asks = b.verify(&a.issue("acme", "2025-11-25+e", 1_000), 2_000).unwrap();
        assert_eq!((asks.version, asks.elicitation), ("2025-11-25", true), "a client that answers questions");
        let other = SessionTokens::new(Some(b"another deployment"));
        assert_eq!(other.verify(&t, 2_000), Err(SessionError::Unknown));
        assert_eq!(SessionTokens::new(None).verify(&t, 2_000), Err(SessionError::Unknown));
    }

    #[test]
    fn forged_expired_and_ended_tokens_are_refused() {
        let s = SessionTokens::new(Some(b"k"));
        let t = s.issue("acme", "2025-11-25", 1_000);
        let forged = t.replacen(&URL_SAFE_NO_PAD.encode("acme"), &URL_SAFE_NO_PAD.encode("beta"), 1);
        assert_eq!(s.verify(&forged, 2_000), Err(SessionError::Unknown), "another tenant's name");
        for garbage in ["", "x", "a.b.c.d.e", "....", &t[..t.len() - 1]] {
            assert_eq!(s.verify(garbage, 2_000), Err(SessionError::Unknown), "{garbage:?}");
        }
        let late = 1_000 + SESSION_LIFETIME.as_millis() as u64 + 1;
        assert_eq!(s.verify(&t, late), Err(SessionError::Expired));
        s.set_log_level(&t, "debug");
        assert_eq!(s.log_level(&t).as_deref(), Some("debug"));
        assert_eq!(s.verify(&t, 2_000).map(|id| id.tenant), Ok("acme".into()), "a level is not an end");
        let gauge = s.active_gauge(Duration::from_millis(1_000));
        s.seen(&t, 2_000);
        assert_eq!((gauge.count(2_500), gauge.count(3_100)), (1, 0), "active within the window only");
        s.end(&t);
        assert_eq!(s.verify(&t, 2_000), Err(SessionError::Ended));
        assert_eq!(s.log_level(&t).as_deref(), Some("debug"));
        assert_eq!(gauge.count(2_500), 0, "an ended session is not active");
    }
}
