//! The writer thread and its syncer: group commit, and each answer given as soon as what it
//! tells a client is durable.
//!
//! The writer owns the connection. It drains every queued operation into one `BEGIN
//! IMMEDIATE` transaction and commits it with `synchronous = NORMAL`: in WAL mode that writes
//! the transaction's frames to the `-wal` file (the OS page cache) and does not wait for the
//! disk. Then:
//!
//! * answers that tell nobody anything a power loss could take back go out at once: a claim
//!   that **acquired** the key (nobody has been told anything about it yet), a claim that
//!   found it **in progress** (the client is told "retry later"), a lease renewal, and any
//!   error (the transaction did not happen);
//! * every other answer (a stored outcome replayed, a completion, a released key, an event
//!   accepted, any read) goes to the syncer thread, which `fdatasync`s the `-wal` file and
//!   only then answers. One sync covers every frame written before it — every transaction
//!   of this process, and of any other process sharing the file, committed before the sync
//!   began — so one sync answers whole batches, while the writer goes on committing.
//!
//! Why this keeps SQLite's `synchronous = FULL` promise for everything a client was told
//! (docs/ARCHITECTURE.md, "The SQLite store's durability", works through each crash case): a
//! killed process (`kill -9`, a panic, OOM) loses nothing that was committed, synced or not,
//! because the frames are in the kernel's page cache; a power loss can lose the unsynced
//! tail of the WAL, which holds only claims and renewals whose answers told nobody anything
//! durable, and SQLite's WAL checksums roll such a torn tail back cleanly.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use oncerpc_core::store::{Claim, StoreError, now_ms};
use rusqlite::{Connection, TransactionBehavior, params};
use tokio::sync::oneshot;

use crate::ops::{Done, Group, Op, apply};

/// How the writer answers an operation.
pub(crate) type Reply = oneshot::Sender<Result<Done, StoreError>>;
/// Answers waiting for the next sync of the WAL.
type Waiting = Vec<(Reply, Result<Done, StoreError>)>;

/// Most operations folded into one transaction.
const MAX_GROUP: usize = 512;
/// How often expired records are deleted.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// Start the writer (owning `conn`) and its syncer (syncing `wal`, counting into `syncs`);
/// the queue operations are sent on.
pub(crate) fn start(
    conn: Connection,
    wal: PathBuf,
    syncs: Arc<AtomicU64>,
) -> std::io::Result<mpsc::Sender<(Op, Reply)>> {
    let (tx, rx) = mpsc::channel();
    let (waiting_tx, waiting_rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("oncerpc-sqlite-sync".into())
        .spawn(move || syncer(&wal, &waiting_rx, &syncs))?;
    std::thread::Builder::new()
        .name("oncerpc-sqlite".into())
        .spawn(move || writer(conn, &rx, &waiting_tx))?;
    Ok(tx)
}

/// Linux: the writer runs under `SCHED_BATCH`. Woken by a request's operation, it then
/// does not take the core from the request's thread at once, so on a core the two share,
/// that thread queues the rest of its requests' operations first and one transaction,
/// commit and sync serve them all (docs/BENCHMARKS.md: a third fewer transactions and
/// 60 % fewer context switches per new key). On an idle core it runs at once as before;
/// under load it keeps its fair share of CPU time, only not the right to preempt.
fn run_as_batch() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `sched_setscheduler` reads the one `sched_param` passed by reference for
        // the duration of the call; pid 0 is the calling thread. It keeps the thread's nice
        // value (the `thread-priority` crate sets one with the policy: docs/ARCHITECTURE.md).
        if unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) } != 0 {
            let error = std::io::Error::last_os_error();
            tracing::debug!(%error, "the SQLite writer keeps the default scheduling policy");
        }
    }
}

fn writer(mut conn: Connection, rx: &mpsc::Receiver<(Op, Reply)>, syncer: &mpsc::Sender<Waiting>) {
    run_as_batch();
    let mut last_sweep = Instant::now();
    while let Ok(first) = rx.recv() {
        let mut group = vec![first];
        drain(rx, &mut group);
        if group.len() == 1 {
            // Woken by one operation, often on the core of the request that sent it (a
            // woken thread may run at once there): let that core's other requests queue
            // theirs first, so that one transaction, one commit and one sync serve them all
            // instead of a thread switch each. Costs a system call when nothing else waits.
            std::thread::yield_now();
            drain(rx, &mut group);
        }
        let results = run_group(&mut conn, &group);
        let mut waiting = Vec::new();
        for ((op, reply), result) in group.into_iter().zip(results) {
            if answers_before_sync(&op, &result) {
                let _ = reply.send(result);
            } else {
                waiting.push((reply, result));
            }
        }
        // The syncer only stops once this thread has: it is there.
        if !waiting.is_empty() && syncer.send(waiting).is_err() {
            tracing::error!("the SQLite sync thread has stopped: answers dropped");
        }
        if last_sweep.elapsed() >= SWEEP_EVERY {
            last_sweep = Instant::now();
            match sweep(&mut conn) {
                Ok(n) if n > 0 => tracing::debug!(deleted = n, "expired idempotency records swept"),
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "sweeping expired records failed"),
            }
        }
    }
    tracing::debug!("SQLite writer thread stopped");
}

/// Add what is queued now to `group`, up to [`MAX_GROUP`].
fn drain(rx: &mpsc::Receiver<(Op, Reply)>, group: &mut Vec<(Op, Reply)>) {
    while group.len() < MAX_GROUP {
        match rx.try_recv() {
            Ok(op) => group.push(op),
            Err(_) => break,
        }
    }
}

/// Whether `op`'s answer tells its caller nothing a power loss could take back (module docs).
fn answers_before_sync(op: &Op, result: &Result<Done, StoreError>) -> bool {
    match (op, result) {
        (_, Err(_)) | (Op::Renew { .. }, _) => true,
        (Op::Claim { .. }, Ok(Done::Claim(claim))) => {
            matches!(claim, Claim::Acquired { .. } | Claim::InProgress { .. })
        }
        _ => false,
    }
}

/// Sync the WAL, then answer; batches that queued up during one sync share the next.
fn syncer(wal: &std::path::Path, rx: &mpsc::Receiver<Waiting>, syncs: &AtomicU64) {
    let mut file: Option<File> = None;
    while let Ok(mut batch) = rx.recv() {
        while let Ok(more) = rx.try_recv() {
            batch.extend(more);
        }
        let synced = sync(wal, &mut file);
        match &synced {
            Ok(()) => {
                syncs.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => tracing::error!(error = %e, wal = %wal.display(), "syncing the SQLite WAL failed"),
        }
        for (reply, result) in batch {
            let result = match &synced {
                Ok(()) => result,
                Err(e) => Err(StoreError::new(format!("sqlite: syncing the WAL: {e}"))),
            };
            let _ = reply.send(result);
        }
    }
    tracing::debug!("SQLite sync thread stopped");
}

/// `fdatasync` of the `-wal` file, opened once (again after a failure). Durability is per
/// file, not per descriptor: this syncs what the writer's connection wrote.
fn sync(wal: &std::path::Path, file: &mut Option<File>) -> std::io::Result<()> {
    let f = match file {
        Some(f) => f,
        None => file.insert(File::open(wal)?),
    };
    let synced = f.sync_data();
    if synced.is_err() {
        *file = None;
    }
    synced
}

/// One transaction for the whole group; nobody is answered before it commits.
fn run_group(conn: &mut Connection, group: &[(Op, Reply)]) -> Vec<Result<Done, StoreError>> {
    let fail_all = |e: rusqlite::Error| -> Vec<Result<Done, StoreError>> {
        tracing::error!(error = %e, "SQLite transaction failed");
        group.iter().map(|_| Err(StoreError::new(format!("sqlite: {e}")))).collect()
    };
    let tx = match conn.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => return fail_all(e),
    };
    // Only now: `BEGIN IMMEDIATE` may have waited (up to the busy timeout) for another
    // process's write lock, and a lease granted from an earlier clock would end early.
    let now = now_ms();
    let mut shared = Group::default();
    let results: Vec<Result<Done, StoreError>> = group
        .iter()
        .map(|(op, _)| apply(&tx, &mut shared, op, now).map_err(|e| StoreError::new(format!("sqlite: {e}"))))
        .collect();
    let saved = shared.tokens.save(&tx);
    // The group's statements go back to the cache before the transaction ends.
    drop(shared);
    if let Err(e) = saved {
        return fail_all(e);
    }
    match tx.commit() {
        Ok(()) => results,
        Err(e) => fail_all(e),
    }
}

/// Delete expired records. A processing record expires no earlier than its lease (its
/// `expires_at` is always past `lease_until`), so a live execution's record is never swept.
fn sweep(conn: &mut Connection) -> rusqlite::Result<usize> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let now = now_ms() as i64;
    let mut n = tx.execute("DELETE FROM idempotency_records WHERE expires_at <= ?1", params![now])?;
    n += tx.execute("DELETE FROM events WHERE expires_at <= ?1", params![now])?;
    tx.commit()?;
    Ok(n)
}
