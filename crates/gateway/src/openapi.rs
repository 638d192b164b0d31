//! `[[openapi]]` (SPEC §21): each document's operations become `[[methods]]` entries before
//! the registry is built, so they are methods, MCP tools and flows like any other. The import
//! itself is `oncerpc_flows::openapi`; this module only reads the config, loads the
//! documents and says what they yielded.

use crate::config::{Config, ConfigError, MethodConfig, Mode};
use oncerpc_flows::openapi::{self, ImportedMethod};

/// What each document yielded: its name, its methods' names, and notes on the operations left
/// out. A `spec` URL down at start is a config error in production mode; in dev mode it is
/// logged and the document's methods are absent.
pub struct Yield {
    pub document: String,
    pub methods: Vec<(String, String)>,
    pub notes: Vec<String>,
    /// Why the document is absent (dev mode, its URL down).
    pub absent: Option<String>,
}

/// Load every `[[openapi]]` document of `config` and add its operations to `config.methods`.
pub async fn expand(config: &mut Config, client: &reqwest::Client) -> Result<Vec<Yield>, ConfigError> {
    let mut yields = Vec::new();
    for doc in config.openapi.clone() {
        let import = match openapi::load(&doc, client).await {
            Ok(i) => i,
            Err(e) if e.unreachable && config.mode == Mode::Dev => {
                tracing::warn!(document = %doc.name, error = %e, "OpenAPI document not loaded: its methods are absent");
                yields.push(Yield {
                    document: doc.name.clone(),
                    methods: Vec::new(),
                    notes: Vec::new(),
                    absent: Some(e.to_string()),
                });
                continue;
            }
            Err(e) => return Err(ConfigError::Invalid(e.to_string())),
        };
        for note in &import.notes {
            tracing::warn!(document = %doc.name, "{note}");
        }
        let mut names = Vec::new();
        for m in import.methods {
            if config.methods.iter().any(|c| c.name == m.name) {
                return Err(ConfigError::Invalid(format!(
                    "openapi {:?}: operation {:?} would be the method {:?}, which is already configured: \
                     set a prefix, or leave the operation out (operations = [...])",
                    doc.name, m.operation, m.name
                )));
            }
            names.push((m.name.clone(), m.http.clone()));
            config.methods.push(method(m));
        }
        yields.push(Yield { document: doc.name.clone(), methods: names, notes: import.notes, absent: None });
    }
    Ok(yields)
}

fn method(m: ImportedMethod) -> MethodConfig {
    MethodConfig {
        name: m.name,
        kind: m.kind,
        timeout_ms: m.timeout_ms,
        params_schema: Some(m.params_schema),
        description: Some(m.description),
        scopes: m.scopes,
        steps: vec![m.step],
        key_from: m.key_from,
        mcp: m.mcp,
        ..Default::default()
    }
}

/// `check-config`'s lines for the documents.
pub fn print(yields: &[Yield]) {
    for y in yields {
        match &y.absent {
            Some(why) => println!("openapi     {} absent: {why}", y.document),
            None => println!("openapi     {} ({} methods)", y.document, y.methods.len()),
        }
        for (name, http) in &y.methods {
            println!("  {name:<40} {http}");
        }
        for note in &y.notes {
            println!("  note: {note}");
        }
    }
}
