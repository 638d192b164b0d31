//! `[[methods]] verify = { scheme, secret, tolerance_secs }` as the config file says it (SPEC
//! §15); what it means for a request is `webhooks.rs` and `oncerpc_http::Verifier`.

use serde::{Deserialize, Serialize};

/// `verify = { scheme = "github", secret = "${GITHUB_WEBHOOK_SECRET}" }`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct VerifySection {
    /// `standard-webhooks`, `github` or `stripe`.
    pub scheme: String,
    /// One secret, or several while rotating (any may match). Never printed.
    pub secret: Secrets,
    /// Timestamped schemes: how far the signed timestamp may be from now (default 300 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance_secs: Option<u64>,
}

/// One secret or a list; `Debug` and `Serialize` show only how many.
#[derive(Clone, Deserialize)]
#[serde(untagged)]
pub enum Secrets {
    One(String),
    Many(Vec<String>),
}

impl Secrets {
    pub fn to_vec(&self) -> Vec<String> {
        match self {
            Secrets::One(s) => vec![s.clone()],
            Secrets::Many(v) => v.clone(),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Secrets::One(_) => 1,
            Secrets::Many(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<{} secret(s)>", self.len())
    }
}

impl Serialize for Secrets {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("***")
    }
}
