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

use crate::meta::{META_CORRELATION, META_KEY, META_STATUS};
use crate::tool::Tool;

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
    /// What the sources offer besides tools.
    offers: crate::offers::Offers,
}

/// The external tools at one moment, in source then name order.
#[derive(Default)]
pub struct Set {
    /// What each source offers, withheld tools included, and when it began to offer tools
    /// (the earlier source keeps a name two of them export).
    by_source: BTreeMap<String, Offer>,
    by_name: HashMap<String, Arc<ExternalTool>>,
    /// The same tools by their methods' names (the prefixed upstream name), which a call may
    /// still use for one release, and which a task's event names.
    by_method: HashMap<String, Arc<ExternalTool>>,
    pub(crate) list: Vec<Arc<ExternalTool>>,
    /// The tools withheld now, by source: (exported name, the source that has it).
    withheld: BTreeMap<String, Vec<(String, String)>>,
    /// The next source's place in the order of arrival.
    next: u64,
}

impl Set {
    /// The tools offered, in source then name order.
    pub fn tools(&self) -> &[Arc<ExternalTool>] {
        &self.list
    }
}

/// One source's tools, and its place in the order of arrival.
#[derive(Clone)]
struct Offer {
    since: u64,
    tools: Vec<Arc<ExternalTool>>,
}

impl std::fmt::Debug for External {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("External").field("tools", &self.snapshot().list.len()).finish()
    }
}

impl External {
    /// Replace every tool of `source` with `tools` (none: the source offers nothing now).
    ///
    /// One name is one tool: a tool whose exported name another source offered first is
    /// withheld (logged, and shown by `/healthz`), never put in the other's place, so that a
    /// call can never reach a server its client did not mean — with its arguments and key.
    /// A withheld tool appears once the name is free again (the other source dropped it) and
    /// its own source's list is read again.
    pub fn replace(&self, source: &str, tools: Vec<ExternalTool>) {
        let mut guard = self.inner.set.write().unwrap_or_else(|e| e.into_inner());
        let mut by_source = guard.by_source.clone();
        let mut next = guard.next;
        let mut tools: Vec<Arc<ExternalTool>> = tools.into_iter().map(Arc::new).collect();
        tools.sort_by(|a, b| a.tool.name.cmp(&b.tool.name));
        if tools.is_empty() {
            by_source.remove(source);
        } else {
            let since = by_source.get(source).map_or_else(
                || {
                    next += 1;
                    next
                },
                |o| o.since,
            );
            by_source.insert(source.to_owned(), Offer { since, tools });
        }
        // The sources in order of arrival: each name to the first that offers it.
        let mut order: Vec<(&String, &Offer)> = by_source.iter().collect();
        order.sort_by_key(|(_, o)| o.since);
        let mut owner: HashMap<&str, &str> = HashMap::new();
        let mut withheld: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        for (name, offer) in &order {
            for t in &offer.tools {
                match owner.get(t.tool.name.as_str()) {
                    Some(first) => withheld
                        .entry((*name).clone())
                        .or_default()
                        .push((t.tool.name.clone(), (*first).to_owned())),
                    None => {
                        owner.insert(&t.tool.name, name);
                    }
                }
            }
        }
        let list: Vec<Arc<ExternalTool>> = by_source
            .iter()
            .flat_map(|(name, o)| {
                o.tools.iter().filter(|t| owner.get(t.tool.name.as_str()) == Some(&name.as_str()))
            })
            .cloned()
            .collect();
        let by_name = list.iter().map(|t| (t.tool.name.clone(), t.clone())).collect();
        let by_method = list.iter().map(|t| (t.tool.method.clone(), t.clone())).collect();
        if let Some(clashes) = withheld.get(source) {
            for (tool, first) in clashes {
                tracing::warn!(
                    upstream = %source,
                    tool = %oncerpc_core::LogSafe(tool),
                    offered_by = %first,
                    "MCP upstream tool withheld: another upstream offers a tool of the same name \
                     (give each upstream its own prefix)"
                );
            }
        }
        *guard = Arc::new(Set { by_source, by_name, by_method, list, withheld, next });
    }

    /// The tools of `source` withheld now: (exported name, the source that offers it).
    pub fn withheld(&self, source: &str) -> Vec<(String, String)> {
        self.snapshot().withheld.get(source).cloned().unwrap_or_default()
    }

    /// The tool called `name` (or whose method is: the name before model-safe names), if a
    /// source offers it now.
    pub fn get(&self, name: &str) -> Option<Arc<ExternalTool>> {
        let set = self.snapshot();
        set.by_name.get(name).or_else(|| set.by_method.get(name)).cloned()
    }

    /// The tools offered now (see [`Set::tools`]).
    pub fn snapshot(&self) -> Arc<Set> {
        self.inner.set.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The names of the tools `source` offers now.
    pub fn names(&self, source: &str) -> Vec<String> {
        let set = self.snapshot();
        set.by_source.get(source).map_or_else(Vec::new, |o| {
            o.tools
                .iter()
                .filter(|t| set.by_name.get(&t.tool.name).is_some_and(|owned| Arc::ptr_eq(owned, t)))
                .map(|t| t.tool.name.clone())
                .collect()
        })
    }

    /// What the sources offer besides tools: resources, templates, prompts, completions.
    pub fn offers(&self) -> &crate::offers::Offers {
        &self.inner.offers
    }

    /// Record `source`'s state (shown by `/healthz`).
    pub fn set_health(&self, source: &str, state: Value) {
        self.inner.health.lock().unwrap_or_else(|e| e.into_inner()).insert(source.to_owned(), state);
    }

    /// Forget `source`'s state (a source that is gone).
    pub fn forget_health(&self, source: &str) {
        self.inner.health.lock().unwrap_or_else(|e| e.into_inner()).remove(source);
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
