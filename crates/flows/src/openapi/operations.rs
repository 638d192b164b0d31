//! The operations of a document as methods: which are imported (`operations` globs), their
//! names (model-safe, unique), kinds, descriptions and requests.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use super::call::Operation;
use super::config::OpenApiConfig;
use super::document::Document;
use super::error::{OpenApiError, escape};
use super::method::{Import, ImportedMethod};
use super::params::takes;
use super::refs::Resolver;
use crate::config::StepConfig;

/// The HTTP methods of a path item, in the order they are imported.
const METHODS: [&str; 8] = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];

/// The longest method name: a tool name model APIs accept has at most 64 characters.
const MAX_NAME: usize = 64;

/// Every operation of `doc` that `cfg` selects, as a method sending to `base`.
pub fn operations(cfg: &OpenApiConfig, doc: &Document, base: &str) -> Result<Import, OpenApiError> {
    let name = &doc.name;
    let mut out = Import::default();
    let mut resolver = Resolver::new(doc);
    let mut taken: HashMap<String, String> = HashMap::new();
    let mut seen_ids = Vec::new();
    let prefix = cfg.prefix();
    let paths = doc.root.get("paths").and_then(Value::as_object).cloned().unwrap_or_default();
    for (path, item) in &paths {
        let item_at = format!("/paths/{}", escape(path));
        let (item, item_at) = resolver.follow(item, &item_at)?;
        let item = item.clone();
        for method in METHODS {
            let Some(op) = item.get(method) else { continue };
            let at = format!("{item_at}/{method}");
            let id = match op.get("operationId").and_then(Value::as_str) {
                Some(id) if !id.is_empty() => id.to_owned(),
                _ => derived_id(method, path),
            };
            seen_ids.push(id.clone());
            if !cfg.operations.is_empty() && !cfg.operations.iter().any(|g| glob(g, &id)) {
                continue;
            }
            let method_name = method_name(&prefix, &id);
            if let Some(other) = taken.insert(method_name.clone(), at.clone()) {
                return Err(OpenApiError::at(
                    name,
                    &at,
                    format!(
                        "the operations at {other} and here would both be the method {method_name:?}: \
                         give one an operationId of its own, or leave one out (operations = [...])"
                    ),
                ));
            }
            resolver.reset();
            let path_params = item.get("parameters").map(|p| (p, format!("{item_at}/parameters")));
            let op_params = op.get("parameters").map(|p| (p, format!("{at}/parameters")));
            let body = op.get("requestBody").map(|b| (b, format!("{at}/requestBody")));
            let t = match takes(&mut resolver, &cfg.key_header, path_params, op_params, body)? {
                Ok(t) => t,
                Err(why) => {
                    out.notes
                        .push(format!("operation {id:?} ({} {path}) is not imported: {why}", upper(method)));
                    continue;
                }
            };
            let http = format!("{} {path}", upper(method));
            let over = cfg.overrides.iter().find(|o| o.id == id);
            let safe = id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            let kind = over.and_then(|o| o.kind).unwrap_or(if matches!(method, "get" | "head" | "options") {
                oncerpc_core::Kind::Query
            } else {
                oncerpc_core::Kind::Command
            });
            let request = Operation {
                method: reqwest::Method::from_bytes(upper(method).as_bytes()).expect("a known method"),
                base: base.to_owned(),
                path: path.clone(),
                params: t.params,
                body: t.body,
                headers: cfg.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                key_header: cfg.key_header.clone(),
            };
            let step = StepConfig {
                name: if safe { id.clone() } else { model_safe(&id) },
                url: format!("{base}{path}"),
                retry: cfg.retry,
                timeout_ms: cfg.attempt_timeout_ms,
                oauth: cfg.oauth.clone(),
                request: Some(Arc::new(request)),
                ..Default::default()
            };
            out.methods.push(ImportedMethod {
                name: method_name,
                operation: id.clone(),
                http: http.clone(),
                kind,
                description: description(op, &http),
                params_schema: t.schema,
                step,
                scopes: over.and_then(|o| o.scopes.clone()).unwrap_or_default(),
                key_from: over.and_then(|o| o.key_from.clone()),
                mcp: over.and_then(|o| o.mcp).unwrap_or(true),
                timeout_ms: cfg.timeout_ms,
            });
        }
    }
    if let Some(o) = cfg.overrides.iter().find(|o| !seen_ids.contains(&o.id)) {
        return Err(OpenApiError::at(
            name,
            "/paths",
            format!("[[openapi.operation]] id {:?}: the document has no such operation", o.id),
        ));
    }
    Ok(out)
}

fn upper(method: &str) -> String {
    method.to_ascii_uppercase()
}

/// The name of an operation without an operationId: its method and path (`get_pets_petId`).
fn derived_id(method: &str, path: &str) -> String {
    let mut id = method.to_owned();
    for part in path.split(|c: char| !c.is_ascii_alphanumeric()).filter(|p| !p.is_empty()) {
        id.push('_');
        id.push_str(part);
    }
    id
}

/// Every character outside `[a-zA-Z0-9_-]` made `_`: the MCP door's own rule, so the tool is
/// the method's name with its prefix's dots made `_`.
fn model_safe(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
}

/// `prefix` + the model-safe operation id; a name longer than [`MAX_NAME`] keeps its start
/// and ends in a hash of the whole, so it stays unique and a model API still takes its tool.
fn method_name(prefix: &str, id: &str) -> String {
    let full = format!("{prefix}{}", model_safe(id));
    if full.len() <= MAX_NAME {
        return full;
    }
    let hash =
        full.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    format!("{}_{:08x}", &full[..MAX_NAME - 9], hash as u32)
}

/// What a model reads about the tool: the summary, the description, and the HTTP request.
fn description(op: &Value, http: &str) -> String {
    let text = |k: &str| op.get(k).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty());
    let mut parts: Vec<&str> = Vec::new();
    if let Some(s) = text("summary") {
        parts.push(s);
    }
    if let Some(d) = text("description").filter(|d| Some(*d) != text("summary")) {
        parts.push(d);
    }
    let mut out = parts.join("\n\n");
    if !out.is_empty() {
        out.push_str("\n\n");
    }
    out.push_str(&format!("(HTTP {http}; path, query and header parameters are members of the arguments, the request body is `body`.)"));
    out
}

/// `*` any run of characters, `?` one; everything else itself.
pub(crate) fn glob(pattern: &str, s: &str) -> bool {
    let (p, s): (Vec<char>, Vec<char>) = (pattern.chars().collect(), s.chars().collect());
    let (mut pi, mut si, mut star, mut mark) = (0, 0, None, 0);
    while si < s.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = si;
            pi += 1;
        } else if let Some(st) = star {
            pi = st + 1;
            mark += 1;
            si = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_names_and_long_names() {
        assert!(glob("pets*", "petsList") && glob("*Pet", "createPet") && glob("get?", "getA"));
        assert!(!glob("pets*", "listPets") && glob("*", "") && !glob("a", "ab"));
        assert_eq!(derived_id("get", "/pets/{petId}/toys"), "get_pets_petId_toys");
        assert_eq!(method_name("shop.", "repos/list-for-org"), "shop.repos_list-for-org");
        let long = method_name("github.", &"x".repeat(80));
        assert_eq!(long.len(), MAX_NAME);
        assert_ne!(long, method_name("github.", &"x".repeat(81)));
    }
}
