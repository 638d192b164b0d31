//! # oncerpc-store-sqlite
//!
//! The embedded default idempotency store: one SQLite file in WAL mode.
//!
//! * **Never blocks the async runtime**: one dedicated OS thread owns the connection; async
//!   callers send it operations over a channel and await a oneshot reply.
//! * **Group commit**: the thread drains every queued operation into one `BEGIN IMMEDIATE`
//!   transaction and commits once. Under load many operations share a commit; alone, an
//!   operation commits by itself. On Linux the writer is a `SCHED_BATCH` thread: woken, it
//!   lets the thread that woke it queue more before it takes a shared core. The operations'
//!   clock (`now`) is read once the transaction holds the write lock, so a wait for another
//!   process's lock never shortens a lease.
//! * **Durable against `kill -9` and power loss for everything a client is told**: nothing
//!   is answered before its transaction committed, and every answer that tells a client
//!   something a power loss could take back (a stored outcome, a completion, an accepted
//!   event) waits for an `fdatasync` of the WAL, shared by every answer waiting then. A claim
//!   that acquired a key or found it in progress tells nobody anything durable: it is
//!   answered at commit, without waiting for the disk (see `writer.rs` and
//!   docs/ARCHITECTURE.md).
//! * **Several processes may share a file**: `BEGIN IMMEDIATE` takes SQLite's write lock, so
//!   a claim's read-modify-write is atomic across processes too (busy timeout 5 s).
//! * **Fencing tokens** come from a one-row counter table (`token_counter`), bumped in the
//!   claim's transaction: they grow strictly for every key, also after its record was
//!   released or swept.
//! * **Take-over and renew**: an expired lease is taken over in two steps (the claim records
//!   an unconfirmed take-over next to the owner; `renew` with its token confirms it), and the
//!   live owner's `renew` extends its lease (the rules are `oncerpc_core::store`'s).
//! * Embedded migrations keyed on `PRAGMA user_version`; expired records are swept by the
//!   writer thread once a minute (a processing record never expires before its lease).
//!
//! A command answered from the file by the next process (here: the next dispatcher):
//!
//! ```
//! use std::{sync::Arc, time::Duration};
//! use oncerpc_core::{Context, Dispatcher, DispatcherConfig, MethodSpec, Registry, RequestMeta, typed};
//! use oncerpc_core::protocol::RpcError;
//! use oncerpc_store_sqlite::SqliteStore;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let dir = std::env::temp_dir().join(format!("oncerpc-sqlite-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir).unwrap();
//! let call = br#"{"jsonrpc":"2.0","method":"ship","params":{"order":7,"idempotency_key":"ship-7"},"id":1}"#;
//! for run in 1..=2 {
//!     let mut registry = Registry::new();
//!     let ship = typed(move |_: Context, _order: serde_json::Value| async move { Ok::<_, RpcError>(run) });
//!     registry.register("ship", MethodSpec::command(), ship).unwrap();
//!     let store = Arc::new(SqliteStore::open(dir.join("oncerpc.db")).unwrap());
//!     let dispatcher = Dispatcher::with_store(registry, DispatcherConfig::default(), store);
//!     let reply = dispatcher.handle(call, &RequestMeta::default()).await;
//!     // Both runs answer the first run's outcome: it shipped once.
//!     assert_eq!(reply.body.unwrap(), br#"{"jsonrpc":"2.0","result":1,"id":1}"#);
//!     dispatcher.shutdown(Duration::from_secs(5)).await;
//! }
//! std::fs::remove_dir_all(&dir).unwrap();
//! # });
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use oncerpc_core::BoxFuture;
use oncerpc_core::store::{
    Claim, ClaimRequest, Event, EventFilter, Record, RecordKey, Store, StoreError, StoredOutcome,
    list_cursor, parse_list_cursor, parse_pending_cursor, pending_cursor,
};
use tokio::sync::oneshot;

mod ops;
mod schema;
mod writer;

use ops::{Done, Op};
use writer::Reply;

/// A SQLite-backed [`Store`].
pub struct SqliteStore {
    tx: mpsc::Sender<(Op, Reply)>,
    path: PathBuf,
    syncs: Arc<AtomicU64>,
}

impl SqliteStore {
    /// Open (creating if needed) the database at `path` and start its writer thread.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref().to_path_buf();
        let conn = schema::open_connection(&path)
            .map_err(|e| StoreError::new(format!("{}: {e}", path.display())))?;
        let syncs = Arc::new(AtomicU64::new(0));
        let wal = PathBuf::from(format!("{}-wal", path.display()));
        let tx = writer::start(conn, wal, syncs.clone())
            .map_err(|e| StoreError::new(format!("cannot start the SQLite writer thread: {e}")))?;
        Ok(SqliteStore { tx, path, syncs })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many times the WAL has been synced to disk so far: answers that waited for the
    /// disk share a sync, and answers that need none (a claim acquired) never cause one.
    pub fn wal_syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// Run `op` on the writer thread; `unpack` takes the answer out of its reply.
    async fn call<T>(&self, op: Op, unpack: fn(Done) -> Option<T>) -> Result<T, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx.send((op, reply)).map_err(|_| StoreError::new("the SQLite writer thread has stopped"))?;
        let done =
            rx.await.map_err(|_| StoreError::new("the SQLite writer thread dropped the request"))??;
        unpack(done).ok_or_else(|| StoreError::new("unexpected reply from the SQLite writer thread"))
    }
}

impl Store for SqliteStore {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> BoxFuture<'a, Result<Claim, StoreError>> {
        let op = Op::Claim {
            key: req.key.clone(),
            fingerprint: req.fingerprint.to_owned(),
            force_retry: req.force_retry,
            lease: req.lease,
            ttl: req.ttl,
        };
        Box::pin(self.call(op, Done::claim))
    }

    fn renew<'a>(
        &'a self,
        key: &'a RecordKey,
        token: u64,
        lease: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.call(Op::Renew { key: key.clone(), token, lease }, Done::bool))
    }

    fn put_step<'a>(
        &'a self,
        key: &'a RecordKey,
        token: u64,
        step: u32,
        output: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let op = Op::PutStep { key: key.clone(), token, step, output: output.to_owned(), lease };
        Box::pin(self.call(op, Done::bool))
    }

    fn complete<'a>(
        &'a self,
        key: &'a RecordKey,
        token: u64,
        outcome: &'a StoredOutcome,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let op = Op::Complete { key: key.clone(), token, outcome: outcome.clone(), ttl };
        Box::pin(self.call(op, Done::bool))
    }

    fn release<'a>(&'a self, key: &'a RecordKey, token: u64) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.call(Op::Release { key: key.clone(), token }, Done::bool))
    }

    fn get<'a>(&'a self, key: &'a RecordKey) -> BoxFuture<'a, Result<Option<Record>, StoreError>> {
        Box::pin(self.call(Op::Get { key: key.clone() }, Done::record))
    }

    fn put_event<'a>(&'a self, event: &'a Event) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.call(Op::PutEvent(Box::new(event.clone())), Done::bool))
    }

    fn get_event<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Option<Event>, StoreError>> {
        Box::pin(async move { Ok(self.call(Op::GetEvent(id.to_owned()), Done::events).await?.pop()) })
    }

    fn finish_event<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        outcome: &'a StoredOutcome,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let op = Op::FinishEvent { id: id.to_owned(), token, outcome: outcome.clone() };
        Box::pin(self.call(op, Done::bool))
    }

    fn put_event_steps<'a>(
        &'a self,
        id: &'a str,
        token: u64,
        steps: &'a str,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let op = Op::PutEventSteps { id: id.to_owned(), token, steps: steps.to_owned() };
        Box::pin(self.call(op, Done::bool))
    }

    fn restart_event<'a>(&'a self, id: &'a str, token: u64) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(self.call(Op::RestartEvent { id: id.to_owned(), token }, Done::bool))
    }

    fn pending_events<'a>(
        &'a self,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<(Vec<Event>, Option<String>), StoreError>> {
        // A malformed cursor starts over (the contract of `parse_pending_cursor`).
        let after = cursor.and_then(parse_pending_cursor).map(|(at, id)| (at, id.to_owned()));
        Box::pin(async move {
            let page = self.call(Op::PendingEvents { after, limit }, Done::events).await?;
            let next = if page.len() == limit { page.last().map(pending_cursor) } else { None };
            Ok((page, next))
        })
    }

    fn list_events<'a>(
        &'a self,
        tenant: &'a str,
        filter: &'a EventFilter,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<(Vec<Event>, Option<String>), StoreError>> {
        let after = cursor.and_then(parse_list_cursor).map(|(at, id)| (at, id.to_owned()));
        let op = Op::ListEvents { tenant: tenant.to_owned(), filter: filter.clone(), after, limit };
        Box::pin(async move {
            // One more than a page is read: whether there is a next page.
            let mut page = self.call(op, Done::events).await?;
            let more = page.len() > limit;
            page.truncate(limit);
            let next = if more { page.last().map(list_cursor) } else { None };
            Ok((page, next))
        })
    }

    fn name(&self) -> &'static str {
        "sqlite"
    }
}

#[cfg(test)]
mod tests {
    use oncerpc_core::store::{AcquireKind, EventStatus, RecordState, TakeOver, now_ms};
    use rusqlite::Connection;

    use super::*;

    fn temp_db(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("oncerpc-sqlite-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.db"));
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
        path
    }

    async fn claim(store: &SqliteStore, key: &RecordKey, lease: Duration) -> Claim {
        let req =
            ClaimRequest { key, fingerprint: "fp", force_retry: false, lease, ttl: Duration::from_secs(60) };
        store.claim(req).await.unwrap()
    }

    /// A database made before the token counter: its tokens keep growing, its events read
    /// with token 0.
    #[tokio::test]
    async fn upgraded_database_keeps_tokens_growing() {
        let path = temp_db("upgrade");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(schema::MIGRATIONS[0]).unwrap();
            conn.execute_batch(schema::MIGRATIONS[1]).unwrap();
            conn.pragma_update(None, "user_version", 2).unwrap();
            conn.execute_batch(
                "INSERT INTO idempotency_records VALUES ('t', 'm', 'old', 'fp', 1, '1', 41, 0, 1, 1);
                 INSERT INTO events VALUES ('evt_old', 't', 'm', 'old', 'fp', NULL, NULL, '[]', 0, NULL,
                   5, 5, 9223372036854775807);",
            )
            .unwrap();
        }
        let store = SqliteStore::open(&path).unwrap();
        // The old record has expired: a fresh claim, with a token past every old one.
        let old = RecordKey::new("t", "m", "old");
        assert_eq!(
            claim(&store, &old, Duration::from_secs(60)).await,
            Claim::Acquired { token: 42, kind: AcquireKind::Fresh }
        );
        let other = RecordKey::new("t", "m", "other");
        assert_eq!(
            claim(&store, &other, Duration::from_secs(60)).await,
            Claim::Acquired { token: 43, kind: AcquireKind::Fresh }
        );
        let ev = store.get_event("evt_old").await.unwrap().expect("old event");
        assert_eq!((ev.token, ev.status), (0, EventStatus::Processing));
        assert!(store.restart_event("evt_old", 42).await.unwrap());
        let (pending, next) = store.pending_events(None, 10).await.unwrap();
        assert_eq!((pending.len(), pending[0].token, next), (1, 42, None));
    }

    /// Migration 8 re-keys the records by (key, method, tenant): every record of a version-7
    /// file reads back as it was, column for column, and the keys behave as before.
    #[tokio::test]
    async fn rekeyed_records_keep_every_column() {
        let path = temp_db("rekey");
        let far = 9_000_000_000_000_i64;
        {
            let conn = Connection::open(&path).unwrap();
            for sql in &schema::MIGRATIONS[..7] {
                conn.execute_batch(sql).unwrap();
            }
            conn.pragma_update(None, "user_version", 7).unwrap();
            conn.execute(
                "INSERT INTO idempotency_records (tenant, method, key, fingerprint, state, outcome, token,
                   lease_until, expires_at, updated_at, takeover_token, takeover_until, steps)
                 VALUES ('acme', 'pay', 'done', 'fp', 1, '{\"ok\":1}', 7, 0, ?1, 5, NULL, NULL, NULL),
                        ('acme', 'pay', 'busy', 'fp', 0, NULL, 8, ?1, ?1, 5, 9, ?1, '{\"0\":\"\\\"a\\\"\"}'),
                        ('', 'pay', 'done', 'other', 2, '{\"code\":1}', 6, 0, ?1, 5, NULL, NULL, NULL)",
                [far],
            )
            .unwrap();
            conn.execute("UPDATE token_counter SET last = 9", []).unwrap();
        }
        let store = SqliteStore::open(&path).unwrap();
        let get = |t: &'static str, k: &'static str| {
            let store = &store;
            async move { store.get(&RecordKey::new(t, "pay", k)).await.unwrap().expect("kept") }
        };
        let done = get("acme", "done").await;
        assert_eq!(
            (done.fingerprint.as_str(), done.state, done.token, done.expires_at_ms),
            ("fp", RecordState::Done(StoredOutcome::Succeeded("{\"ok\":1}".into())), 7, far as u64)
        );
        let busy = get("acme", "busy").await;
        assert_eq!(busy.state, RecordState::Processing { lease_until_ms: far as u64 });
        assert_eq!(busy.takeover, Some(TakeOver { token: 9, until_ms: far as u64 }));
        assert_eq!(busy.steps.len(), 1);
        let other = get("", "done").await;
        assert_eq!(
            (other.fingerprint.as_str(), other.state),
            ("other", RecordState::Done(StoredOutcome::Failed("{\"code\":1}".into())))
        );
        // The same key under two tenants stays two records; a duplicate is answered, a new
        // key draws a token past the old ones.
        let dup = ClaimRequest {
            key: &RecordKey::new("acme", "pay", "done"),
            fingerprint: "fp",
            force_retry: false,
            lease: Duration::from_secs(60),
            ttl: Duration::from_secs(60),
        };
        assert!(matches!(store.claim(dup).await.unwrap(), Claim::Done(StoredOutcome::Succeeded(_), _)));
        assert_eq!(
            claim(&store, &RecordKey::new("acme", "pay", "new"), Duration::from_secs(60)).await,
            Claim::Acquired { token: 10, kind: AcquireKind::Fresh }
        );
        drop(store);
        let conn = Connection::open(&path).unwrap();
        let key: Vec<String> = conn
            .prepare("SELECT name FROM pragma_index_info((SELECT name FROM pragma_index_list('idempotency_records') WHERE origin = 'pk'))")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(key, ["key", "method", "tenant"]);
        let indexes: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE name = 'idempotency_records_expires'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(indexes, 1, "the expiry index is there again");
    }

    /// `kill -9` in the middle of migration 8 (its re-keyed copy half written to the WAL)
    /// loses no record: the migration is one transaction, so the file reads as version 7
    /// until a later start migrates it whole. The test runs itself again as the child that
    /// migrates, and kills it once the WAL grows.
    #[test]
    fn a_migration_killed_midway_loses_no_record() {
        const CHILD: &str = "ONCERPC_TEST_MIGRATE_CHILD";
        const RECORDS: i64 = 100_000;
        if let Some(path) = std::env::var_os(CHILD) {
            drop(SqliteStore::open(&path).unwrap());
            std::fs::write(format!("{}.migrated", path.to_string_lossy()), "").unwrap();
            return;
        }
        let path = temp_db("killed-migration");
        let marker = PathBuf::from(format!("{}.migrated", path.display()));
        let _ = std::fs::remove_file(&marker);
        let count = |conn: &Connection| -> (i64, i64) {
            let n = conn.query_row("SELECT count(*) FROM idempotency_records", [], |r| r.get(0)).unwrap();
            (n, conn.pragma_query_value(None, "user_version", |r| r.get(0)).unwrap())
        };
        {
            let conn = Connection::open(&path).unwrap();
            conn.pragma_update(None, "journal_mode", "WAL").unwrap();
            for sql in &schema::MIGRATIONS[..7] {
                conn.execute_batch(sql).unwrap();
            }
            conn.pragma_update(None, "user_version", 7).unwrap();
            conn.execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
                 INSERT INTO idempotency_records (tenant, method, key, fingerprint, state, outcome, token,
                   lease_until, expires_at, updated_at)
                 SELECT 't', 'm', 'key-' || i, 'fp', 1, '{\"n\":' || i || '}', i, 0, 9000000000000, 0 FROM n",
                [RECORDS],
            )
            .unwrap();
            conn.pragma_update(None, "wal_checkpoint", "TRUNCATE").unwrap();
        }
        let wal = PathBuf::from(format!("{}-wal", path.display()));
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "tests::a_migration_killed_midway_loses_no_record", "--test-threads=1"])
            .env(CHILD, &path)
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let midway = loop {
            let grown = std::fs::metadata(&wal).map(|m| m.len() > 1 << 20).unwrap_or(false);
            if grown || child.try_wait().unwrap().is_some() {
                break grown && !marker.exists();
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(midway, "the child migrated before it could be killed midway: give it more records");
        assert!(!marker.exists(), "the child finished its migration");
        assert_eq!(count(&Connection::open(&path).unwrap()), (RECORDS, 7), "rolled back whole");
        drop(SqliteStore::open(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        assert_eq!(
            count(&conn),
            (RECORDS, schema::MIGRATIONS.len() as i64),
            "migrated whole at the next start"
        );
        let outcome: String = conn
            .query_row("SELECT outcome FROM idempotency_records WHERE key = 'key-4242'", [], |r| r.get(0))
            .unwrap();
        assert_eq!(outcome, "{\"n\":4242}");
    }

    /// The writer thread runs under `SCHED_BATCH` (policy 3 in `/proc`) at the nice value of
    /// its syncer, which keeps the default policy.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_writer_runs_as_a_batch_thread() {
        let store = SqliteStore::open(temp_db("batch-policy")).unwrap();
        assert!(store.get(&RecordKey::new("t", "m", "k")).await.unwrap().is_none());
        let mut threads = Vec::new();
        for task in std::fs::read_dir("/proc/self/task").unwrap() {
            let dir = task.unwrap().path();
            let name = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
            let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
            // Fields 19 (nice) and 41 (policy), counted after the parenthesised name (field 2).
            let fields: Vec<String> = stat
                .rsplit_once(')')
                .map_or_else(Vec::new, |(_, rest)| rest.split_whitespace().map(str::to_owned).collect());
            let field = |n: usize| fields.get(n - 3).cloned().unwrap_or_default();
            threads.push((name.trim().to_owned(), field(19), field(41)));
        }
        let of = |thread: &str| -> Vec<(String, String)> {
            threads
                .iter()
                .filter(|(n, ..)| n == thread)
                .map(|(_, nice, p)| (nice.clone(), p.clone()))
                .collect()
        };
        let (writers, syncers) = (of("oncerpc-sqlite"), of("oncerpc-sqlite-"));
        assert!(!writers.is_empty() && !syncers.is_empty(), "no writer or syncer among {threads:?}");
        let nice = &syncers[0].0;
        assert!(writers.iter().all(|(n, p)| n == nice && p == "3"), "{threads:?}");
        assert!(syncers.iter().all(|(n, p)| n == nice && p == "0"), "{threads:?}");
    }

    /// A transaction draws its tokens from the counter it read once and writes the last one
    /// back before it commits: two stores on one file (as two processes would be), each
    /// grouping many claims per transaction, never hand out one token twice, and a store
    /// opened afterwards goes on above them all.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stores_sharing_a_file_never_draw_one_token_twice() {
        let path = temp_db("shared-tokens");
        let (a, b) =
            (Arc::new(SqliteStore::open(&path).unwrap()), Arc::new(SqliteStore::open(&path).unwrap()));
        let mut claims = tokio::task::JoinSet::new();
        for i in 0..200 {
            let store = if i % 2 == 0 { a.clone() } else { b.clone() };
            claims.spawn(async move {
                let key = RecordKey::new("t", "m", format!("k{i}"));
                match claim(&store, &key, Duration::from_secs(60)).await {
                    Claim::Acquired { token, kind: AcquireKind::Fresh } => token,
                    other => panic!("a new key must be acquired, got {other:?}"),
                }
            });
        }
        let mut tokens = claims.join_all().await;
        tokens.sort_unstable();
        tokens.dedup();
        assert_eq!(tokens.len(), 200, "a token was drawn twice");
        let highest = *tokens.last().unwrap();
        drop((a, b));
        let later = SqliteStore::open(&path).unwrap();
        match claim(&later, &RecordKey::new("t", "m", "later"), Duration::from_secs(60)).await {
            Claim::Acquired { token, .. } => assert!(token > highest, "{token} after {highest}"),
            other => panic!("{other:?}"),
        }
    }

    /// Issue: the clock was read before `BEGIN IMMEDIATE` waited for another process's write
    /// lock, so the lease granted after the wait ended early by the length of the wait.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lease_starts_after_the_write_lock_wait() {
        let path = temp_db("lock-wait");
        let store = Arc::new(SqliteStore::open(&path).unwrap());
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let key = RecordKey::new("t", "m", "k");
        let lease = Duration::from_secs(2);
        let task = tokio::spawn({
            let (store, key) = (store.clone(), key.clone());
            async move { claim(&store, &key, lease).await }
        });
        tokio::time::sleep(Duration::from_millis(700)).await;
        let unlocked_at = now_ms();
        other.execute_batch("COMMIT").unwrap();
        assert!(matches!(task.await.unwrap(), Claim::Acquired { kind: AcquireKind::Fresh, .. }));
        match store.get(&key).await.unwrap().map(|r| r.state) {
            Some(RecordState::Processing { lease_until_ms }) => assert!(
                lease_until_ms >= unlocked_at + 2000,
                "lease ends at {lease_until_ms}, before {} (lock released + lease)",
                unlocked_at + 2000
            ),
            other => panic!("expected a processing record, got {other:?}"),
        }
    }

    /// A claim that acquires a key, or finds it in progress, tells nobody anything a power
    /// loss could take back: it is answered without a sync. A completion, the outcome it
    /// stored replayed, and a read each wait for one.
    #[tokio::test]
    async fn only_answers_that_tell_something_durable_wait_for_a_sync() {
        let store = SqliteStore::open(temp_db("sync-policy")).unwrap();
        let before = store.wal_syncs();
        let lease = Duration::from_secs(60);
        let mut tokens = Vec::new();
        for i in 0..20 {
            match claim(&store, &RecordKey::new("t", "m", format!("k{i}").as_str()), lease).await {
                Claim::Acquired { token, kind: AcquireKind::Fresh } => tokens.push(token),
                other => panic!("{other:?}"),
            }
        }
        let k0 = RecordKey::new("t", "m", "k0");
        assert!(matches!(claim(&store, &k0, lease).await, Claim::InProgress { .. }));
        assert_eq!(store.wal_syncs(), before, "20 claims acquired and one in progress: no sync");

        let outcome = StoredOutcome::Succeeded("7".into());
        assert!(store.complete(&k0, tokens[0], &outcome, Duration::from_secs(60)).await.unwrap());
        let after_complete = store.wal_syncs();
        assert!(after_complete > before, "a completion is answered after a sync");
        assert!(matches!(claim(&store, &k0, lease).await, Claim::Done(StoredOutcome::Succeeded(_), _)));
        assert!(store.wal_syncs() > after_complete, "a replayed outcome is answered after a sync");
        let read = store.wal_syncs();
        assert!(store.get(&k0).await.unwrap().is_some());
        assert!(store.wal_syncs() > read, "a read is answered after a sync");
    }
}
