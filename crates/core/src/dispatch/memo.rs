//! What `prepare` found for a command's params text, kept for the byte-identical retries of a
//! command already answered as a duplicate: a retry that sends the same bytes again skips the
//! canonical walk, SHA-256, the `Value` and the params schema (most of what a duplicate cost
//! beyond a query, docs/BENCHMARKS.md).
//!
//! Why it answers what `prepare` would: for the calls it serves (a command whose key is the
//! params' `idempotency_key` or the transport's key, no force retry, no `key_from`,
//! `fingerprint_from` or `return_step`), `prepare`'s result is a function of the method, the
//! params text and the transport key alone — the walk, the schema and the key rules read
//! nothing else — and a method's spec and schema never change: an entry is for one `Method`
//! (compared by identity; the entry's weak reference keeps its allocation, so the address is
//! not reused, but not its handler), and an external method that comes back with another
//! schema (an MCP upstream's tool) is another `Method`. An
//! entry is written only for text that passed all of them, and keeps the params' own key (or
//! none), so a transport key is checked against it as the full path would, or, when the params
//! have none, checked by the key rules on every call. A text that differs by one byte
//! (whitespace, member order) is a miss and takes the full path.
//!
//! Entries are kept per tenant although the result does not depend on it: an answer from the
//! memo is a little faster, and one tenant must not be able to time whether another retried
//! the same params.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, Weak};

use foldhash::fast::RandomState;

use crate::method::Method;

/// Params texts longer than this are not kept (bounds the memory: [`CAPACITY`] × this).
pub(crate) const MAX_TEXT: usize = 1024;
/// Entries kept, over all shards.
pub(crate) const CAPACITY: usize = 4096;
const SHARDS: usize = 8;

struct Entry {
    tenant: Arc<str>,
    method: Weak<Method>,
    text: Box<str>,
    /// The params' `idempotency_key`, if they have one.
    key: Option<Arc<str>>,
    fingerprint: Arc<str>,
}

/// Where the key of a call `prepare` may keep came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyFrom {
    Params,
    Transport,
}

/// Bounded and sharded; a full shard is cleared (a miss only costs the full path once more).
pub(crate) struct PreparedMemo {
    shards: Vec<Mutex<HashMap<u64, Entry, RandomState>>>,
    hasher: RandomState,
    #[cfg(test)]
    hits: std::sync::atomic::AtomicUsize,
}

impl Default for PreparedMemo {
    fn default() -> Self {
        PreparedMemo {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::with_hasher(RandomState::default()))).collect(),
            hasher: RandomState::default(),
            #[cfg(test)]
            hits: Default::default(),
        }
    }
}

impl PreparedMemo {
    fn slot(
        &self,
        tenant: &str,
        method: &Method,
        text: &str,
    ) -> (u64, &Mutex<HashMap<u64, Entry, RandomState>>) {
        let hash = self.hasher.hash_one((tenant, std::ptr::from_ref(method) as usize, text));
        (hash, &self.shards[(hash as usize) % SHARDS])
    }

    /// The params' own key (if any) and the fingerprint `prepare` found for `text` as
    /// `method`'s params, in a call of `tenant`'s.
    pub(crate) fn get(
        &self,
        tenant: &str,
        method: &Method,
        text: &str,
    ) -> Option<(Option<Arc<str>>, Arc<str>)> {
        let (hash, shard) = self.slot(tenant, method, text);
        let map = shard.lock().ok()?;
        let e = map.get(&hash)?;
        (*e.text == *text && std::ptr::eq(e.method.as_ptr(), method) && *e.tenant == *tenant)
            .then(|| (e.key.clone(), e.fingerprint.clone()))
    }

    /// Keep what `prepare` found for `text` (not kept past [`MAX_TEXT`]); `key`: the params'
    /// own key, if they have one.
    pub(crate) fn insert(
        &self,
        tenant: &Arc<str>,
        method: &Arc<Method>,
        text: &str,
        key: Option<&Arc<str>>,
        fingerprint: &Arc<str>,
    ) {
        if text.len() > MAX_TEXT {
            return;
        }
        let (hash, shard) = self.slot(tenant, method, text);
        let Ok(mut map) = shard.lock() else { return };
        if map.len() >= CAPACITY / SHARDS && !map.contains_key(&hash) {
            map.clear();
        }
        let entry = Entry {
            tenant: tenant.clone(),
            method: Arc::downgrade(method),
            text: text.into(),
            key: key.cloned(),
            fingerprint: fingerprint.clone(),
        };
        map.insert(hash, entry);
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().map_or(0, |m| m.len())).sum()
    }

    /// A call answered from the memo (counted for the tests).
    #[cfg(test)]
    pub(crate) fn count_hit(&self) {
        self.hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    #[cfg(test)]
    pub(crate) fn hits(&self) -> usize {
        self.hits.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use oncerpc_protocol::RawValue;

    use super::*;
    use crate::{Dispatcher, DispatcherConfig, MethodSpec, Registry, RequestMeta, typed};

    /// `pay`, a command with a params schema (`amount`: an integer), and the count of its runs.
    fn dispatcher() -> (Dispatcher, Arc<AtomicUsize>) {
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        let mut r = Registry::new();
        let schema = serde_json::json!({
            "type": "object",
            "properties": { "amount": { "type": "integer" } },
            "required": ["amount"]
        });
        let handler = typed(move |_ctx, p: serde_json::Value| {
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            async move { Ok::<_, oncerpc_protocol::RpcError>(serde_json::json!({ "run": n, "params": p })) }
        });
        r.register("pay", MethodSpec::command().params_schema(schema), handler).unwrap();
        (Dispatcher::new(r, DispatcherConfig::default()), runs)
    }

    /// The body, the idempotency status and the key of one call of `pay`.
    async fn pay(
        d: &Dispatcher,
        params: &str,
        meta: &RequestMeta,
    ) -> (String, Option<String>, Option<String>) {
        let body = format!(r#"{{"jsonrpc":"2.0","method":"pay","params":{params},"id":1}}"#);
        let reply = d.handle(body.as_bytes(), meta).await;
        let info = reply.idempotency;
        (
            String::from_utf8(reply.body.unwrap()).unwrap(),
            info.as_ref().map(|i| i.status.as_str().to_owned()),
            info.map(|i| i.key.to_string()),
        )
    }

    #[tokio::test]
    async fn a_retry_of_the_same_bytes_is_answered_from_the_memo_as_the_full_path_answers() {
        let (d, runs) = dispatcher();
        let meta = RequestMeta::default();
        let params = r#"{"amount":5,"idempotency_key":"pay-1"}"#;
        let first = pay(&d, params, &meta).await;
        assert_eq!(first.1.as_deref(), Some("new"), "{first:?}");
        assert_eq!(d.memo.len(), 0, "a new key is not kept");
        let second = pay(&d, params, &meta).await;
        assert_eq!((d.memo.len(), d.memo.hits()), (1, 0), "the first duplicate is kept");
        let third = pay(&d, params, &meta).await;
        assert_eq!(d.memo.hits(), 1, "the second duplicate is answered from the memo");
        for again in [&second, &third] {
            assert_eq!(again.0, first.0, "the stored answer, byte for byte");
            assert_eq!((again.1.as_deref(), again.2.as_deref()), (Some("duplicate"), Some("pay-1")));
        }
        // The same bytes under another tenant: that tenant's own record, and its own memo.
        let other = RequestMeta { tenant: Arc::from("other"), ..RequestMeta::default() };
        assert_eq!(pay(&d, params, &other).await.1.as_deref(), Some("new"));
        assert_eq!(pay(&d, params, &other).await.1.as_deref(), Some("duplicate"));
        assert_eq!(d.memo.hits(), 1, "another tenant's retry is not answered from this one's entry");
        assert_eq!(pay(&d, params, &other).await.1.as_deref(), Some("duplicate"));
        assert_eq!(d.memo.hits(), 2);
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_transport_key_is_checked_on_every_retry() {
        let (d, runs) = dispatcher();
        let params = r#"{"amount":7}"#;
        let header =
            |key: &str| RequestMeta { idempotency_key: Some(Arc::from(key)), ..RequestMeta::default() };
        let first = pay(&d, params, &header("hdr-1")).await;
        for _ in 0..3 {
            let again = pay(&d, params, &header("hdr-1")).await;
            assert_eq!(again.0, first.0);
            assert_eq!((again.1.as_deref(), again.2.as_deref()), (Some("duplicate"), Some("hdr-1")));
        }
        assert_eq!(d.memo.hits(), 2, "the second and third duplicates");
        // The same bytes under another key: that key's own record, not the memo's key.
        let other = pay(&d, params, &header("hdr-2")).await;
        assert_eq!((other.1.as_deref(), other.2.as_deref()), (Some("new"), Some("hdr-2")));
        // A key the rules refuse, and none at all: refused as on the full path.
        let (body, ..) = pay(&d, params, &header("a b")).await;
        assert!(body.contains("-32602"), "{body}");
        // (In dev mode, the dispatcher's default, a command without a key runs undeduplicated.)
        let keyless = pay(&d, params, &RequestMeta::default()).await;
        assert_eq!((&keyless.1, &keyless.2), (&None, &None), "{keyless:?}");
        // The params' own key agreeing with the transport's: one request.
        let both = r#"{"amount":8,"idempotency_key":"hdr-3"}"#;
        for _ in 0..3 {
            pay(&d, both, &header("hdr-3")).await;
        }
        let (body, ..) = pay(&d, both, &header("hdr-4")).await;
        assert!(body.contains("-32602"), "the params' key and another transport key: {body}");
        assert_eq!(runs.load(Ordering::SeqCst), 4);
    }

    #[tokio::test]
    async fn what_the_memo_does_not_answer() {
        let (d, runs) = dispatcher();
        let meta = RequestMeta::default();
        let params = r#"{"amount":5,"idempotency_key":"pay-2"}"#;
        for _ in 0..3 {
            pay(&d, params, &meta).await;
        }
        let hits = d.memo.hits();
        assert_eq!(hits, 1);
        // A transport key that differs from the params' one: -32602, as on the full path.
        let header = RequestMeta { idempotency_key: Some(Arc::from("pay-3")), ..RequestMeta::default() };
        let (body, ..) = pay(&d, params, &header).await;
        assert!(body.contains("-32602"), "{body}");
        // A transport force retry of a success: refused.
        let force = RequestMeta { force_retry: true, ..RequestMeta::default() };
        let (body, ..) = pay(&d, params, &force).await;
        assert!(body.contains("-32003"), "{body}");
        // Other bytes, the same canonical params: the full path, a duplicate.
        let spaced = r#"{ "amount": 5, "idempotency_key": "pay-2" }"#;
        assert_eq!(pay(&d, spaced, &meta).await.1.as_deref(), Some("duplicate"));
        // The same key with other params: reused (-32002).
        let (body, ..) = pay(&d, r#"{"amount":6,"idempotency_key":"pay-2"}"#, &meta).await;
        assert!(body.contains("-32002"), "{body}");
        // Params the schema refuses are refused every time (never kept).
        let bad = r#"{"amount":"five","idempotency_key":"pay-4"}"#;
        for _ in 0..3 {
            let (body, ..) = pay(&d, bad, &meta).await;
            assert!(body.contains("-32602") && body.contains("/amount"), "{body}");
        }
        assert_eq!(d.memo.hits(), hits, "none of these was answered from the memo");
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    /// Two methods, `pay` and `refund`, as the memo sees them.
    fn methods() -> (Arc<Method>, Arc<Method>) {
        let (d, _) = dispatcher();
        let mut r = Registry::new();
        r.register("refund", MethodSpec::command(), typed(|_ctx, _p: serde_json::Value| async { Ok(1) }))
            .unwrap();
        let refund = Dispatcher::new(r, DispatcherConfig::default()).registry.get("refund").unwrap().clone();
        (d.registry.get("pay").unwrap().clone(), refund)
    }

    /// An external method that comes back under the same name with another schema (an MCP
    /// upstream's tool after `list_changed`) is checked against the new schema.
    #[tokio::test]
    async fn a_method_that_changed_is_not_answered_from_the_old_ones_entries() {
        let (d, runs) = dispatcher();
        // Each handler holds a token, to tell when the method's handler is gone.
        let external = |schema: serde_json::Value, token: Arc<()>| {
            let runs = runs.clone();
            let handler = typed(move |_ctx, _p: serde_json::Value| {
                let _held = &token;
                runs.fetch_add(1, Ordering::SeqCst);
                async { Ok::<_, oncerpc_protocol::RpcError>(1) }
            });
            d.external_method("ext", MethodSpec::command().params_schema(schema), Arc::new(handler)).unwrap()
        };
        let meta = RequestMeta::default();
        let params = RawValue::from_string(r#"{"n":1,"idempotency_key":"ext-1"}"#.into()).unwrap();
        let token = Arc::new(());
        let before_alive = Arc::downgrade(&token);
        let before = external(serde_json::json!({ "type": "object" }), token);
        for status in ["new", "duplicate", "duplicate"] {
            let (_, info, _) = d.call_external(&before, Some(&params), &meta).await;
            assert_eq!(info.map(|i| i.status.as_str()), Some(status));
        }
        assert_eq!(d.memo.hits(), 1);
        let after = external(
            serde_json::json!({ "type": "object", "properties": { "n": { "type": "string" } } }),
            Arc::new(()),
        );
        let (outcome, ..) = d.call_external(&after, Some(&params), &meta).await;
        let oncerpc_protocol::Outcome::Error(e) = outcome else { panic!("the new schema refuses n: 1") };
        assert!(e.code.code() == -32602 && e.message.contains("/n"), "{e:?}");
        assert_eq!(d.memo.hits(), 1, "the new method took the full path");
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        // The memo's entry for the old method does not keep its handler alive.
        assert_eq!(d.memo.len(), 1);
        drop(before);
        assert!(before_alive.upgrade().is_none(), "the old method's handler was dropped");
    }

    #[test]
    fn answers_only_the_same_method_and_the_same_bytes() {
        let memo = PreparedMemo::default();
        let (pay, refund) = methods();
        let (t, k, f) = (Arc::from("t1"), Arc::from("k-1"), Arc::from("f1"));
        memo.insert(&t, &pay, r#"{"a":1,"idempotency_key":"k-1"}"#, Some(&k), &f);
        let hit = memo.get("t1", &pay, r#"{"a":1,"idempotency_key":"k-1"}"#);
        assert_eq!(
            hit.map(|(k, f)| (k.as_deref().map(str::to_owned), f.to_string())),
            Some((Some("k-1".into()), "f1".into()))
        );
        assert!(memo.get("t1", &refund, r#"{"a":1,"idempotency_key":"k-1"}"#).is_none());
        assert!(memo.get("t1", &pay, r#"{"a": 1,"idempotency_key":"k-1"}"#).is_none());
        assert!(memo.get("t2", &pay, r#"{"a":1,"idempotency_key":"k-1"}"#).is_none());
    }

    #[test]
    fn stays_within_its_bounds() {
        let memo = PreparedMemo::default();
        let (m, _) = methods();
        let (t, f) = (Arc::from("t1"), Arc::from("f"));
        let long = format!(r#"{{"note":"{}","idempotency_key":"k-1"}}"#, "x".repeat(MAX_TEXT));
        memo.insert(&t, &m, &long, Some(&Arc::from("k-1")), &f);
        assert!(memo.get("t1", &m, &long).is_none(), "a text past MAX_TEXT is not kept");
        for i in 0..CAPACITY * 3 {
            let text = format!(r#"{{"idempotency_key":"k-{i}"}}"#);
            memo.insert(&t, &m, &text, Some(&Arc::from(format!("k-{i}"))), &f);
            assert!(memo.len() <= CAPACITY, "{} entries after {i} inserts", memo.len());
        }
        let last = format!(r#"{{"idempotency_key":"k-{}"}}"#, CAPACITY * 3 - 1);
        assert!(memo.get("t1", &m, &last).is_some(), "the newest entry is kept");
    }
}
