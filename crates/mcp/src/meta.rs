//! The names and small forms of the protocol every part of the door shares: the revisions
//! served, the `_meta` members oncerpc reads and writes, the log levels, the tasks
//! extension's identifier, and a stateless result's `resultType`. A leaf: it uses nothing of
//! this crate, so every module may use it.

/// The session-era revisions served, newest first.
pub const SESSION_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

/// `_meta` member carrying the idempotency key, on calls and on results.
pub const META_KEY: &str = "io.oncerpc/idempotency-key";

/// `_meta` member of a result: `new`, `duplicate` or `processing`.
pub const META_STATUS: &str = "io.oncerpc/idempotency-status";

/// `_meta` member of a result: the correlation id of the call (in the logs too).
pub const META_CORRELATION: &str = "io.oncerpc/correlation-id";

/// `_meta` member of a task's messages (`2025-11-25`): `{"taskId": …}`.
pub const META_RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// The stateless revisions served.
pub const STATELESS_VERSIONS: [&str; 1] = ["2026-07-28"];

/// `_meta` member of every stateless request: its protocol version.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";

/// `_meta` member of every stateless request: the client's capabilities for it.
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";

/// `_meta` member of a stateless request: the least severe level it wants log messages of.
pub const META_LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";

/// How long a client may keep `server/discover` and `tools/list` results: the tools are the
/// registry's, fixed while the process runs; a restart with another config may change them.
pub const LIST_TTL_MS: u64 = 300_000;

/// Every revision served, newest first (`server/discover`'s `supportedVersions`, and the
/// `supported` list of `-32022`).
pub fn supported_versions() -> Vec<&'static str> {
    STATELESS_VERSIONS.iter().chain(SESSION_VERSIONS.iter()).copied().collect()
}

/// A result of this revision: `resultType: "complete"` first, then the result's own members
/// (kept byte for byte: a duplicate's content is the stored result).
pub fn complete(result: &str) -> String {
    match result.trim_start().strip_prefix('{') {
        Some(rest) if rest.trim_start().starts_with('}') => r#"{"resultType":"complete"}"#.to_owned(),
        Some(rest) => format!(r#"{{"resultType":"complete",{rest}"#),
        None => result.to_owned(),
    }
}

/// The levels of `logging/setLevel`, least severe first.
pub const LEVELS: [&str; 8] =
    ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];

/// The extension's identifier (`capabilities.extensions` on both sides).
pub const EXTENSION: &str = "io.modelcontextprotocol/tasks";
