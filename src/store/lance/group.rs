//! Group commit: the writes of one table that wait in this process at the same time go into one Lance
//! commit — inserts of new rows ([`StoreTable::insert_new`]) and upserts ([`StoreTable::upsert_grouped`])
//! each in groups of their own kind.
//!
//! A commit costs a manifest write on a local directory and several round trips on object storage (list
//! the versions, write the data, conditionally PUT the manifest), so writers that each commit alone
//! spend most of their time waiting for each other. Here a writer queues its rows and takes the table's
//! lock ([`TableLock`]); whoever gets it finds the rows queued by everyone still waiting and commits them
//! all at once. There is no timer: a lone writer commits at once, and a group forms only from writers
//! that arrived while the previous commit was in flight (the "group commit" of database logs).
//!
//! An acknowledgement still means committed: a writer returns after the commit that holds its rows, with
//! the ids of those rows stored by that commit (not those already present, nor those another writer of
//! the group queued first). The commit runs in a task of its own, so a writer whose caller gives up (a
//! cancelled request) cancels nobody else's write.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use tokio::sync::oneshot;
use uuid::Uuid;

use super::commit::TableLock;
use super::handle::{StoreTable, backend};
use super::rows;
use crate::store::StoreError;

/// A write waiting for the commit that holds its rows.
struct Waiting {
    ticket: u64,
    batch: RecordBatch,
    done: oneshot::Sender<Result<Vec<Uuid>, StoreError>>,
}

type Queue = Arc<Mutex<Vec<Waiting>>>;

/// What the commit of a group does with its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Grouped {
    /// Store the rows whose id is absent, leave the others ([`StoreTable::insert_absent`]).
    InsertNew,
    /// Replace the rows whose id is present, store the others; of one id queued twice the later wins.
    Upsert,
}

/// The queue of one kind of write to one table of one store (`<db>\0<table>\0<kind>`), shared by every
/// handle of this process.
fn queue(key: String) -> Queue {
    static QUEUES: std::sync::OnceLock<Mutex<HashMap<String, Queue>>> = std::sync::OnceLock::new();
    let mut queues = QUEUES.get_or_init(Default::default).lock().unwrap_or_else(|p| p.into_inner());
    queues.entry(key).or_default().clone()
}

fn locked(queue: &Queue) -> std::sync::MutexGuard<'_, Vec<Waiting>> {
    queue.lock().unwrap_or_else(|p| p.into_inner())
}

impl StoreTable<'_> {
    /// Inserts the rows of `batch` whose `id` is neither in this table nor queued before them, in one commit
    /// with the other inserts into this table waiting in this process (see the module docs). Returns the ids
    /// of `batch` this commit stored. Errors: the commit's error, for every write of the group.
    pub(super) async fn insert_new(self, batch: RecordBatch) -> Result<Vec<Uuid>, StoreError> {
        self.commit_queued(Grouped::InsertNew, batch).await
    }

    /// Stores the rows of `batch`, replacing the rows of the same `id`, in one commit with the other
    /// upserts into this table waiting in this process (see the module docs). Returns the ids of `batch`
    /// that were not stored before (an id queued by two writers counts for the first). Errors: the
    /// commit's error, for every write of the group.
    pub(super) async fn upsert_grouped(self, batch: RecordBatch) -> Result<Vec<Uuid>, StoreError> {
        self.commit_queued(Grouped::Upsert, batch).await
    }

    async fn commit_queued(self, how: Grouped, batch: RecordBatch) -> Result<Vec<Uuid>, StoreError> {
        static TICKETS: AtomicU64 = AtomicU64::new(0);
        if batch.num_rows() == 0 {
            return Ok(Vec::new());
        }
        let ticket = TICKETS.fetch_add(1, Ordering::Relaxed);
        let (done, outcome) = oneshot::channel();
        let queue = queue(format!("{}\0{}\0{how:?}", self.store.location.as_str(), self.id));
        locked(&queue).push(Waiting { ticket, batch, done });
        let lock = TableLock::acquire(&self.store.location, self.id.name()).await;
        // Still queued: nobody took these rows, so this writer commits everything queued. Otherwise a
        // commit that holds them is under way or done, and its outcome comes on the channel.
        let group = {
            let mut waiting = locked(&queue);
            let queued = waiting.iter().any(|w| w.ticket == ticket);
            match (queued, lock) {
                (true, Ok(lock)) => Some((std::mem::take(&mut *waiting), lock)),
                (true, Err(e)) => {
                    waiting.retain(|w| w.ticket != ticket);
                    return Err(e);
                }
                (false, _) => None,
            }
        };
        if let Some((group, lock)) = group {
            let (store, id) = (self.store.clone(), self.id);
            tokio::spawn(async move { StoreTable::new(&store, id).commit_group(how, group, lock).await });
        }
        outcome.await.unwrap_or_else(|_| {
            Err(StoreError::Backend(format!(
                "the commit of a write into {} stopped before it reported; the rows may or may not be stored: \
                 search for them before writing them again",
                self.id
            )))
        })
    }

    /// Commits the rows of `group` (one merge-insert) and tells each writer which of its rows were
    /// stored new: an id queued by two writers counts for the first.
    async fn commit_group(self, how: Grouped, group: Vec<Waiting>, lock: TableLock) {
        let batches: Vec<RecordBatch> = group.iter().map(|w| w.batch.clone()).collect();
        let outcome = match arrow_select::concat::concat_batches(&batches[0].schema(), &batches) {
            Ok(batch) if how == Grouped::InsertNew => self.insert_absent(batch, lock).await,
            Ok(batch) => self.upsert_rows(batch, lock).await,
            Err(e) => Err(backend(e)),
        };
        if group.len() > 1 {
            tracing::debug!(table = %self.id, writes = group.len(), kind = ?how, "writes committed together");
        }
        match outcome {
            Ok(stored) => {
                let mut unclaimed: HashSet<Uuid> = stored.into_iter().collect();
                for waiting in group {
                    let ids = rows::Rows::new(&waiting.batch, self.id).uuids("id");
                    let _ =
                        waiting.done.send(ids.map(|ids| ids.into_iter().filter(|id| unclaimed.remove(id)).collect()));
                }
            }
            Err(e) => {
                for waiting in group {
                    let _ = waiting.done.send(Err(e.clone()));
                }
            }
        }
    }

    /// Upserts `batch` into this table (of rows with one id, the last), then releases `lock`. Returns the
    /// ids that were not stored before: Lance's count tells for a single id; for more, the ids present
    /// are read first (another machine's insert between that read and the commit counts as ours).
    async fn upsert_rows(self, batch: RecordBatch, lock: TableLock) -> Result<Vec<Uuid>, StoreError> {
        let ids = rows::Rows::new(&batch, self.id).uuids("id")?;
        let mut seen = HashSet::new();
        let mut keep: Vec<u32> = (0..ids.len() as u32).rev().filter(|&i| seen.insert(ids[i as usize])).collect();
        keep.reverse();
        let batch = if keep.len() == ids.len() { batch } else { super::write::arrow_select_rows(&batch, &keep)? };
        let distinct: Vec<Uuid> = keep.iter().map(|&i| ids[i as usize]).collect();
        let present = if distinct.len() > 1 {
            let strings: Vec<String> = distinct.iter().map(Uuid::to_string).collect();
            self.ids_present(&strings).await?
        } else {
            HashSet::new()
        };
        let inserted =
            super::commit::merge_keyed(self.table(), &batch, super::commit::Merge::Upsert).await?.num_inserted_rows;
        drop(lock);
        self.after_write().await;
        Ok(match distinct.len() {
            1 if inserted == 0 => Vec::new(),
            _ => distinct.into_iter().filter(|id| !present.contains(id)).collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::store::lance::handle::StoreTable;
    use std::collections::HashSet;

    use crate::store::lance::test_rows::{fix_row, passage};
    use crate::store::lance::{LanceStore, TableId};
    use crate::store::{ArchivalStore, FixStore};

    /// Sixteen writers at once, two of them with the same passage: fewer commits than writes, each
    /// writer told exactly the rows it stored, the shared passage stored once and reported by one writer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_inserts_share_commits_and_each_writer_learns_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let store = LanceStore::open(dir.path().to_str().unwrap()).await.unwrap();
        // the first write builds the full-text index; the writes after it are the ones counted
        store.insert_passages(&[passage("ann", "the first note")]).await.unwrap();
        let before =
            StoreTable::new(&store, TableId::Archival).handle().writes.load(std::sync::atomic::Ordering::Acquire);
        let texts: Vec<String> = (0..16)
            .map(|i| {
                if i == 15 {
                    "note 0 of the billing service".into()
                } else {
                    format!("note {i} of the billing service")
                }
            })
            .collect();
        let writers = texts.iter().map(|text| {
            let store = store.clone();
            let row = passage("ann", text);
            tokio::spawn(async move { (row.0.id, store.insert_passages(&[row]).await.unwrap()) })
        });
        let results: Vec<_> = futures::future::join_all(writers).await.into_iter().map(Result::unwrap).collect();

        let commits =
            StoreTable::new(&store, TableId::Archival).handle().writes.load(std::sync::atomic::Ordering::Acquire)
                - before;
        assert!(commits < 16, "16 concurrent inserts took {commits} commits: none were grouped");
        let shared = results[0].0;
        assert_eq!(results[15].0, shared, "writers 0 and 15 insert the same passage");
        let reported = [&results[0], &results[15]].into_iter().filter(|(_, stored)| stored == &vec![shared]).count();
        assert_eq!(reported, 1, "the shared passage is reported stored by exactly one writer: {results:?}");
        for (id, stored) in &results[1..15] {
            assert_eq!(stored, &vec![*id], "each other writer stored its own passage");
        }
        let ids: Vec<uuid::Uuid> = results.iter().map(|(id, _)| *id).collect();
        let present = store.existing_passage_ids("ann", &ids).await.unwrap();
        assert_eq!(present, ids.iter().copied().collect::<HashSet<_>>());
        assert_eq!(
            StoreTable::new(&store, TableId::Archival).table().count_rows(None).await.unwrap(),
            16,
            "15 distinct passages and the first"
        );
    }

    /// Twelve fixes stored at once, one of them stored before and one sent by two writers: fewer
    /// commits than writes, every fix stored, and `created` true exactly for the writes that added a row
    /// (the fix stored before: updated; the fix sent twice: created for one writer).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_fix_upserts_share_commits_and_each_learns_whether_it_created_its_row() {
        let dir = tempfile::tempdir().unwrap();
        let store = LanceStore::open(dir.path().to_str().unwrap()).await.unwrap();
        let (old, old_vector) = fix_row("ann", "fix 0: the stored one");
        assert!(store.upsert_fix(&old, &old_vector).await.unwrap(), "the first store of a fix creates it");
        let before = StoreTable::new(&store, TableId::Fixes).handle().writes.load(std::sync::atomic::Ordering::Acquire);
        let rows: Vec<_> = (0..12)
            .map(|i| match i {
                0 => fix_row("ann", "fix 0: the stored one"),
                11 => fix_row("ann", "fix 1: sent twice"),
                _ => fix_row("ann", &format!("fix {i}: sent twice")),
            })
            .collect();
        let writers = rows.iter().cloned().map(|(fix, vector)| {
            let store = store.clone();
            tokio::spawn(async move { (fix.memory_id, store.upsert_fix(&fix, &vector).await.unwrap()) })
        });
        let results: Vec<_> = futures::future::join_all(writers).await.into_iter().map(Result::unwrap).collect();

        let commits =
            StoreTable::new(&store, TableId::Fixes).handle().writes.load(std::sync::atomic::Ordering::Acquire) - before;
        assert!(commits < 12, "12 concurrent fix stores took {commits} commits: none were grouped");
        assert!(!results[0].1, "a fix stored before is updated, not created");
        assert_eq!(results[1].0, results[11].0, "writers 1 and 11 store the same fix");
        assert_eq!([results[1].1, results[11].1].iter().filter(|c| **c).count(), 1, "{results:?}");
        for (id, created) in &results[2..11] {
            assert!(created, "fix {id} was new");
        }
        assert_eq!(
            StoreTable::new(&store, TableId::Fixes).table().count_rows(None).await.unwrap(),
            11,
            "11 distinct fixes"
        );
    }
}
