//! Commits and what serialises them: Lance's commit conflicts retried with backoff ([`retry`]), keyed
//! merge-inserts ([`merge_keyed`]), and the lock of one table for one write ([`TableLock`]) or of one
//! table's index maintenance within a process ([`LanceStore::maintenance_lock`]). The writes built on
//! them (inserts, updates, deletions and what follows a write) are in `write`; correctness across
//! processes and machines rests on the keyed merges, not on the lock (module docs of `store::lance`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::{RecordBatch, RecordBatchIterator};

use super::{LanceStore, backend};
use crate::store::StoreError;

/// Attempts for a write that meets a commit conflict or a concurrent table creation (backoff doubles
/// from 20 ms to 640 ms: about 4.5 s in all, enough to outlast a concurrent compaction or re-embedding).
pub(super) const WRITE_ATTEMPTS: usize = 12;

/// An exclusive lock on one table for one write: first an in-process async mutex, then `flock(2)` on
/// `<db>/<table>.lock` (other processes), both released when dropped. The flock is a no-op for
/// object-store URIs. Held only around one insert-if-absent, read-modify-write or fix upsert; and, taken
/// without waiting ([`Self::try_acquire`]), for a whole distillation run of one actor
/// (`<db>/distill-<sha256(actor)[..16]>.lock`).
///
/// The in-process mutex comes first so that at most one task per table and process waits in `flock`:
/// each waiter there occupies a thread of Tokio's blocking pool (512 threads), which Lance's own file
/// I/O needs too. Without it, 512 concurrent inserts filled the pool and the holder of the lock could
/// never finish its write (a deadlock seen with 600 concurrent archival inserts).
pub(super) struct TableLock {
    #[allow(dead_code, reason = "held for its descriptor: closing it releases the lock")]
    file: Option<std::fs::File>,
    #[allow(dead_code, reason = "held: dropping it lets the next task of this process in")]
    local: tokio::sync::OwnedMutexGuard<()>,
}

/// The in-process half of [`TableLock`], one mutex per lock file.
fn local_lock(key: String) -> Arc<tokio::sync::Mutex<()>> {
    static LOCKS: std::sync::OnceLock<std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> =
        std::sync::OnceLock::new();
    let mut locks = LOCKS.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    locks.entry(key).or_default().clone()
}

impl TableLock {
    pub(super) async fn acquire(db: &str, table: &str) -> Result<Self, StoreError> {
        let local = local_lock(format!("{db}\0{table}")).lock_owned().await;
        if db.contains("://") {
            return Ok(Self { file: None, local });
        }
        let path = std::path::Path::new(db).join(format!("{table}.lock"));
        let file = tokio::task::spawn_blocking(move || -> std::io::Result<std::fs::File> {
            use std::os::fd::AsRawFd;
            let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path)?;
            // SAFETY: flock on a descriptor we own; blocks this pool thread until the lock is ours.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(file)
        })
        .await
        .map_err(backend)?
        .map_err(|e| StoreError::Backend(format!("locking {table} for a write: {e}")))?;
        Ok(Self { file: Some(file), local })
    }

    /// [`Self::acquire`] without waiting: `None` while another task or process holds the lock.
    pub(super) fn try_acquire(db: &str, name: &str) -> Result<Option<Self>, StoreError> {
        let Ok(local) = local_lock(format!("{db}\0{name}")).try_lock_owned() else { return Ok(None) };
        if db.contains("://") {
            return Ok(Some(Self { file: None, local }));
        }
        let path = std::path::Path::new(db).join(format!("{name}.lock"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| StoreError::Backend(format!("cannot open the lock {}: {e}", path.display())))?;
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a descriptor we own; LOCK_NB never blocks.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::WouldBlock {
                return Ok(None);
            }
            return Err(StoreError::Backend(format!("cannot lock {}: {e}", path.display())));
        }
        Ok(Some(Self { file: Some(file), local }))
    }
}

impl LanceStore {
    /// Serialises index maintenance of table `name` within this process: the fold a write runs
    /// ([`Self::fold_into_fts_while_small`]) and upkeep ([`Self::optimize_table`],
    /// [`Self::fold_new_rows_into_indexes`]). Two of them at once conflict at commit; the loser is
    /// retried, and the index files its first attempt wrote are referenced by no version, so Lance's
    /// cleanup keeps them for 7 days as possibly in progress (`lance::dataset::cleanup`,
    /// `UNVERIFIED_THRESHOLD_DAYS`). Other processes on the same store are not serialised by it.
    pub(super) async fn maintenance_lock(&self, name: &str) -> tokio::sync::OwnedMutexGuard<()> {
        self.maintenance_mutex(name).lock_owned().await
    }

    /// [`Self::maintenance_lock`] if no maintenance of `name` holds it now; `None` otherwise.
    pub(super) fn try_maintenance_lock(&self, name: &str) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        self.maintenance_mutex(name).try_lock_owned().ok()
    }

    fn maintenance_mutex(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        local_lock(format!("{}\0{name}\0maintenance", self.path))
    }
}

/// What a merge-insert keyed on `id` does with each row of its batch.
#[derive(Clone, Copy)]
pub(super) enum Merge<'a> {
    /// Insert rows whose id is absent; leave the others.
    InsertAbsent,
    /// Replace rows whose id is present (those whose stored row meets the SQL condition over `target.`
    /// and `source.` columns, if one is given); insert nothing.
    Update(Option<&'a str>),
    /// Replace rows whose id is present, insert the others.
    Upsert,
}

/// Commits `batch` into `table` as one merge-insert keyed on `id`, retried on commit conflicts. Two
/// commits with an id in common conflict (the id is the table's key), so a retry sees the other
/// writer's row: an absent row another writer inserted first is skipped, and an update's condition is
/// evaluated on the row it left. Returns Lance's counts of inserted and updated rows.
pub(super) async fn merge_keyed(
    table: &lancedb::Table,
    batch: &RecordBatch,
    how: Merge<'_>,
) -> Result<lancedb::table::merge::MergeResult, StoreError> {
    retry(|| {
        let mut merge = table.merge_insert(&["id"]);
        match how {
            Merge::InsertAbsent => merge.when_not_matched_insert_all(),
            Merge::Update(condition) => merge.when_matched_update_all(condition.map(str::to_string)),
            Merge::Upsert => merge.when_matched_update_all(None).when_not_matched_insert_all(),
        };
        let reader = RecordBatchIterator::new(vec![Ok(batch.clone())], batch.schema());
        async move { merge.execute(Box::new(reader)).await }
    })
    .await
    .map_err(backend)
}

/// Runs a write, retrying on Lance commit conflicts (another process committed first).
pub(super) async fn retry<T, F, Fut>(mut op: F) -> lancedb::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = lancedb::Result<T>>,
{
    let mut attempt = 0;
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if attempt + 1 < WRITE_ATTEMPTS && is_conflict(&e) => {
                attempt += 1;
                tracing::debug!(attempt, "commit conflict, retrying: {e}");
                tokio::time::sleep(Duration::from_millis(10 * (1 << attempt.min(6)))).await;
            }
            Err(e) => return Err(e),
        }
    }
}

fn is_conflict(e: &lancedb::Error) -> bool {
    let text = e.to_string().to_lowercase();
    text.contains("conflict") || text.contains("retryable") || text.contains("concurrent")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::TableLock;

    /// More writers than Tokio has blocking threads, each needing a blocking thread while it holds the
    /// lock (as Lance's file I/O does): all of them must get through, none may starve the holder.
    #[test]
    fn lock_waiters_never_starve_the_holder_of_blocking_threads() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(4)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().to_str().unwrap().to_string();
        let done = runtime.block_on(async move {
            let writers = (0..32).map(|_| {
                let db = db.clone();
                tokio::spawn(async move {
                    let _lock = TableLock::acquire(&db, "archival").await.unwrap();
                    tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(1))).await.unwrap();
                })
            });
            let all = futures::future::join_all(writers);
            tokio::time::timeout(Duration::from_secs(30), all).await.map(|r| r.len())
        });
        assert_eq!(done, Ok(32), "the writers deadlocked");
    }
}
