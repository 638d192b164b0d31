//! `server/discover` (`2026-07-28`): the revisions served, the capabilities and who the server
//! is, in place of the session era's `initialize` — asked for at any time, by any client, of
//! any replica.

use serde_json::json;

use crate::meta::{LIST_TTL_MS, supported_versions};
use crate::offers::Offers;

/// `_meta` member of the discover result naming the server.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// What a model is told about the tools: commands take a key, and a retry reuses it.
pub const INSTRUCTIONS: &str = "Tools that change something are commands: pass an idempotency_key and \
    reuse the same key when you retry the same call, so it runs once.";

/// The `server/discover` result: every revision served (this one first), `tools` (no list
/// changes: the registry is fixed while the process runs), the tasks extension
/// ([`crate::tasks`]), the server's name and version,
/// and caching hints. Resources, prompts and completions while other servers offer some
/// ([`Offers::capabilities`]); logging is not offered.
pub fn result(offers: &Offers) -> String {
    let mut capabilities = json!({ "tools": {}, "extensions": { crate::meta::EXTENSION: {} } });
    // No list changes reach a stateless client: its lists carry `ttlMs`.
    offers.capabilities_for(&mut capabilities, false);
    json!({
        "resultType": "complete",
        "supportedVersions": supported_versions(),
        "capabilities": capabilities,
        "instructions": INSTRUCTIONS,
        "ttlMs": LIST_TTL_MS,
        "cacheScope": "public",
        "_meta": { META_SERVER_INFO: { "name": "oncerpc", "version": env!("CARGO_PKG_VERSION") } },
    })
    .to_string()
}
