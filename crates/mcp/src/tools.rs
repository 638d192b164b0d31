//! The registry as MCP tools (`tools/list`), made once when the server starts.
//!
//! A tool is a method that takes an id: `rpc.*`, methods that accept notifications (the
//! fire-and-forget ones) and webhook methods (served only with a verified signature) are not
//! tools, nor a method whose params are positional only and that has no object form
//! ([`crate::schema`]; logged). Its name is model-safe by default ([`crate::names`]: the method
//! `counter.increment` is the tool `counter_increment`, the method's own name in `title` and in
//! `_meta["io.oncerpc/method"]`). Its `inputSchema` lists every argument the method takes
//! ([`crate::schema`]), and a command's gains `idempotency_key` and `force_retry` properties.
//! Annotations follow the kind: a query is `readOnlyHint`, a command is not read-only but is
//! `idempotentHint` (it is, here: a retry with the same key runs nothing again). The method's
//! [`ToolOptions`](oncerpc_core::ToolOptions) hide it (`mcp = false`) or add a `title`,
//! `destructiveHint`, `openWorldHint` (flows) and an `outputSchema`.

use std::collections::HashMap;

use oncerpc_core::{Grant, Kind, MethodSpec, Registry};

use crate::external::External;
use crate::names::{META_METHOD, ToolNameError, ToolNames};
pub use crate::tool::Tool;
use oncerpc_protocol::RpcError;
use serde_json::{Value, json};

/// Tools in one `tools/list` page.
pub const PAGE_SIZE: usize = 100;

/// What the `idempotency_key` property tells a model: it reads a tool's description as its
/// whole specification, and a server that says "a unique key per request" gets a new key on
/// every retry, and runs the retry again.
pub const KEY_DESCRIPTION: &str = "Idempotency key for this call: any string of 3-128 characters \
    (letters, digits, '-', '_', '.'). Make one up for a new action, and when you retry the same \
    action (after a timeout, an error or a lost answer) send the SAME key again with the same \
    arguments: the action then runs only once and the retry gets its result. A different key \
    is a different action. If the retry returns a stored failure, send the same key with \
    force_retry: true to run the action again.";

/// The `force_retry` property of a command tool, written for the model.
pub const FORCE_RETRY_DESCRIPTION: &str = "Set to true only to run this action again after it \
    FAILED under the same idempotency_key: a failure is stored and every retry with that key \
    gets it back until you set this. It never runs again an action that succeeded (that is \
    refused, and the stored result stands). Leave it out otherwise.";

/// Add a command tool's `idempotency_key` and `force_retry` properties to its `inputSchema`
/// (an object schema; `properties` made when it has none).
pub fn add_key_properties(schema: &mut Value) {
    let Some(schema) = schema.as_object_mut() else { return };
    let props = schema.entry("properties").or_insert(json!({}));
    if let Value::Object(props) = props {
        props.insert("idempotency_key".into(), json!({ "type": "string", "description": KEY_DESCRIPTION }));
        props.insert(
            "force_retry".into(),
            json!({ "type": "boolean", "description": FORCE_RETRY_DESCRIPTION }),
        );
    }
}

/// Make `idempotency_key` required in a command's input schema: what a server in
/// `production` mode, which refuses a command without a key, lists (unless the method derives
/// its key from the call).
pub fn require_key(schema: &mut Value) {
    let Some(schema) = schema.as_object_mut() else { return };
    let required = schema.entry("required").or_insert(json!([]));
    if !required.is_array() {
        *required = json!([]);
    }
    if let Value::Array(r) = required
        && !r.iter().any(|n| n == "idempotency_key")
    {
        r.push(json!("idempotency_key"));
    }
}

/// The tools of one registry, in name order, then the external ones (other servers' tools,
/// [`External`]), in source and name order.
#[derive(Debug, Clone, Default)]
pub struct Tools {
    list: Vec<Tool>,
    by_name: HashMap<String, usize, foldhash::fast::RandomState>,
    external: External,
}

impl Tools {
    pub fn from_registry(registry: &Registry) -> Tools {
        Tools::from_registry_in(registry, false)
    }

    /// [`from_registry`](Self::from_registry) for a server in `production` mode, where a
    /// command's call without a key is refused: its `idempotency_key` is `required` in the
    /// schema (unless the method derives its key from the call). Tools have model-safe names;
    /// a registry whose names clash that way ([`Tools::check_names`]) keeps its methods' own
    /// names, logged as an error.
    pub fn from_registry_in(registry: &Registry, production: bool) -> Tools {
        Tools::build(registry, production, ToolNames::ModelSafe).unwrap_or_else(|e| {
            tracing::error!(error = %e, "MCP tools named by their methods' own names");
            Tools::build(registry, production, ToolNames::Method).unwrap_or_default()
        })
    }

    /// The tools of `registry`, named as `names` says; a clash or a name too long is the error.
    pub fn build(registry: &Registry, production: bool, names: ToolNames) -> Result<Tools, ToolNameError> {
        let listed = listed(registry, true);
        let tool_names = names.assign(listed.iter().map(|(m, _, _)| *m))?;
        let mut tools = Tools::default();
        for ((method, spec, derived), name) in listed.into_iter().zip(tool_names) {
            tools.by_name.insert(name.clone(), tools.list.len());
            let json = tool_json(&name, method, spec, derived.schema, production);
            let task_required = spec.tool.task_required && spec.kind == Kind::Command;
            let support = match (spec.kind, task_required) {
                // A question needs its client there: never a task.
                _ if spec.asks => "forbidden",
                (Kind::Query, _) => "forbidden",
                (Kind::Command, false) => "optional",
                (Kind::Command, true) => "required",
            };
            tools.list.push(Tool {
                name,
                method: method.to_owned(),
                array_argument: derived.array_argument,
                kind: spec.kind,
                header_params: header_params(&json["inputSchema"]),
                json,
                task_required,
                execution: json!({ "taskSupport": support }),
                scopes: spec.scopes.clone(),
                asks: spec.asks,
            });
        }
        // A call may name a tool by its method's own name too (for one release): never in
        // another tool's place (a method name with a character a tool name has not is no
        // tool's name).
        for (i, tool) in tools.list.iter().enumerate() {
            tools.by_name.entry(tool.method.clone()).or_insert(i);
        }
        Ok(tools)
    }

    /// Whether `registry`'s tools can be named as `names` says: the first clash (naming both
    /// methods) or name too long.
    pub fn check_names(registry: &Registry, names: ToolNames) -> Result<(), ToolNameError> {
        names.assign(listed(registry, false).iter().map(|(m, _, _)| *m)).map(drop)
    }

    /// The names of `registry`'s tools (named as `names` says, clashes aside): where another
    /// server's tools cannot go.
    pub fn names_of(registry: &Registry, names: ToolNames) -> Vec<String> {
        listed(registry, false).iter().filter_map(|(m, _, _)| names.tool_name(m).ok()).collect()
    }

    /// Offer `external`'s tools too (after the registry's).
    pub fn with_external(mut self, external: External) -> Tools {
        self.external = external;
        self
    }

    /// A registry's tool by name.
    pub fn get(&self, name: &str) -> Option<&Tool> {
        self.by_name.get(name).map(|&i| &self.list[i])
    }

    /// The external tools offered beside the registry's.
    pub fn external(&self) -> &External {
        &self.external
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The `tools/list` result from `cursor` (`None`: the first page) for a caller holding
    /// `grant`: the tools it may call (SPEC §20). The cursor is the position of the page's
    /// first tool in that caller's list; one that is not a cursor of ours is `-32602`.
    pub fn page(&self, cursor: Option<&str>, grant: &Grant) -> Result<String, RpcError> {
        self.page_of(cursor, false, grant)
    }

    /// [`page`](Self::page) with each tool's `execution.taskSupport` (the session era's
    /// `2025-11-25`, whose experimental tasks are per tool).
    pub fn page_with_execution(&self, cursor: Option<&str>, grant: &Grant) -> Result<String, RpcError> {
        self.page_of(cursor, true, grant)
    }

    /// Whether some tool requires a scope: then callers see different lists.
    pub fn scoped(&self) -> bool {
        self.list.iter().any(|t| !t.scopes.is_empty())
            || self.external.snapshot().list.iter().any(|t| !t.tool.scopes.is_empty())
    }

    fn page_of(&self, cursor: Option<&str>, execution: bool, grant: &Grant) -> Result<String, RpcError> {
        let external = self.external.snapshot();
        let tools: Vec<&Tool> = self
            .list
            .iter()
            .chain(external.list.iter().map(|t| &t.tool))
            .filter(|t| grant.allows(&t.scopes))
            .collect();
        let all = tools.len();
        let from = match cursor {
            None => 0,
            Some(c) => c
                .parse::<usize>()
                .ok()
                .filter(|&n| n <= all)
                .ok_or_else(|| RpcError::invalid_params("invalid cursor: pass nextCursor as it came"))?,
        };
        let to = (from + PAGE_SIZE).min(all);
        let shown = &tools[from..to];
        let mut page = if execution {
            let with = |t: &&Tool| {
                let mut tool = t.json.clone();
                tool["execution"] = t.execution.clone();
                tool
            };
            json!({ "tools": shown.iter().map(with).collect::<Vec<_>>() })
        } else {
            json!({ "tools": shown.iter().map(|t| &t.json).collect::<Vec<_>>() })
        };
        if to < all {
            page["nextCursor"] = json!(to.to_string());
        }
        Ok(page.to_string())
    }
}

/// The registry's methods that are tools, in name order, with their `inputSchema`s. A method
/// with no object form is left out (logged with the reason when `log`).
fn listed(registry: &Registry, log: bool) -> Vec<(&str, &MethodSpec, crate::schema::Derived)> {
    let mut out = Vec::new();
    for name in registry.names() {
        let Some(spec) = registry.spec(name) else { continue };
        if name.starts_with("rpc.") || spec.notification_allowed || spec.signed || spec.tool.hidden {
            continue;
        }
        match crate::schema::input_schema(spec.params_schema.as_ref(), spec.tool.array_argument.as_deref()) {
            Ok(derived) => out.push((name, spec, derived)),
            Err(e) if log => {
                tracing::warn!(method = %oncerpc_core::LogSafe(name), reason = %e, "not an MCP tool")
            }
            Err(_) => {}
        }
    }
    out
}

fn tool_json(name: &str, method: &str, spec: &MethodSpec, mut schema: Value, production: bool) -> Value {
    let mut annotations = match spec.kind {
        Kind::Query => json!({ "readOnlyHint": true }),
        Kind::Command => {
            add_key_properties(&mut schema);
            let derived = spec.key_from.is_some() || spec.derive_key_window.is_some();
            if production && !derived {
                require_key(&mut schema);
            }
            json!({ "readOnlyHint": false, "idempotentHint": true })
        }
    };
    let options = &spec.tool;
    if let Some(d) = options.destructive.filter(|_| spec.kind == Kind::Command) {
        annotations["destructiveHint"] = json!(d);
    }
    if options.open_world {
        annotations["openWorldHint"] = json!(true);
    }
    if let Some(t) = &options.title {
        annotations["title"] = json!(t);
    }
    let mut tool = json!({
        "name": name,
        "inputSchema": schema,
        "annotations": annotations,
        "_meta": { META_METHOD: method },
    });
    // The method's own name where the tool's is not it, for people (hosts show `title`).
    match &options.title {
        Some(t) => tool["title"] = json!(t),
        None if name != method => tool["title"] = json!(method),
        None => {}
    }
    if let Some(d) = &spec.description {
        tool["description"] = json!(d);
    }
    if let Some(s) = &options.output_schema {
        tool["outputSchema"] = s.clone();
    }
    tool
}

/// The `x-mcp-header` annotations of an input schema: the header's `{Name}` and the argument's
/// path, for properties reached through `properties` only (the revision's rule).
pub fn header_params(schema: &Value) -> Vec<(String, Vec<String>)> {
    fn walk(schema: &Value, path: &mut Vec<String>, out: &mut Vec<(String, Vec<String>)>) {
        let Some(props) = schema.get("properties").and_then(Value::as_object) else { return };
        for (key, prop) in props {
            path.push(key.clone());
            if let Some(name) = prop.get("x-mcp-header").and_then(Value::as_str) {
                out.push((name.to_owned(), path.clone()));
            }
            if path.len() < 16 {
                walk(prop, path, out);
            }
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(schema, &mut Vec::new(), &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use oncerpc_core::{Context, typed};

    fn registry() -> Registry {
        let mut r = Registry::new();
        let h = || typed(|_c: Context, _p: Value| async { Ok::<_, RpcError>(1) });
        let schema =
            json!({ "type": "object", "required": ["sku"], "properties": { "sku": { "type": "string" } } });
        let mut pay = MethodSpec::command();
        pay.description = Some("Charge a card".into());
        pay.params_schema = Some(schema);
        r.register("pay", pay, h()).unwrap();
        r.register("balance", MethodSpec::query(), h()).unwrap();
        let mut note = MethodSpec::query();
        note.notification_allowed = true;
        r.register("note", note, h()).unwrap();
        for i in 0..150 {
            r.register(&format!("q.{i:03}"), MethodSpec::query(), h()).unwrap();
        }
        r
    }

    #[test]
    fn commands_get_a_key_property_and_annotations_follow_the_kind() {
        let tools = Tools::from_registry(&registry());
        assert!(tools.get("note").is_none(), "notification methods are not tools");
        let pay = &tools.get("pay").unwrap().json;
        assert_eq!(pay["description"], "Charge a card");
        assert_eq!(pay["inputSchema"]["required"], json!(["sku"]));
        assert_eq!(pay["inputSchema"]["properties"]["idempotency_key"]["type"], "string");
        let told = pay["inputSchema"]["properties"]["idempotency_key"]["description"].as_str().unwrap();
        assert!(told.contains("SAME key"), "the model is told to reuse the key: {told}");
        assert_eq!(pay["annotations"], json!({ "readOnlyHint": false, "idempotentHint": true }));
        let balance = &tools.get("balance").unwrap().json;
        assert_eq!(balance["inputSchema"], json!({ "type": "object", "properties": {} }));
        assert_eq!(balance["annotations"], json!({ "readOnlyHint": true }));
    }

    /// In production a command's call without a key is refused: the schema says the key is
    /// required, unless the method derives it from the call; `force_retry` is listed for the
    /// model in both modes.
    #[test]
    fn in_production_a_commands_key_is_required_unless_derived() {
        let mut r = registry();
        let h = || typed(|_c: Context, _p: Value| async { Ok::<_, RpcError>(1) });
        let mut send = MethodSpec::command();
        send.derive_key_window = Some(std::time::Duration::from_secs(600));
        r.register("send", send, h()).unwrap();
        let prod = Tools::from_registry_in(&r, true);
        let pay = &prod.get("pay").unwrap().json["inputSchema"];
        assert_eq!(pay["required"], json!(["sku", "idempotency_key"]));
        assert_eq!(pay["properties"]["force_retry"]["type"], "boolean");
        assert!(prod.get("send").unwrap().json["inputSchema"].get("required").is_none(), "a derived key");
        let dev = Tools::from_registry(&r);
        assert_eq!(dev.get("pay").unwrap().json["inputSchema"]["required"], json!(["sku"]));
    }

    #[test]
    fn tool_options_hide_a_method_or_add_title_hints_and_output_schema() {
        let mut r = Registry::new();
        let h = || typed(|_c: Context, _p: Value| async { Ok::<_, RpcError>(1) });
        let mut internal = MethodSpec::command();
        internal.tool.hidden = true;
        r.register("internal.reindex", internal, h()).unwrap();
        let mut refund = MethodSpec::command();
        refund.tool.title = Some("Refund a payment".into());
        refund.tool.destructive = Some(true);
        refund.tool.open_world = true;
        refund.tool.output_schema = Some(json!({ "type": "object", "required": ["refunded"] }));
        r.register("refund", refund, h()).unwrap();
        let mut look = MethodSpec::query();
        look.tool.destructive = Some(true);
        r.register("look", look, h()).unwrap();
        let tools = Tools::from_registry(&r);
        assert!(tools.get("internal.reindex").is_none(), "mcp = false: not a tool");
        assert_eq!(tools.len(), 2);
        let refund = &tools.get("refund").unwrap().json;
        assert_eq!(refund["title"], "Refund a payment");
        assert_eq!(
            refund["annotations"],
            json!({ "readOnlyHint": false, "idempotentHint": true, "destructiveHint": true,
                    "openWorldHint": true, "title": "Refund a payment" })
        );
        assert_eq!(refund["outputSchema"]["required"], json!(["refunded"]));
        let look = &tools.get("look").unwrap().json;
        assert_eq!(look["annotations"], json!({ "readOnlyHint": true }), "a query destroys nothing");
    }

    /// `q.000` is the tool `q_000`, its method in `title` and `_meta`; a call may name it either
    /// way; a configured title stays; `[mcp] tool_names = "method"` keeps the dots.
    #[test]
    fn tools_have_model_safe_names_and_keep_their_methods_name() {
        let tools = Tools::from_registry(&registry());
        let q = tools.get("q_000").expect("the model-safe name");
        assert_eq!((q.name.as_str(), q.method.as_str()), ("q_000", "q.000"));
        assert_eq!(q.json["name"], "q_000");
        assert_eq!(q.json["title"], "q.000");
        assert_eq!(q.json["_meta"], json!({ "io.oncerpc/method": "q.000" }));
        assert_eq!(
            tools.get("q.000").map(|t| &t.name),
            Some(&q.name),
            "the method's own name, for one release"
        );
        let pay = &tools.get("pay").unwrap().json;
        assert!(pay.get("title").is_none(), "a name that is its method's needs no title: {pay}");
        let methods = Tools::build(&registry(), false, ToolNames::Method).unwrap();
        assert_eq!(methods.get("q.000").unwrap().json["name"], "q.000");
        assert!(methods.get("q_000").is_none());
    }

    #[test]
    fn two_methods_of_one_tool_name_are_refused_naming_both() {
        let mut r = registry();
        let h = typed(|_c: Context, _p: Value| async { Ok::<_, RpcError>(1) });
        r.register("q_000", MethodSpec::query(), h).unwrap();
        let e = Tools::build(&r, false, ToolNames::ModelSafe).unwrap_err();
        assert_eq!(
            e,
            ToolNameError::Clash { name: "q_000".into(), first: "q.000".into(), second: "q_000".into() }
        );
        assert_eq!(Tools::check_names(&r, ToolNames::ModelSafe), Err(e));
        assert!(Tools::check_names(&r, ToolNames::Method).is_ok());
        // Served anyway (an embedder's registry): by the methods' own names, logged.
        assert!(Tools::from_registry(&r).get("q.000").is_some_and(|t| t.name == "q.000"));
    }

    /// Positional params are one array argument; a method with no object form is no tool.
    #[test]
    fn positional_methods_take_an_array_argument_or_are_left_out() {
        let mut r = Registry::new();
        let h = || typed(|_c: Context, _p: Value| async { Ok::<_, RpcError>(1) });
        let array = json!({ "type": "array", "items": { "type": "number" } });
        let mut sum = MethodSpec::query().params_schema(array.clone());
        sum.tool.array_argument = Some("values".into());
        r.register("sum", sum, h()).unwrap();
        r.register("mean", MethodSpec::query().params_schema(array), h()).unwrap();
        let tools = Tools::from_registry(&r);
        let sum = tools.get("sum").unwrap();
        assert_eq!(sum.array_argument.as_deref(), Some("values"));
        assert_eq!(sum.json["inputSchema"]["required"], json!(["values"]));
        assert!(tools.get("mean").is_none(), "positional only, no object form: not a tool");
    }

    #[test]
    fn pages_reach_every_tool_once_and_bad_cursors_are_refused() {
        let tools = Tools::from_registry(&registry());
        let mut names = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page: Value =
                serde_json::from_str(&tools.page(cursor.as_deref(), &Grant::All).unwrap()).unwrap();
            names.extend(
                page["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_owned()),
            );
            match page["nextCursor"].as_str() {
                Some(c) => cursor = Some(c.to_owned()),
                None => break,
            }
        }
        assert_eq!(names.len(), 152);
        assert_eq!(names.len(), tools.len());
        assert!(tools.page(Some("x"), &Grant::All).is_err());
        assert!(tools.page(Some("100000"), &Grant::All).is_err());
    }
}
