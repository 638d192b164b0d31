//! Credentials towards upstreams (SPEC §20): the OAuth client of `oncerpc-mcp-upstream`
//! ([`TokenSource`]), shared by HTTP steps (`[upstream.oauth]`, a step's own `oauth`) and MCP
//! upstreams, so that one token cache serves both. A [`TokenPool`] gives every step with the
//! same client the same [`TokenSource`]: the operations of one `[[openapi]]` document, whose
//! steps all carry the document's `oauth`, share one token.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub use oncerpc_mcp_upstream::oauth::{OAuthClient, TokenSource};

/// The token sources of one configuration, one per OAuth client (its whole `oauth` table:
/// the same token URL, client, secret, scope and audience).
#[derive(Clone, Default)]
pub struct TokenPool {
    sources: Arc<Mutex<HashMap<String, Arc<TokenSource>>>>,
}

impl std::fmt::Debug for TokenPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The keys hold the secrets: only their number.
        let n = self.sources.lock().map_or(0, |s| s.len());
        f.debug_struct("TokenPool").field("clients", &n).finish()
    }
}

impl TokenPool {
    pub fn new() -> TokenPool {
        TokenPool::default()
    }

    /// The token source of `client`: the one already made for an equal client, or a new one
    /// that sends its token requests with `http`.
    pub fn source(&self, client: &OAuthClient, http: &reqwest::Client) -> Arc<TokenSource> {
        let key = serde_json::to_string(client).unwrap_or_default();
        let mut sources = self.sources.lock().unwrap_or_else(|e| e.into_inner());
        sources.entry(key).or_insert_with(|| Arc::new(TokenSource::new(client.clone(), http.clone()))).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(id: &str) -> OAuthClient {
        serde_json::from_value(serde_json::json!({
            "token_url": "https://auth.test/token", "client_id": id, "client_secret": "s"
        }))
        .unwrap()
    }

    #[test]
    fn equal_clients_share_one_source_and_others_get_their_own() {
        let pool = TokenPool::new();
        let http = crate::upstream::client(&crate::UpstreamConfig::default()).expect("an HTTP client");
        let a = pool.source(&client("a"), &http);
        assert!(Arc::ptr_eq(&a, &pool.source(&client("a"), &http)));
        assert!(!Arc::ptr_eq(&a, &pool.source(&client("b"), &http)));
        assert!(!format!("{pool:?}").contains("\"s\""), "no secret in Debug");
    }
}
