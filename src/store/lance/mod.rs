//! The LanceDB backend (docs/storage.md): one directory, local or a prefix of an object store, holding
//! the `fixes`, `archival`, conversation (`session_items`) and `core_blocks` tables and a small `meta` table with the
//! store's format version and the embedding model's id and dimension. The only module that imports
//! lancedb or arrow.
//!
//! Guarantees: a write returns only after Lance committed it (a new manifest version on disk), so an
//! acknowledged write survives a crash. Appends and merge-inserts from several processes are
//! serialised by Lance's optimistic commit protocol; we retry on a commit conflict. On a local
//! directory every read checks for other processes' commits first ([`READ_CONSISTENCY`] is zero: one
//! look at the table's latest manifest per query), so a write is visible to every server on the
//! directory as soon as it returns; on object storage a read may lag by up to half a
//! second ([`bucket::READ_CONSISTENCY`], `--read-consistency-ms`).
//!
//! Every table's `id` (`key` for `meta`) is its key for Lance ([`rows::key_field`]): two merge-inserts
//! that commit at once with a key in common conflict, and the second is retried against the first's
//! version. So an insert-if-absent of an archival passage or a conversation item writes its row once,
//! and a core block's next version is written by one writer (the other reads the block again), even
//! when the writers share nothing but an object store. Tag merges write only if the row is still as
//! read, and a distill run and the creation of a table hold a lease object on object storage. On a
//! local directory the same writes also run under an exclusive `flock(2)` on `<db>/<table>.lock`
//! ([`TableLock`](commit::TableLock)), which spares the writers of one machine those conflicts; there
//! the creation of a table relies on it (the processes of one machine), and nothing across machines
//! does. docs/storage.md lists what each write guarantees where.
//!
//! One file per job, from the bottom up: `tables` ([`TableId`]: every table by identity), `policy` (what
//! upkeep and a write's full-text check do, decided from a table's numbers alone, no I/O), `failure`
//! (Lance's errors read by their variants), `fts` (which columns each table indexes for BM25, and which
//! indexes are stale), `sql` (filters and literals), `rows`, [`row_cache`] and [`io`]; `handle` (the
//! open store, one handle per table with its state, and the one way every file reads and reports
//! errors); `commit` (retried commits, keyed merges, locks: the only file that uses Lance's dataset
//! API below lancedb), `search` (rankings and the reading of ranked rows, for every searchable table
//! through one implementation of `store::Searchable`), `bucket` (what object storage needs: checks at
//! open, leases, its files cached in memory); one file
//! per table for its schema and rows (`fixes`, `archival`, `conversation`, `core_blocks`, `distill`),
//! `group` (the inserts of one process committed together), `upkeep` (running what `policy` decides:
//! index building, compaction, pruning); `open` (opening, the `meta` checks, the full-text indexes found
//! at open), `write` (inserts, updates, deletions, what follows a write); `transfer` (export, import,
//! re-embedding), `admin` (operator views) and `browse` (the memory browser's reads). Every file imports
//! only from files listed before it.

mod admin;
mod archival;
mod browse;
mod bucket;
mod commit;
mod conversation;
mod core_blocks;
mod distill;
mod failure;
mod fixes;
mod fts;
mod group;
mod handle;
pub mod io;
mod open;
mod policy;
pub mod row_cache;
mod rows;
mod search;
mod sql;
mod tables;
mod transfer;
mod upkeep;
mod write;

pub use crate::store::{ListedRow, TableStats};
pub use admin::preview;
pub use handle::{FORMAT_VERSION, LanceStore, READ_CONSISTENCY};
pub use open::OpenOptions;
pub use policy::{
    ANN_MIN_ROWS, COMPACT_EVERY_WRITES, FTS_FLAT_MAX_ROWS, FTS_FOLD_MAX_ROWS, FTS_UNINDEXED_SHARE,
    MAX_VECTOR_INDEX_SEGMENTS, PRUNE_OLDER_THAN_SECS, UPKEEP_EVERY_WRITES, UPKEEP_FRAGMENTS,
};
pub use search::{ANN_EF, ANN_EF_MAX, ANN_REFINE_FACTOR, ANN_ROWS_PER_EF, ann_ef};
pub use tables::TableId;
pub use transfer::{EXPORT_VERSION, ExportHeader, ImportReport, TableCounts, parse_export_row, read_export_header};
pub use upkeep::wait_for_upkeep;

/// Rows the unit tests of several files write.
#[cfg(test)]
mod test_rows {
    use crate::embed::DIMENSION;

    pub(super) fn passage(actor: &str, text: &str) -> (crate::domain::Passage, Vec<f32>) {
        let now = chrono::Utc::now();
        let passage = crate::domain::Passage {
            id: crate::domain::passage_id(actor, "p", text),
            actor_id: actor.into(),
            project: "p".into(),
            session_id: String::new(),
            turn: None,
            source: "test".into(),
            tags: Vec::new(),
            text: text.into(),
            embedded_text: text.into(),
            created_at: now,
            updated_at: now,
            superseded_by: None,
        };
        // a distinct unit vector per text
        let mut vector = vec![0.0; DIMENSION];
        vector[text.len() % DIMENSION] = 1.0;
        (passage, vector)
    }

    /// A fix row as `store_fix_memory` writes one, embedding `text`, with a distinct unit vector.
    pub(super) fn fix_row(actor: &str, text: &str) -> (crate::domain::FixRecord, Vec<f32>) {
        let (passage, vector) = passage(actor, text);
        let fix = crate::domain::FixRecord {
            memory_id: passage.id,
            actor_id: actor.into(),
            project: "p".into(),
            session_id: "s".into(),
            created_at: passage.created_at,
            updated_at: passage.updated_at,
            fix_description: text.into(),
            error_type: "AssertionError".into(),
            file_paths: vec!["app.py".into()],
            outcome: "1 passed".into(),
            verified: true,
            receipt: None,
            embedded_text: text.into(),
        };
        (fix, vector)
    }
}
