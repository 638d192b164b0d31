//! Any REST API, once (SPEC §21): each operation of an OpenAPI 3.0/3.1 document
//! (`[[openapi]]`) becomes a method — and so an MCP tool and a flow on `/v2/flows/{method}` —
//! whose one step builds the operation's request from the params and sends it with the step
//! key in `Idempotency-Key` (`key_header`).
//!
//! The document is read as JSON (YAML turned into the same value) and walked as it is: one
//! code path for 3.0 and 3.1, `$ref`s inlined where a schema is needed (`refs.rs`), 3.0's schema
//! dialect turned into JSON Schema 2020-12 on the way.
//!
//! ```
//! use oncerpc_flows::openapi::{OpenApiConfig, import};
//!
//! let cfg: OpenApiConfig = toml::from_str(r#"name = "pets"
//! spec = "pets.yaml""#).unwrap();
//! let doc = r#"
//! openapi: 3.1.0
//! info: { title: Pets, version: "1" }
//! servers: [{ url: "https://pets.example/v1" }]
//! paths:
//!   /pets/{petId}:
//!     get:
//!       operationId: showPet
//!       parameters: [{ name: petId, in: path, required: true, schema: { type: string } }]
//!       responses: { "200": { description: A pet } }
//! "#;
//! let import = import(&cfg, doc, None).unwrap();
//! assert_eq!(import.methods[0].name, "pets.showPet");
//! assert_eq!(import.methods[0].kind, oncerpc_core::Kind::Query);
//! ```

mod call;
mod config;
mod document;
mod error;
mod method;
mod operations;
mod params;
mod refs;

use std::time::Duration;

pub use call::{Body, In, Operation, Param};
pub use config::{OpenApiConfig, OperationOverride};
pub use document::{Document, Version, parse};
pub use error::OpenApiError;
pub use method::{Import, ImportedMethod};

/// The methods of the document `text`; `spec_url` (where it was fetched from) resolves a
/// relative server URL.
pub fn import(cfg: &OpenApiConfig, text: &str, spec_url: Option<&str>) -> Result<Import, OpenApiError> {
    let doc = parse(&cfg.name, text)?;
    let base = base_url(cfg, &doc, spec_url)?;
    operations::operations(cfg, &doc, &base)
}

/// Read (a file) or fetch (a URL, with `client`) the document of `cfg` and import it. A URL
/// that cannot be fetched is an error with [`OpenApiError::unreachable`] set.
pub async fn load(cfg: &OpenApiConfig, client: &reqwest::Client) -> Result<Import, OpenApiError> {
    let spec = cfg.spec.as_str();
    if !(spec.starts_with("http://") || spec.starts_with("https://")) {
        let text = std::fs::read_to_string(spec)
            .map_err(|e| OpenApiError::at(&cfg.name, "", format!("cannot read spec {spec:?}: {e}")))?;
        return import(cfg, &text, None);
    }
    // A URL may carry a credential (`user:pass@`, `?password=`): never in an error or a log line.
    let shown = oncerpc_core::redact_url(spec);
    let down = |why: String| OpenApiError {
        unreachable: true,
        ..OpenApiError::at(&cfg.name, "", format!("cannot fetch spec {shown}: {why}"))
    };
    let resp = client
        .get(spec)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .map_err(|e| down(oncerpc_core::error_chain(&e.without_url())))?;
    if !resp.status().is_success() {
        return Err(down(format!("HTTP {}", resp.status())));
    }
    let text = resp.text().await.map_err(|e| down(oncerpc_core::error_chain(&e.without_url())))?;
    import(cfg, &text, Some(spec))
}

/// `base_url`, else the document's first server (its variables at their defaults), without a
/// trailing `/`.
fn base_url(cfg: &OpenApiConfig, doc: &Document, spec_url: Option<&str>) -> Result<String, OpenApiError> {
    let url = match &cfg.base_url {
        Some(u) => u.clone(),
        None => {
            let Some(server) = doc.root.pointer("/servers/0") else {
                return Err(OpenApiError::at(
                    &doc.name,
                    "/servers",
                    "the document names no server: set base_url",
                ));
            };
            let mut url = server.get("url").and_then(|u| u.as_str()).unwrap_or_default().to_owned();
            if let Some(vars) = server.get("variables").and_then(|v| v.as_object()) {
                for (k, v) in vars {
                    let default = v.get("default").and_then(|d| d.as_str()).unwrap_or_default();
                    url = url.replace(&format!("{{{k}}}"), default);
                }
            }
            match spec_url {
                _ if url.starts_with("http://") || url.starts_with("https://") => url,
                Some(spec) if url.starts_with('/') => {
                    let origin_end = spec.find("://").map_or(0, |i| i + 3);
                    let host_end = spec[origin_end..].find('/').map_or(spec.len(), |i| origin_end + i);
                    format!("{}{url}", &spec[..host_end])
                }
                _ => {
                    return Err(OpenApiError::at(
                        &doc.name,
                        "/servers/0/url",
                        format!(
                            "the document's first server {url:?} is not an absolute http(s) URL: set base_url"
                        ),
                    ));
                }
            }
        }
    };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(OpenApiError::at(
            &doc.name,
            "",
            format!("base_url {url:?} must start with http:// or https://"),
        ));
    }
    Ok(url.trim_end_matches('/').to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = r#"
openapi: 3.0.3
info: { title: t, version: "1" }
servers: [{ url: "https://{region}.api.test/v1/", variables: { region: { default: eu } } }]
paths:
  /orders/{id}:
    get:
      operationId: getOrder
      parameters: [{ name: id, in: path, required: true, schema: { type: integer } }]
      responses: { "200": { description: ok } }
    delete:
      operationId: cancelOrder
      responses: { "204": { description: gone } }
"#;

    fn cfg(more: &str) -> OpenApiConfig {
        toml::from_str(&format!("name = \"orders\"\nspec = \"o.yaml\"\n{more}")).unwrap()
    }

    #[test]
    fn upstream_settings_and_overrides_reach_each_method_and_its_step() {
        let c = cfg(r#"prefix = "o_"
key_header = "X-Request-Key"
headers = { Authorization = "Bearer t" }
timeout_ms = 9000
attempt_timeout_ms = 2000
retry = { attempts = 3 }
oauth = { token_url = "https://auth.test/token", client_id = "c", client_secret = "s" }
[[operation]]
id = "getOrder"
kind = "command"
scopes = ["orders:read"]
key_from = "/id"
mcp = false"#);
        let i = import(&c, DOC, None).unwrap();
        let get = i.methods.iter().find(|m| m.name == "o_getOrder").unwrap();
        assert_eq!(
            (get.kind, get.mcp, get.key_from.as_deref()),
            (oncerpc_core::Kind::Command, false, Some("/id"))
        );
        assert_eq!(get.scopes, ["orders:read"]);
        assert_eq!(get.timeout_ms, Some(9000));
        let step = &get.step;
        assert_eq!((step.timeout_ms, step.retry.attempts), (Some(2000), 3));
        assert_eq!(step.oauth.as_ref().unwrap().client_id, "c");
        let request = step.request.as_ref().unwrap();
        assert_eq!(request.key_header(), "X-Request-Key");
        let built = request.build(br#"{"id": 7}"#).unwrap();
        assert_eq!(built.url, "https://eu.api.test/v1/orders/7", "the server's variables, no double slash");
        assert_eq!(built.headers, vec![("Authorization".to_owned(), "Bearer t".to_owned())]);
        let cancel = i.methods.iter().find(|m| m.name == "o_cancelOrder").unwrap();
        assert_eq!(
            (cancel.kind, cancel.mcp, cancel.http.as_str()),
            (oncerpc_core::Kind::Command, true, "DELETE /orders/{id}")
        );
    }

    #[test]
    fn globs_select_operations_and_an_unknown_override_is_an_error() {
        let i = import(&cfg(r#"operations = ["get*"]"#), DOC, None).unwrap();
        let names: Vec<&str> = i.methods.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["orders.getOrder"]);
        let e = import(&cfg("[[operation]]\nid = \"getOrdr\""), DOC, None).unwrap_err();
        assert!(e.to_string().contains("\"getOrdr\"") && e.to_string().contains("no such operation"), "{e}");
        let e = import(&cfg(""), "openapi: 3.1.0\npaths: {}\n", None).unwrap_err();
        assert!(e.to_string().contains("set base_url"), "{e}");
        let ok = import(
            &cfg(""),
            "openapi: 3.1.0\nservers: [{url: /v2}]\npaths: {}\n",
            Some("https://h.test/spec/openapi.json"),
        );
        assert!(ok.is_ok(), "a relative server against the spec's URL");
    }
}
