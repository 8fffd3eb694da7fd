//! Commits and what serialises them: Lance's commit conflicts retried with backoff ([`retry`]), keyed
//! merge-inserts ([`merge_keyed`]), and the lock of one table for one write ([`TableLock`]) or of one
//! table's index maintenance within a process ([`StoreTable::maintenance_lock`]). The writes built on
//! them (inserts, updates, deletions and what follows a write) are in `write`; correctness across
//! processes and machines rests on the keyed merges, not on the lock (module docs of `store::lance`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arrow_array::RecordBatch;

use super::failure::is_conflict;
use super::handle::{StoreTable, backend};
use crate::store::{Location, StoreError};

/// Attempts for a write that meets a commit conflict or a concurrent table creation (waits double from
/// 10–20 ms to 320–640 ms: 3.5–7 s in all, enough to outlast a concurrent compaction or re-embedding).
pub(super) const WRITE_ATTEMPTS: usize = 16;

/// An exclusive lock on one table for one write: first an in-process async mutex, then `flock(2)` on
/// `<db>/<table>.lock` (other processes; std's `File::lock`, which is `flock(2)` on Unix and
/// `LockFileEx` on Windows), both released when dropped. The flock is a no-op for
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
    pub(super) async fn acquire(db: &Location, table: &str) -> Result<Self, StoreError> {
        let local = local_lock(format!("{}\0{table}", db.as_str())).lock_owned().await;
        let Location::Local(dir) = db else { return Ok(Self { file: None, local }) };
        let path = std::path::Path::new(dir).join(format!("{table}.lock"));
        let file = tokio::task::spawn_blocking(move || -> std::io::Result<std::fs::File> {
            let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&path)?;
            // blocks this pool thread until the lock is ours
            file.lock()?;
            Ok(file)
        })
        .await
        .map_err(backend)?
        .map_err(|e| StoreError::Backend(format!("locking {table} for a write: {e}")))?;
        Ok(Self { file: Some(file), local })
    }

    /// [`Self::acquire`] without waiting: `None` while another task or process holds the lock.
    pub(super) fn try_acquire(db: &Location, name: &str) -> Result<Option<Self>, StoreError> {
        let Ok(local) = local_lock(format!("{}\0{name}", db.as_str())).try_lock_owned() else { return Ok(None) };
        let Location::Local(dir) = db else { return Ok(Some(Self { file: None, local })) };
        let path = std::path::Path::new(dir).join(format!("{name}.lock"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| StoreError::Backend(format!("cannot open the lock {}: {e}", path.display())))?;
        match file.try_lock() {
            Ok(()) => Ok(Some(Self { file: Some(file), local })),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => {
                Err(StoreError::Backend(format!("cannot lock {}: {e}", path.display())))
            }
        }
    }
}

impl StoreTable<'_> {
    /// Serialises index maintenance of this table within this process: the fold a write runs
    /// ([`Self::fold_into_fts_while_small`]) and upkeep ([`Self::optimize_table`],
    /// [`Self::fold_new_rows_into_indexes`]). Two of them at once conflict at commit; the loser is
    /// retried, and the index files its first attempt wrote are referenced by no version, so Lance's
    /// cleanup keeps them for 7 days as possibly in progress (`lance::dataset::cleanup`,
    /// `UNVERIFIED_THRESHOLD_DAYS`). Other processes on the same store are not serialised by it.
    pub(super) async fn maintenance_lock(self) -> tokio::sync::OwnedMutexGuard<()> {
        self.maintenance_mutex().lock_owned().await
    }

    /// [`Self::maintenance_lock`] if no maintenance of this table holds it now; `None` otherwise.
    pub(super) fn try_maintenance_lock(self) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        self.maintenance_mutex().try_lock_owned().ok()
    }

    fn maintenance_mutex(self) -> Arc<tokio::sync::Mutex<()>> {
        local_lock(format!("{}\0{}\0maintenance", self.store.location.as_str(), self.id))
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
///
/// Lance's merge-insert, not lancedb's, so that a lost race for the manifest costs a few ms: lancedb
/// leaves Lance's own retries on, and Lance sleeps between them in random slots of 1.1 × the lost
/// attempt's duration, 0–3 slots, then 0–7, 0–15 (`lance_core::utils::backoff::SlotBackoff`). Writers
/// that share a bucket take versions from each other often, and while a process slept there its other
/// writes waited behind the table's lock. Here the merge's transaction is committed again at once,
/// rebased on what was committed meanwhile, up to [`LOST_RACES`] times; a conflict on the rows themselves
/// (the same id written by another writer) runs the whole merge again ([`retry`]).
pub(super) async fn merge_keyed(
    table: &lancedb::Table,
    batch: &RecordBatch,
    how: Merge<'_>,
) -> Result<lance::dataset::MergeStats, StoreError> {
    use lance::dataset::{MergeInsertBuilder, WhenMatched, WhenNotMatched};
    let Some(handle) = table.dataset() else {
        return Err(StoreError::Backend(format!("table {} is not a local Lance table", table.name())));
    };
    retry(table, || async {
        let dataset = handle.get().await?;
        let mut merge = MergeInsertBuilder::try_new(dataset.clone(), vec!["id".to_string()])?;
        let (matched, not_matched) = match how {
            Merge::InsertAbsent => (WhenMatched::DoNothing, WhenNotMatched::InsertAll),
            Merge::Update(None) => (WhenMatched::UpdateAll, WhenNotMatched::DoNothing),
            Merge::Update(Some(condition)) => (WhenMatched::update_if(&dataset, condition)?, WhenNotMatched::DoNothing),
            Merge::Upsert => (WhenMatched::UpdateAll, WhenNotMatched::InsertAll),
        };
        let job = merge.when_matched(matched).when_not_matched(not_matched).try_build()?;
        let merged = job.execute_uncommitted_batches(vec![batch.clone()]).await?;
        let committed = commit_rebased(table, &dataset, merged.transaction, merged.affected_rows).await?;
        handle.update(committed);
        Ok(merged.stats)
    })
    .await
    .map_err(backend)
}

/// Deletes the rows of `table` that match the SQL `filter`, retried on commit conflicts like
/// [`merge_keyed`]; returns how many were deleted. When none matches, nothing is committed: no new
/// version, no commit to race for (lancedb's `Table::delete` commits an empty deletion, one more version
/// and one more round of manifest writes on a bucket, each racing the other writers).
pub(super) async fn delete_where(table: &lancedb::Table, filter: &str) -> Result<u64, StoreError> {
    use lance::dataset::DeleteBuilder;
    let Some(handle) = table.dataset() else {
        return Err(StoreError::Backend(format!("table {} is not a local Lance table", table.name())));
    };
    retry(table, || async {
        let dataset = handle.get().await?;
        let staged = DeleteBuilder::new(dataset.clone(), filter).execute_uncommitted().await?;
        if staged.num_deleted_rows == 0 {
            return Ok(0);
        }
        let committed = commit_rebased(table, &dataset, staged.transaction, staged.affected_rows).await?;
        handle.update(committed);
        Ok(staged.num_deleted_rows)
    })
    .await
    .map_err(backend)
}

/// Commits `transaction`, built on `dataset`, with one attempt inside Lance (no slot backoff); when
/// another writer took the version meanwhile (`lance::Error::CommitConflict`) the same transaction is
/// committed again at once, rebased on what was committed since, up to [`LOST_RACES`] times in a row.
/// A conflict on the rows themselves comes back as Lance's retryable conflict, for [`retry`] to run the
/// whole write again from the latest version.
async fn commit_rebased(
    table: &lancedb::Table,
    dataset: &std::sync::Arc<lance::Dataset>,
    transaction: lance::dataset::transaction::Transaction,
    affected_rows: Option<lance::dataset::scanner::RowAddrTreeMap>,
) -> lance::Result<lance::Dataset> {
    use lance::dataset::CommitBuilder;
    let mut lost = 0;
    loop {
        let mut commit = CommitBuilder::new(dataset.clone()).with_max_retries(1);
        if let Some(rows) = &affected_rows {
            commit = commit.with_affected_rows(rows.clone());
        }
        match commit.execute(transaction.clone()).await {
            Err(lance::Error::CommitConflict { version, .. }) if lost + 1 < LOST_RACES => {
                lost += 1;
                tracing::debug!(
                    table = table.name(),
                    version,
                    lost,
                    "another writer took the version: committing again"
                );
            }
            other => return other,
        }
    }
}

/// Commits of one transaction in a row that another writer's commit may precede (each
/// time, someone else's write went in: no livelock) before the whole write runs again.
const LOST_RACES: u32 = 16;

/// Runs a write to `table`, retrying on Lance commit conflicts (another writer committed first): up to
/// [`WRITE_ATTEMPTS`] attempts, the n-th after a random wait between 5 · 2^n and 10 · 2^n ms (at most
/// 640 ms), so that writers that collided do not collide again in step. Before each new attempt `table`
/// is brought to its latest version: on object storage a handle's reads may lag other writers by up to
/// its read consistency interval (`bucket::READ_CONSISTENCY`), and an attempt from the version that
/// conflicted meets the same conflict again.
pub(super) async fn retry<T, F, Fut>(table: &lancedb::Table, op: F) -> lancedb::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = lancedb::Result<T>>,
{
    retry_at_most(WRITE_ATTEMPTS, table, op).await
}

/// [`retry`] with at most `attempts` attempts (1: no retry).
pub(super) async fn retry_at_most<T, F, Fut>(attempts: usize, table: &lancedb::Table, mut op: F) -> lancedb::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = lancedb::Result<T>>,
{
    let mut attempt = 0;
    loop {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if attempt + 1 < attempts && is_conflict(&e) => {
                attempt += 1;
                tracing::debug!(table = table.name(), attempt, "commit conflict, retrying: {e}");
                let ceiling = 10u64 << attempt.min(6);
                tokio::time::sleep(Duration::from_millis(fastrand::u64(ceiling / 2..=ceiling))).await;
                table.checkout_latest().await?;
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::store::lance::handle::StoreTable;
    use std::time::Duration;

    use super::TableLock;

    /// A handle whose reads lag the table (read consistency of an hour, as a bucket's handles lag by up to
    /// half a second) updates a row another handle has just updated: its first commit conflicts, and the
    /// retry must start from the latest version, where it goes through; from the version it read, every
    /// attempt met the same conflict until the attempts ran out.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_write_that_conflicts_from_a_lagging_view_is_retried_on_the_latest_version() {
        use crate::store::ArchivalStore;
        use crate::store::lance::test_rows::passage;
        use crate::store::lance::{LanceStore, OpenOptions, TableId, archival, wait_for_upkeep};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_str().unwrap();
        let hourly = || OpenOptions { read_consistency: Some(Duration::from_secs(3600)), ..Default::default() };
        let first = LanceStore::open_with(path, hourly()).await.unwrap();
        let (mut row, vector) = passage("ann", "the billing service drains its queue");
        first.insert_passages(&[(row.clone(), vector.clone())]).await.unwrap();
        wait_for_upkeep().await;
        let second = LanceStore::open_with(path, hourly()).await.unwrap();
        row.tags = vec!["first".into()];
        StoreTable::new(&first, TableId::Archival)
            .update_batch(archival::to_batch(&[(row.clone(), vector.clone())]).unwrap())
            .await
            .unwrap();
        row.tags = vec!["second".into()];
        let started = std::time::Instant::now();
        StoreTable::new(&second, TableId::Archival)
            .update_batch(archival::to_batch(&[(row.clone(), vector)]).unwrap())
            .await
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(2), "the update took {:?}", started.elapsed());
        let reader = LanceStore::open(path).await.unwrap();
        let stored = reader.get_passage("ann", row.id).await.unwrap().expect("the passage is stored");
        assert_eq!(stored.tags, vec!["second".to_string()]);
    }

    /// Forgetting a passage commits to the table that held it and to no other: a deletion that matches
    /// nothing commits no version (lancedb's delete committed an empty one on every table it tried, each
    /// a commit that races the other writers on a bucket); an id no table holds commits nothing at all.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_forget_commits_only_to_the_table_that_held_the_row() {
        use crate::store::ArchivalStore;
        use crate::store::lance::test_rows::passage;
        use crate::store::lance::{LanceStore, TableId, wait_for_upkeep};
        let dir = tempfile::tempdir().unwrap();
        let store = LanceStore::open(dir.path().to_str().unwrap()).await.unwrap();
        let (row, vector) = passage("ann", "the billing service drains its queue");
        store.insert_passages(&[(row.clone(), vector)]).await.unwrap();
        wait_for_upkeep().await;
        let versions = || async {
            let mut all = Vec::new();
            for name in TableId::MEMORY {
                all.push((name, StoreTable::new(&store, name).table().version().await.unwrap()));
            }
            all
        };
        let before = versions().await;
        assert_eq!(store.delete_row("ann", &uuid::Uuid::new_v4().to_string()).await.unwrap(), None);
        assert_eq!(versions().await, before, "forgetting an id no table holds committed a version");
        assert_eq!(store.delete_row("ann", &row.id.to_string()).await.unwrap(), Some(TableId::Archival));
        let expected: Vec<_> =
            before.iter().map(|&(name, v)| (name, if name == TableId::Archival { v + 1 } else { v })).collect();
        assert_eq!(versions().await, expected);
        assert!(store.get_passage("ann", row.id).await.unwrap().is_none(), "the passage is still stored");
    }

    /// Deletions racing inserts on one table from two handles (each commit may find its version taken
    /// by the other's and is committed again, rebased on it): every deletion lands, no inserted row is
    /// lost, and none of the deleted rows comes back.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn deletions_racing_inserts_lose_nothing() {
        use crate::store::ArchivalStore;
        use crate::store::lance::test_rows::passage;
        use crate::store::lance::{LanceStore, TableId, wait_for_upkeep};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_str().unwrap().to_string();
        let inserter = LanceStore::open(&path).await.unwrap();
        let deleter = LanceStore::open(&path).await.unwrap();
        let doomed: Vec<_> = (0..20).map(|i| passage("ann", &format!("old note {i} of the billing service"))).collect();
        inserter.insert_passages(&doomed).await.unwrap();
        let inserts = tokio::spawn(async move {
            for i in 0..40 {
                inserter.insert_passages(&[passage("ann", &format!("new note {i} of the queue"))]).await.unwrap();
            }
        });
        let ids: Vec<String> = doomed.iter().map(|(p, _)| p.id.to_string()).collect();
        let deletes = tokio::spawn(async move {
            for id in &ids {
                assert_eq!(deleter.delete_row("ann", id).await.unwrap(), Some(TableId::Archival), "{id} not deleted");
            }
        });
        inserts.await.unwrap();
        deletes.await.unwrap();
        wait_for_upkeep().await;
        let reader = LanceStore::open(&path).await.unwrap();
        assert_eq!(StoreTable::new(&reader, TableId::Archival).table().count_rows(None).await.unwrap(), 40);
        for (p, _) in &doomed {
            assert!(reader.get_passage("ann", p.id).await.unwrap().is_none(), "{} is back", p.id);
        }
    }

    /// Two processes insert one text at the same moment, stamping the same microsecond: the one whose
    /// merge finds the other's row stored must not report it as its own (it then merges its tags into
    /// that row instead); the sessions tell the rows apart.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_insert_that_finds_another_session_s_row_of_the_same_microsecond_is_not_reported_as_written() {
        use crate::store::ArchivalStore;
        use crate::store::lance::test_rows::passage;
        use crate::store::lance::{LanceStore, wait_for_upkeep};
        let dir = tempfile::tempdir().unwrap();
        let store = LanceStore::open(dir.path().to_str().unwrap()).await.unwrap();
        let (mut theirs, vector) = passage("ann", "we pin node to version 20 in CI");
        theirs.session_id = "session-b".into();
        theirs.tags = vec!["b".into()];
        let mut ours = theirs.clone();
        ours.session_id = "session-a".into();
        ours.tags = vec!["a".into()];
        assert_eq!(store.insert_passages(&[(theirs.clone(), vector.clone())]).await.unwrap(), vec![theirs.id]);
        assert_eq!(store.insert_passages(&[(ours, vector)]).await.unwrap(), Vec::<uuid::Uuid>::new());
        wait_for_upkeep().await;
        let stored = store.get_passage("ann", theirs.id).await.unwrap().expect("stored");
        assert_eq!(stored.session_id, "session-b");
    }

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
                    let _lock = TableLock::acquire(&crate::store::Location::Local(db), "archival").await.unwrap();
                    tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(1))).await.unwrap();
                })
            });
            let all = futures::future::join_all(writers);
            tokio::time::timeout(Duration::from_secs(30), all).await.map(|r| r.len())
        });
        assert_eq!(done, Ok(32), "the writers deadlocked");
    }
}
