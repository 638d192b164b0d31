//! Correlation ids (SPEC §7): read from a request's id, or generated.

use std::sync::Arc;

use oncerpc_protocol::Entry;

/// SPEC §7: the id's text when there is one that can travel in a header, else generated.
pub(super) fn correlation_id(entry: &Entry<'_>) -> Arc<str> {
    let id = match entry {
        Entry::Valid(r) => r.id,
        Entry::Invalid { id, .. } => *id,
    };
    id.and_then(|id| id.text())
        .filter(|t| !t.is_empty() && t.len() <= 200 && t.bytes().all(|b| (0x20..0x7f).contains(&b)))
        .map(|t| Arc::from(t.as_ref()))
        .unwrap_or_else(generated_id)
}

/// A fresh correlation id for notifications, batches and unreadable requests.
pub fn generated_id() -> Arc<str> {
    Arc::from(uuid::Uuid::new_v4().simple().to_string())
}
