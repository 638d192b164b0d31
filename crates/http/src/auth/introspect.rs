//! RFC 7662 token introspection (SPEC §20): an issuer's opaque access tokens (anything that is
//! not a JWT and not a configured API key) are sent to its introspection endpoint, with
//! oncerpc's own client credentials. An `active` answer is checked like a JWT's claims — its
//! `iss` (when given) is the issuer's, its `aud` names one of the issuer's audiences, `exp` and
//! `nbf` with the leeway — and read for the tenant, subject and scopes the same way. The result
//! is cached by the token's SHA-256 until it expires, at most `cache_secs` (a revoked token is
//! refused again within that). An endpoint that fails, hangs (5 s) or answers garbage makes the
//! token `503` `-32011`, never `401`.

use std::time::Instant;

use serde_json::Value;

use super::tokens::{FETCH_TIMEOUT, Introspection, Issuers, Refusal, TokenError, Verified};

impl Issuers {
    /// Whether some issuer introspects opaque tokens.
    pub fn introspects(&self) -> bool {
        self.issuers.iter().any(|i| i.spec.introspection.is_some())
    }

    /// Introspect an opaque `token` at each issuer that introspects: the first that says it
    /// is active and passes its checks vouches for it.
    pub async fn introspect(&self, token: &str) -> Result<Verified, TokenError> {
        if token.len() > super::tokens::MAX_TOKEN_BYTES {
            return Err(TokenError::Refused(Refusal::TooLarge));
        }
        if let Some(v) = self.cached(token) {
            return Ok(v);
        }
        let mut outcome = Err(TokenError::Refused(Refusal::Inactive));
        for issuer in &self.issuers {
            let Some(config) = &issuer.spec.introspection else { continue };
            let answer = match ask(&self.http, config, token).await {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(issuer = %issuer.spec.issuer, error = %oncerpc_core::LogSafe(&e), "identity provider: introspection failed");
                    outcome = Err(issuer.unavailable());
                    continue;
                }
            };
            if answer.get("active") != Some(&Value::Bool(true)) {
                continue;
            }
            let spec = &issuer.spec;
            let now = jsonwebtoken::get_current_timestamp();
            let number = |name: &str| answer.get(name).and_then(Value::as_u64);
            let refusal = if answer.get("iss").and_then(Value::as_str).is_some_and(|i| i != spec.issuer) {
                Some(Refusal::Issuer)
            } else if !audiences(&answer).iter().any(|a| spec.audience.iter().any(|s| s == a)) {
                Some(Refusal::Audience)
            } else if number("exp").is_some_and(|exp| exp + spec.leeway_secs <= now) {
                Some(Refusal::Expired)
            } else if number("nbf").is_some_and(|nbf| nbf > now + spec.leeway_secs) {
                Some(Refusal::NotYetValid)
            } else {
                None
            };
            if let Some(r) = refusal {
                return Err(TokenError::Refused(r));
            }
            let mut verified = self.identity(issuer, &answer)?;
            let at_most = Instant::now() + config.cache;
            if number("exp").is_none() || verified.expires > at_most {
                verified.expires = at_most;
            }
            self.remember(token, &verified);
            return Ok(verified);
        }
        outcome
    }
}

/// The `aud` of an answer: a string or a list.
fn audiences(answer: &Value) -> Vec<&str> {
    match answer.get("aud") {
        Some(Value::String(a)) => vec![a.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// POST the token to the endpoint (client_secret_basic) within [`FETCH_TIMEOUT`]: its JSON
/// answer, or why not in a few words (never the token or the secret).
async fn ask(http: &reqwest::Client, config: &Introspection, token: &str) -> Result<Value, String> {
    let body: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("token", token)
        .append_pair("token_type_hint", "access_token")
        .finish();
    let asking = async {
        let resp = http
            .post(&config.url)
            .basic_auth(&config.client_id, Some(&config.client_secret))
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| format!("POST {}: {}", config.url, e.without_url()))?;
        if !resp.status().is_success() {
            return Err(format!("POST {}: HTTP {}", config.url, resp.status().as_u16()));
        }
        let bytes = resp.bytes().await.map_err(|e| format!("POST {}: {}", config.url, e.without_url()))?;
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(v @ Value::Object(_)) => Ok(v),
            _ => Err(format!("POST {}: not an introspection answer", config.url)),
        }
    };
    tokio::time::timeout(FETCH_TIMEOUT, asking)
        .await
        .map_err(|_| format!("POST {}: no answer within {} s", config.url, FETCH_TIMEOUT.as_secs()))?
}
