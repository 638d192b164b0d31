//! Who is calling, at the door: the credential of a request read into a [`Caller`] (an access
//! token, else an API key), and the answers of a refusal — `401` with its challenge, `503`
//! `-32011` when the identity provider cannot vouch, `403` with the step-up challenge for a
//! scope the caller lacks. Counted in `oncerpc_auth_refusals_total{reason}`, logged once,
//! never with the credential.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use oncerpc_core::generated_id;
use oncerpc_protocol::{ErrorCode, RpcError};

use super::Caller;
use crate::{API_KEY_HEADER, AppState, Door, flows, json_response, query_param, resource, tokens};

impl AppState {
    /// The caller: an access token of a configured issuer (`Authorization: Bearer`, never a
    /// URL), else an API key (`X-API-Key`, `Authorization: Bearer`, `?key=`); the open default
    /// tenant when no tenants are configured. `401` when a credential is missing or wrong,
    /// `503` (`-32011`) when the token's issuer cannot vouch for it now. No credential is
    /// ever logged.
    pub(crate) async fn authenticate(
        &self,
        door: Door,
        headers: &HeaderMap,
        query: Option<&str>,
    ) -> Result<Caller, Box<Response>> {
        let tenants = &self.config.tenants;
        if tenants.is_empty() {
            return Ok(Caller::of(self.default_tenant.clone()));
        }
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|auth| auth.split_once(' '))
            .and_then(|(scheme, value)| scheme.eq_ignore_ascii_case("bearer").then(|| value.trim()));
        if let (Some(issuers), Some(token)) = (&self.config.issuers, bearer)
            && tokens::looks_like_jwt(token)
        {
            return match issuers.verify(token).await {
                Ok(v) => Ok(Caller { tenant: v.tenant, grant: v.grant, subject: v.subject }),
                Err(tokens::TokenError::Refused(r)) => {
                    Err(self.unauthorized(door, headers, r.reason(), true))
                }
                Err(tokens::TokenError::Unavailable(u)) => Err(self.identity_unavailable(door, &u.issuer)),
            };
        }
        let in_url = query_param(query, "key");
        if self.config.issuers.is_some()
            && (in_url.as_deref().is_some_and(tokens::looks_like_jwt)
                || query_param(query, "access_token").is_some())
        {
            // RFC 6750 §2.3 is not offered: a token in a URL lands in logs and histories.
            return Err(self.unauthorized(door, headers, "token_in_url", true));
        }
        let presented = headers
            .get(API_KEY_HEADER)
            .and_then(|v| v.to_str().ok())
            .or(bearer)
            .map(str::to_owned)
            .or(in_url);
        match presented.as_deref().map(|k| tenants.caller(k)) {
            Some(Some(caller)) => Ok(caller),
            // Not an API key: an opaque access token, where an issuer introspects them.
            Some(None)
                if let (Some(issuers), Some(token)) = (&self.config.issuers, bearer)
                    && issuers.introspects()
                    && !headers.contains_key(API_KEY_HEADER) =>
            {
                match issuers.introspect(token).await {
                    Ok(v) => Ok(Caller { tenant: v.tenant, grant: v.grant, subject: v.subject }),
                    Err(tokens::TokenError::Refused(r)) => {
                        Err(self.unauthorized(door, headers, r.reason(), true))
                    }
                    Err(tokens::TokenError::Unavailable(u)) => {
                        Err(self.identity_unavailable(door, &u.issuer))
                    }
                }
            }
            Some(None) => Err(self.unauthorized(door, headers, "invalid_key", true)),
            None => Err(self.unauthorized(door, headers, "missing", false)),
        }
    }

    /// Count a refusal of a caller's credentials under `reason`.
    pub(crate) fn auth_refused(&self, reason: &'static str) {
        self.auth_refusals.with_label_values(&[reason]).inc();
    }

    /// `401`, counted under `reason` and logged once (never the credential). A credential that
    /// was presented and is wrong says `error="invalid_token"` (RFC 6750 §3.1); a request
    /// without one gets the bare challenge.
    /// On `/mcp`, with issuers configured, the challenge names the protected resource
    /// metadata (`resource_metadata="…"`, RFC 9728), where an MCP host finds its authorization
    /// server.
    fn unauthorized(
        &self,
        door: Door,
        headers: &HeaderMap,
        reason: &'static str,
        presented: bool,
    ) -> Box<Response> {
        self.auth_refusals.with_label_values(&[reason]).inc();
        tracing::info!(reason, "unauthorized");
        let mut resp =
            (StatusCode::UNAUTHORIZED, r#"{"code":"401","message":"unauthorized"}"#).into_response();
        let h = resp.headers_mut();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let mut params = Vec::new();
        if presented {
            params.push(r#"error="invalid_token""#.to_owned());
        }
        if matches!(door, Door::Mcp) && self.config.issuers.is_some() {
            let url = resource::metadata_url(self, headers).replace(['"', '\\'], "");
            params.push(format!(r#"resource_metadata="{url}""#));
        }
        let challenge = match params.is_empty() {
            true => HeaderValue::from_static("Bearer"),
            false => HeaderValue::from_str(&format!("Bearer {}", params.join(", ")))
                .unwrap_or(HeaderValue::from_static("Bearer")),
        };
        h.insert(header::WWW_AUTHENTICATE, challenge);
        Box::new(resp)
    }

    /// `503` + `Retry-After` with `-32011`: the token's issuer cannot vouch for it now (its
    /// keys could not be fetched). Not the caller's fault, so not `401`.
    fn identity_unavailable(&self, door: Door, issuer: &str) -> Box<Response> {
        self.auth_refusals.with_label_values(&["identity_unavailable"]).inc();
        let cid = generated_id();
        tracing::warn!(issuer = %oncerpc_core::LogSafe(issuer), correlation_id = %cid, "identity provider unavailable: the token cannot be checked");
        let err = RpcError::with_message(
            ErrorCode::IdentityUnavailable,
            "Identity provider unavailable: the token cannot be checked now; retry shortly",
        );
        let mut resp = match door {
            Door::Rpc | Door::Mcp => {
                json_response(StatusCode::SERVICE_UNAVAILABLE, oncerpc_protocol::error_body(&err), Some(&cid))
            }
            Door::Flows => flows::error_response(&err, &cid),
        };
        resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        Box::new(resp)
    }
}

/// The challenge of a single answer that is `-32010 Forbidden`: `at` finds the error object in
/// the answer (a JSON-RPC `error`, or an MCP tool result's `structuredContent`); `None` for any
/// other answer. Only bodies that name the code are parsed.
pub(crate) fn insufficient_scope(
    body: &[u8],
    at: fn(&serde_json::Value) -> Option<&serde_json::Value>,
) -> Option<HeaderValue> {
    memchr::memmem::find(body, b"-32010")?;
    let answer: serde_json::Value = serde_json::from_slice(body).ok()?;
    challenge_of(at(&answer)?)
}

/// The challenge of a `-32010` error object (`data.scopes`: what the method requires).
pub(crate) fn challenge_of(error: &serde_json::Value) -> Option<HeaderValue> {
    if error.get("code").and_then(serde_json::Value::as_i64) != Some(-32010) {
        return None;
    }
    let scopes: Vec<&str> =
        error["data"]["scopes"].as_array()?.iter().filter_map(serde_json::Value::as_str).collect();
    challenge_for(&scopes)
}

/// `Bearer error="insufficient_scope", scope="a b"` (RFC 6750 §3.1).
fn challenge_for(scopes: &[&str]) -> Option<HeaderValue> {
    let scope = scopes.join(" ").replace(['"', '\\'], "");
    HeaderValue::from_str(&format!(r#"Bearer error="insufficient_scope", scope="{scope}""#)).ok()
}
