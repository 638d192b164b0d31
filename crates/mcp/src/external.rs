//! Tools other MCP servers offer through this door (SPEC §16b): found while the server runs,
//! so they live beside the registry's tools, not in it. A source (one upstream server)
//! replaces its whole set at once when it connects or its list changes; a call looks its tool
//! up by name only when the name is not one of the registry's, so the registry's tools are
//! found as before.
//!
//! An external tool's stored outcome is the upstream's whole `CallToolResult` (its content,
//! `structuredContent` and `isError`, as it came): the door answers it with oncerpc's `_meta`
//! added ([`result`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};

use oncerpc_core::{ExternalMethod, IdempotencyInfo};
use serde_json::{Map, Value, json};

use crate::call::{META_CORRELATION, META_KEY, META_STATUS};
use crate::tools::Tool;

/// One tool of another server: how it is listed, and the method that calls it.
#[derive(Debug)]
pub struct ExternalTool {
    pub tool: Tool,
    pub method: ExternalMethod,
}

/// The external tools of one door, shared with whatever keeps them up to date.
#[derive(Clone, Default)]
pub struct External {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    set: RwLock<Arc<Set>>,
    /// Each source's state, for `/healthz`.
    health: Mutex<BTreeMap<String, Value>>,
}

/// The external tools at one moment, in source then name order.
#[derive(Default)]
pub struct Set {
    by_source: BTreeMap<String, Vec<Arc<ExternalTool>>>,
    by_name: HashMap<String, Arc<ExternalTool>>,
    pub(crate) list: Vec<Arc<ExternalTool>>,
}

impl std::fmt::Debug for External {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("External").field("tools", &self.snapshot().list.len()).finish()
    }
}

impl External {
    /// Replace every tool of `source` with `tools` (none: the source offers nothing now).
    pub fn replace(&self, source: &str, tools: Vec<ExternalTool>) {
        let mut guard = self.inner.set.write().unwrap_or_else(|e| e.into_inner());
        let mut by_source = guard.by_source.clone();
        let mut tools: Vec<Arc<ExternalTool>> = tools.into_iter().map(Arc::new).collect();
        tools.sort_by(|a, b| a.tool.name.cmp(&b.tool.name));
        if tools.is_empty() {
            by_source.remove(source);
        } else {
            by_source.insert(source.to_owned(), tools);
        }
        let list: Vec<Arc<ExternalTool>> = by_source.values().flatten().cloned().collect();
        let by_name = list.iter().map(|t| (t.tool.name.clone(), t.clone())).collect();
        *guard = Arc::new(Set { by_source, by_name, list });
    }

    /// The tool called `name`, if a source offers it now.
    pub fn get(&self, name: &str) -> Option<Arc<ExternalTool>> {
        self.snapshot().by_name.get(name).cloned()
    }

    /// The tools offered now.
    pub fn snapshot(&self) -> Arc<Set> {
        self.inner.set.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The names of the tools `source` offers now.
    pub fn names(&self, source: &str) -> Vec<String> {
        let set = self.snapshot();
        set.by_source.get(source).map_or_else(Vec::new, |t| t.iter().map(|t| t.tool.name.clone()).collect())
    }

    /// Record `source`'s state (shown by `/healthz`).
    pub fn set_health(&self, source: &str, state: Value) {
        self.inner.health.lock().unwrap_or_else(|e| e.into_inner()).insert(source.to_owned(), state);
    }

    /// Every source's state, by name; `None` when there are no sources.
    pub fn health(&self) -> Option<Value> {
        let health = self.inner.health.lock().unwrap_or_else(|e| e.into_inner());
        (!health.is_empty()).then(|| json!(*health))
    }
}

/// The answer to a call of an external tool whose outcome is the upstream's `CallToolResult`
/// `result`: that object with oncerpc's `_meta` members added (the upstream's own kept), and
/// whether it is an error result.
pub fn result(result: &str, info: Option<&IdempotencyInfo>, cid: &str) -> (String, bool) {
    let mut object: Map<String, Value> = match serde_json::from_str(result) {
        Ok(Value::Object(o)) => o,
        // The handler stores objects only; anything else is shown as text.
        _ => Map::from_iter([("content".to_owned(), json!([{ "type": "text", "text": result }]))]),
    };
    let is_error = object.get("isError").and_then(Value::as_bool).unwrap_or(false);
    let meta = object.entry("_meta").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    if let Value::Object(meta) = meta {
        meta.insert(META_CORRELATION.into(), json!(cid));
        if let Some(info) = info {
            meta.insert(META_KEY.into(), json!(&*info.key));
            meta.insert(META_STATUS.into(), json!(info.status.as_str()));
        }
    }
    (Value::Object(object).to_string(), is_error)
}
