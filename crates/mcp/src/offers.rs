//! What other MCP servers offer through this door besides tools (SPEC §16b): resources,
//! resource templates, prompts and completions. Like [`External`](crate::External)'s tools
//! they are found while the server runs: a source (one upstream server) replaces its whole
//! offer at once ([`Offers::set`]), and every request about one of them is forwarded to the
//! source that offers it ([`Source::forward`]).
//!
//! * **Names and URIs.** A prompt is listed under its exported name (the upstream's prefix
//!   before it, made model-safe as tool names are; the source chooses it). A resource keeps its
//!   URI: a URI is an address with a scheme of its own, which the upstream's tool results and
//!   prompts quote (embedded resources, resource links) and a client reads back as it is; a
//!   prefix would make those unreadable. A URI or a prompt name two sources offer belongs to
//!   the first that offered it (as a tool's name).
//! * **Routing.** `resources/read` goes to the source that lists the URI, else to the first
//!   whose template matches it; `prompts/get` and a prompt's `completion/complete` to the
//!   prompt's source (under the upstream's own name); a template's completion to the template's.
//!   An unknown URI or prompt is `-32602` with the URI or name in `data`.
//! * **Scopes** (SPEC §20): a source's scopes apply to reading its resources, getting its
//!   prompts and completing their arguments (`-32010` without them); the lists show only what
//!   the caller may use, as `tools/list` does.
//! * **Capabilities** say `resources`, `prompts` and `completions` only while something of
//!   the kind is offered ([`Offers::capabilities`]).
//! * **Changes**: when a source's resources or prompts change, a
//!   `notifications/resources/list_changed` or `notifications/prompts/list_changed` goes to
//!   every subscriber ([`Offers::subscribe`]: the transports' open sessions).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use oncerpc_core::{BoxFuture, Grant};
use oncerpc_protocol::{RawValue, RpcError};
use serde_json::{Map, Value, json};
use tokio::sync::{broadcast, watch};

/// Items a list answers at most per page.
const PAGE_SIZE: usize = 100;
/// List-changed notifications kept for a subscriber that reads slowly (older ones are lost,
/// and one is as good as many).
const CHANGES_KEPT: usize = 16;

/// Where forwarded requests go: one upstream server.
pub trait Source: Send + Sync {
    /// Send `method` (`resources/read`, `prompts/get`, `completion/complete`) with `params`
    /// (names already the source's own): its result, or the error to answer.
    fn forward<'a>(&'a self, method: &'a str, params: Value) -> BoxFuture<'a, Result<Value, RpcError>>;
}

/// One thing offered: how it is listed here, and its name (prompts) or URI (resources,
/// templates) at its source.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub json: Value,
    pub own: String,
}

/// What one source offers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Offer {
    pub resources: Vec<Item>,
    pub templates: Vec<Item>,
    pub prompts: Vec<Item>,
    /// The source answers `completion/complete`.
    pub completions: bool,
    /// What a caller must hold to use any of it.
    pub scopes: Vec<String>,
}

struct Entry {
    since: u64,
    offer: Offer,
    source: Arc<dyn Source>,
}

#[derive(Default)]
struct Set {
    by_source: BTreeMap<String, Arc<Entry>>,
    next: u64,
}

impl Set {
    /// The sources in the order they began to offer.
    fn ordered(&self) -> Vec<(&str, &Arc<Entry>)> {
        let mut order: Vec<_> = self.by_source.iter().map(|(n, e)| (n.as_str(), e)).collect();
        order.sort_by_key(|(_, e)| e.since);
        order
    }
}

/// The offers of one door, shared with whatever keeps them up to date (cheap to clone).
#[derive(Clone)]
pub struct Offers {
    set: Arc<RwLock<Set>>,
    changed: broadcast::Sender<Arc<str>>,
    /// `true` once the server shuts down: the sessions' streams end.
    closing: Arc<watch::Sender<bool>>,
}

impl Default for Offers {
    fn default() -> Self {
        Offers {
            set: Arc::default(),
            changed: broadcast::channel(CHANGES_KEPT).0,
            closing: Arc::new(watch::channel(false).0),
        }
    }
}

/// What is offered of one kind: the lists' member, the kind of a `data` entry.
#[derive(Clone, Copy)]
enum Kind {
    Resources,
    Templates,
    Prompts,
}

impl Kind {
    fn of(self, offer: &Offer) -> &[Item] {
        match self {
            Kind::Resources => &offer.resources,
            Kind::Templates => &offer.templates,
            Kind::Prompts => &offer.prompts,
        }
    }

    fn member(self) -> &'static str {
        match self {
            Kind::Resources => "resources",
            Kind::Templates => "resourceTemplates",
            Kind::Prompts => "prompts",
        }
    }

    fn key(self, item: &Item) -> &str {
        match self {
            Kind::Resources => item.json["uri"].as_str().unwrap_or(&item.own),
            Kind::Templates => item.json["uriTemplate"].as_str().unwrap_or(&item.own),
            Kind::Prompts => item.json["name"].as_str().unwrap_or(&item.own),
        }
    }
}

impl Offers {
    /// Replace what `source` offers (an empty offer: nothing now), reached through `via`.
    /// Subscribers hear of each kind whose list changed.
    pub fn set(&self, source: &str, offer: Offer, via: Arc<dyn Source>) {
        let (resources, prompts) = {
            let mut set = self.set.write().unwrap_or_else(|e| e.into_inner());
            let before = set.by_source.get(source).map(|e| e.offer.clone()).unwrap_or_default();
            let changed = |k: Kind| k.of(&before) != k.of(&offer);
            let resources = changed(Kind::Resources) || changed(Kind::Templates);
            let prompts = changed(Kind::Prompts);
            let empty = offer.resources.is_empty() && offer.templates.is_empty() && offer.prompts.is_empty();
            if empty {
                set.by_source.remove(source);
            } else {
                let since = match set.by_source.get(source) {
                    Some(e) => e.since,
                    None => {
                        set.next += 1;
                        set.next
                    }
                };
                set.by_source.insert(source.to_owned(), Arc::new(Entry { since, offer, source: via }));
            }
            (resources, prompts)
        };
        if resources {
            self.announce("notifications/resources/list_changed");
        }
        if prompts {
            self.announce("notifications/prompts/list_changed");
        }
    }

    fn announce(&self, method: &str) {
        let message = json!({ "jsonrpc": "2.0", "method": method }).to_string();
        // No subscriber: nobody to tell.
        let _ = self.changed.send(Arc::from(message));
    }

    /// The server shuts down: every stream of [`subscribe`](Self::subscribe)rs should end
    /// ([`closed`](Self::closed)), so that no open session holds the shutdown up.
    pub fn close(&self) {
        self.closing.send_replace(true);
    }

    /// Resolves once [`close`](Self::close) was called.
    pub async fn closed(&self) {
        let mut closing = self.closing.subscribe();
        let _ = closing.wait_for(|c| *c).await;
    }

    /// What `source` offers now, if anything.
    pub fn offer(&self, source: &str) -> Option<Offer> {
        let set = self.set.read().unwrap_or_else(|e| e.into_inner());
        set.by_source.get(source).map(|e| e.offer.clone())
    }

    /// The list-changed notifications from now on, each a whole JSON-RPC message.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        self.changed.subscribe()
    }

    /// The capabilities of what is offered now: `resources` and `prompts` while some are,
    /// `completions` while a source that completes offers prompts or templates. Added to
    /// `capabilities`. `list_changed`: the client will hear of changes (a session's stream; the
    /// stateless revision has none here, so its lists carry `ttlMs` instead).
    pub fn capabilities_for(&self, capabilities: &mut Value, list_changed: bool) {
        let set = self.set.read().unwrap_or_else(|e| e.into_inner());
        let any = |f: fn(&Offer) -> bool| set.by_source.values().any(|e| f(&e.offer));
        if any(|o| !o.resources.is_empty() || !o.templates.is_empty()) {
            capabilities["resources"] = kind(list_changed);
        }
        if any(|o| !o.prompts.is_empty()) {
            capabilities["prompts"] = kind(list_changed);
        }
        if any(|o| o.completions && (!o.prompts.is_empty() || !o.templates.is_empty())) {
            capabilities["completions"] = json!({});
        }
    }

    /// [`capabilities_for`](Self::capabilities_for) a session (changes announced).
    pub fn capabilities(&self, capabilities: &mut Value) {
        self.capabilities_for(capabilities, true)
    }

    /// Whether some source requires a scope: then callers see different lists.
    pub fn scoped(&self) -> bool {
        self.set
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .by_source
            .values()
            .any(|e| !e.offer.scopes.is_empty())
    }

    /// Whether `method` is one this module answers.
    pub fn answers(method: &str) -> bool {
        matches!(
            method,
            "resources/list"
                | "resources/templates/list"
                | "resources/read"
                | "prompts/list"
                | "prompts/get"
                | "completion/complete"
        )
    }

    /// Answer `method` (one that [`answers`](Self::answers)) for a caller holding `grant`:
    /// the result's JSON text (without a revision's framing).
    /// A kind that is not offered now is not there at all (`-32601`), as the capabilities say.
    pub async fn answer(
        &self,
        method: &str,
        params: Option<&RawValue>,
        grant: &Grant,
    ) -> Result<String, RpcError> {
        let mut capabilities = json!({});
        self.capabilities(&mut capabilities);
        let capability = method.split('/').next().map(|c| if c == "completion" { "completions" } else { c });
        if capability.is_none_or(|c| capabilities.get(c).is_none()) {
            return Err(RpcError::method_not_found());
        }
        let params = params_of(params)?;
        match method {
            "resources/list" => self.page(Kind::Resources, &params, grant),
            "resources/templates/list" => self.page(Kind::Templates, &params, grant),
            "prompts/list" => self.page(Kind::Prompts, &params, grant),
            "resources/read" => {
                let uri = text(&params, "uri")?;
                let (entry, own) = self.resource(&uri).ok_or_else(|| resource_not_found(&uri))?;
                allowed(&entry, grant, &uri)?;
                let mut result = entry.source.forward(method, json!({ "uri": own })).await?;
                // The caching hints are this door's to give (the stateless revision's).
                if let Some(result) = result.as_object_mut() {
                    result.remove("ttlMs");
                    result.remove("cacheScope");
                }
                Ok(result.to_string())
            }
            "prompts/get" => {
                let name = text(&params, "name")?;
                let (entry, own) = self.prompt(&name).ok_or_else(|| prompt_not_found(&name))?;
                allowed(&entry, grant, &name)?;
                let mut forwarded = json!({ "name": own });
                if let Some(arguments) = params.get("arguments").filter(|a| !a.is_null()) {
                    if !arguments.is_object() {
                        return Err(RpcError::invalid_params("arguments must be an object of strings"));
                    }
                    forwarded["arguments"] = arguments.clone();
                }
                Ok(entry.source.forward(method, forwarded).await?.to_string())
            }
            "completion/complete" => self.complete(params, grant).await,
            _ => Err(RpcError::method_not_found()),
        }
    }

    /// `completion/complete`: to the source of the prompt or template its `ref` names.
    async fn complete(&self, mut params: Map<String, Value>, grant: &Grant) -> Result<String, RpcError> {
        params.remove("_meta");
        let reference = params.get("ref").cloned().unwrap_or(Value::Null);
        let (entry, own, member) = match reference["type"].as_str() {
            Some("ref/prompt") => {
                let name = reference["name"].as_str().ok_or_else(|| bad_ref("name"))?;
                let (entry, own) = self.prompt(name).ok_or_else(|| prompt_not_found(name))?;
                allowed(&entry, grant, name)?;
                (entry, own, "name")
            }
            Some("ref/resource") => {
                let uri = reference["uri"].as_str().ok_or_else(|| bad_ref("uri"))?;
                let found = self.template(uri).or_else(|| self.resource(uri));
                let (entry, own) = found.ok_or_else(|| resource_not_found(uri))?;
                allowed(&entry, grant, uri)?;
                (entry, own, "uri")
            }
            _ => return Err(bad_ref("type")),
        };
        if !entry.offer.completions {
            return Ok(json!({ "completion": { "values": [], "hasMore": false } }).to_string());
        }
        params.insert("ref".into(), json!({ "type": reference["type"], member: own }));
        Ok(entry.source.forward("completion/complete", Value::Object(params)).await?.to_string())
    }

    fn page(&self, kind: Kind, params: &Map<String, Value>, grant: &Grant) -> Result<String, RpcError> {
        let set = self.set.read().unwrap_or_else(|e| e.into_inner());
        let mut seen = std::collections::HashSet::new();
        let items: Vec<&Value> = set
            .ordered()
            .into_iter()
            .filter(|(_, e)| grant.allows(&e.offer.scopes))
            .flat_map(|(_, e)| kind.of(&e.offer).iter())
            .filter(|i| seen.insert(kind.key(i).to_owned()))
            .map(|i| &i.json)
            .collect();
        let all = items.len();
        let from = match params.get("cursor") {
            None | Some(Value::Null) => 0,
            Some(Value::String(c)) => c
                .parse::<usize>()
                .ok()
                .filter(|&n| n <= all)
                .ok_or_else(|| RpcError::invalid_params("invalid cursor: pass nextCursor as it came"))?,
            Some(_) => return Err(RpcError::invalid_params("cursor must be a string")),
        };
        let to = (from + PAGE_SIZE).min(all);
        let mut page = json!({ kind.member(): &items[from..to] });
        if to < all {
            page["nextCursor"] = json!(to.to_string());
        }
        Ok(page.to_string())
    }

    /// The source that lists `uri` (the first to offer it), else the first whose template
    /// matches it; and the URI there.
    fn resource(&self, uri: &str) -> Option<(Arc<Entry>, String)> {
        let set = self.set.read().unwrap_or_else(|e| e.into_inner());
        let order = set.ordered();
        for (_, e) in &order {
            if let Some(i) = e.offer.resources.iter().find(|i| Kind::Resources.key(i) == uri) {
                return Some(((*e).clone(), i.own.clone()));
            }
        }
        order
            .into_iter()
            .find(|(_, e)| e.offer.templates.iter().any(|t| matches(Kind::Templates.key(t), uri)))
            .map(|(_, e)| (e.clone(), uri.to_owned()))
    }

    /// The source of the template `template` (as listed), and the template there.
    fn template(&self, template: &str) -> Option<(Arc<Entry>, String)> {
        let set = self.set.read().unwrap_or_else(|e| e.into_inner());
        set.ordered().into_iter().find_map(|(_, e)| {
            let t = e.offer.templates.iter().find(|t| Kind::Templates.key(t) == template)?;
            Some((e.clone(), t.own.clone()))
        })
    }

    /// The source of the prompt `name` (as listed), and its name there.
    fn prompt(&self, name: &str) -> Option<(Arc<Entry>, String)> {
        let set = self.set.read().unwrap_or_else(|e| e.into_inner());
        set.ordered().into_iter().find_map(|(_, e)| {
            let p = e.offer.prompts.iter().find(|p| Kind::Prompts.key(p) == name)?;
            Some((e.clone(), p.own.clone()))
        })
    }
}

impl std::fmt::Debug for Offers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Offers").field("sources", &self.set.read().map(|s| s.by_source.len()).ok()).finish()
    }
}

/// Whether `uri` is one of the URIs of the RFC 6570 template `template`: each `{var}` stands
/// for a text without `/` (`{+var}`, `{#var}`: any text), the rest must be as written.
pub fn matches(template: &str, uri: &str) -> bool {
    fn go(t: &str, u: &str) -> bool {
        match t.find('{') {
            None => t == u,
            Some(open) => {
                let Some(close) = t[open..].find('}').map(|c| open + c) else { return t == u };
                let (literal, rest) = (&t[..open], &t[close + 1..]);
                let Some(u) = u.strip_prefix(literal) else { return false };
                let any = matches!(t.as_bytes().get(open + 1), Some(b'+' | b'#'));
                (1..=u.len()).filter(|&n| u.is_char_boundary(n)).any(|n| {
                    let value = &u[..n];
                    (any || !value.contains(['/', '?', '#'])) && go(rest, &u[n..])
                })
            }
        }
    }
    go(template, uri)
}

fn kind(list_changed: bool) -> Value {
    if list_changed { json!({ "listChanged": true }) } else { json!({}) }
}

fn params_of(params: Option<&RawValue>) -> Result<Map<String, Value>, RpcError> {
    match params.map(|p| serde_json::from_str::<Value>(p.get())) {
        None | Some(Ok(Value::Null)) => Ok(Map::new()),
        Some(Ok(Value::Object(o))) => Ok(o),
        _ => Err(RpcError::invalid_params("params must be an object")),
    }
}

fn text(params: &Map<String, Value>, member: &str) -> Result<String, RpcError> {
    match params.get(member) {
        Some(Value::String(s)) => Ok(s.clone()),
        _ => Err(RpcError::invalid_params(format!("params.{member} must be a string"))),
    }
}

fn allowed(entry: &Entry, grant: &Grant, what: &str) -> Result<(), RpcError> {
    match grant.lacks(&entry.offer.scopes) {
        None => Ok(()),
        Some(missing) => Err(oncerpc_core::grant::forbidden(what, &entry.offer.scopes, missing)),
    }
}

/// `-32602` for a URI no source offers (SEP-2164: the URI in `data`).
pub fn resource_not_found(uri: &str) -> RpcError {
    RpcError::invalid_params(format!(
        "Resource not found: {uri:?} is not a resource offered here (resources/list and \
         resources/templates/list name those that are)",
        uri = oncerpc_core::LogSafe(uri)
    ))
    .data(json!({ "uri": uri }))
}

fn prompt_not_found(name: &str) -> RpcError {
    RpcError::invalid_params(format!(
        "Unknown prompt {name:?}: prompts/list names the prompts offered here",
        name = oncerpc_core::LogSafe(name)
    ))
    .data(json!({ "name": name }))
}

fn bad_ref(member: &str) -> RpcError {
    RpcError::invalid_params(format!(
        "completion/complete: ref must be {{\"type\":\"ref/prompt\",\"name\":…}} or \
         {{\"type\":\"ref/resource\",\"uri\":…}} (ref.{member} is missing or wrong)"
    ))
}

#[cfg(test)]
mod tests;
