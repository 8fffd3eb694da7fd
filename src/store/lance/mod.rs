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
//! open store, one handle per table with its state, `StoreTable` — one table of the store, the receiver
//! of every operation on a single table — and the one way every file reads and reports errors); `commit` (retried commits, keyed merges, locks: the only file that uses Lance's dataset
//! API below lancedb), `search` (rankings and the reading of ranked rows, for every searchable table
//! through one implementation of `store::Searchable`), `bucket` (what object storage needs: checks at
//! open, leases, its files cached in memory); one file
//! per table for its schema and rows (`fixes`, `archival`, `conversation`, `core_blocks`, `distill`),
//! `group` (the inserts of one process committed together), `upkeep` (running what `policy` decides:
//! index building, compaction, pruning); `open` (opening, the `meta` checks, the full-text indexes found
//! at open), `write` (inserts, updates, deletions, what follows a write); `transfer` (export, import,
//! re-embedding), `admin` (operator views) and `browse` (the memory browser's reads). Every file imports
//! only from files listed before it.
//!
//! The methods of [`LanceStore`] itself are all in this file: opening, what spans the tables, and the
//! per-table operations the commands call. Below it, an operation on one table is a method of
//! `StoreTable` (in the file of its job), one that spans tables a function of its file taking the store,
//! and each memory tier is the store's implementation of that tier's trait of `crate::store`.

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
mod uses;
mod write;

pub use crate::store::{ListedRow, TableStats};
pub use admin::preview;
pub use handle::{FORMAT_VERSION, LanceStore, READ_CONSISTENCY};
use std::io::Write;

use serde_json::Value;

use crate::embed::LazyEmbedder;
use crate::store::{ImportRules, Location, StoreError};
use handle::StoreTable;
pub use open::OpenOptions;
pub use policy::{
    ANN_MIN_ROWS, COMPACT_EVERY_WRITES, FTS_FLAT_MAX_ROWS, FTS_FOLD_MAX_ROWS, FTS_UNINDEXED_SHARE,
    MAX_VECTOR_INDEX_SEGMENTS, PRUNE_OLDER_THAN_SECS, UPKEEP_EVERY_WRITES, UPKEEP_FRAGMENTS,
};
pub use search::{ANN_EF, ANN_EF_MAX, ANN_REFINE_FACTOR, ANN_ROWS_PER_EF, ann_ef};
pub use tables::TableId;
pub use transfer::{EXPORT_VERSION, ExportHeader, ImportReport, TableCounts, parse_export_row, read_export_header};
pub use upkeep::wait_for_upkeep;

/// The store's own methods (see the module docs): each runs in the file of its job.
impl LanceStore {
    /// Opens (creating when absent) the store at `path` (a directory, a `file://` URL of one, or an
    /// object-store URI) with the default [`OpenOptions`], checking the `meta` table's format version
    /// and embedding model.
    ///
    /// # Errors
    /// As [`Self::open_with`].
    pub async fn open(path: &str) -> Result<Self, StoreError> {
        open::open_checked(path, OpenOptions::default(), true).await
    }

    /// Opens (creating when absent) the store at `path` as `options` say, checking the `meta` table's
    /// format version and embedding model.
    ///
    /// # Errors
    /// [`StoreError::Open`] when the directory is unusable, [`StoreError::ReadIo`] when `--lance-io
    /// uring` cannot be honoured here or `path` is a `file+uring://` URL, [`StoreError::ModelMismatch`] /
    /// [`StoreError::FormatVersion`] when the store was built differently.
    pub async fn open_with(path: &str, options: OpenOptions) -> Result<Self, StoreError> {
        open::open_checked(path, options, true).await
    }

    /// Opens the store without checking the embedding model (for `memory reindex`, which re-embeds a
    /// store built with another model). The format version is still checked.
    pub async fn open_for_reindex(path: &str, options: OpenOptions) -> Result<Self, StoreError> {
        open::open_checked(path, options, false).await
    }

    /// Checks that a store is at `path`: for a local path (or a `file://` URL) its directory; for an
    /// object-store URI a `meta` table under the prefix (one listing, nothing written). Opening creates
    /// a store where there is none, so the commands and hooks that only read one ask this first: a
    /// mistyped path, bucket or prefix is then an error, not a new empty store.
    ///
    /// # Errors
    /// [`StoreError::Missing`] when no store is at `path`; [`StoreError::Open`] when the object store
    /// cannot be listed (no credentials, unreachable).
    pub async fn require_existing(path: &str) -> Result<(), StoreError> {
        open::require_existing(path).await
    }

    /// Where the store lives: its directory (absolute) or URI.
    pub fn path(&self) -> &str {
        self.location.as_str()
    }

    /// Where the store lives, as parsed when it opened.
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// Bytes Lance's index and metadata caches of this connection hold now (at most
    /// [`super::OpenOptions::cache_mib`] MiB).
    pub fn cache_bytes(&self) -> u64 {
        self.session.size_bytes()
    }

    /// Deletes the memory `id` of `actor` from whichever table holds it (a core block id purges that
    /// one version from the block's history), and with it from that table's vector and full-text indexes (Lance marks the row deleted; every query skips it,
    /// and `optimize` removes it from the files). Returns the table, `None` when no such row exists.
    pub async fn delete_row(&self, actor: &str, id: &str) -> Result<Option<TableId>, StoreError> {
        write::delete_row(self, actor, id).await
    }

    /// Appends passages without the insert-if-absent check (benchmark loading into a fresh store).
    pub async fn append_passages(&self, rows_in: &[(crate::domain::Passage, Vec<f32>)]) -> Result<(), StoreError> {
        write::append_passages(self, rows_in).await
    }

    /// Builds every full-text index a table with rows lacks (a store written by an older version, or
    /// before an index was added).
    pub async fn ensure_indexes(&self) -> Result<(), StoreError> {
        upkeep::ensure_indexes(self).await
    }

    /// Builds the ANN index on `vector` (IVF-HNSW-SQ, cosine) once the table has [`policy::ANN_MIN_ROWS`] rows,
    /// and rebuilds it when the table has doubled since (so its partitions follow the data); rows added
    /// in between are folded in by the index optimisation of upkeep, and until then searched flat.
    /// Returns whether an index was (re)built.
    pub async fn ensure_vector_index(&self, name: TableId) -> Result<bool, StoreError> {
        StoreTable::new(self, name).ensure_vector_index().await
    }

    /// The indexes a table needs at scale ([`policy::ANN_MIN_ROWS`] rows and more): the vector index
    /// ([`Self::ensure_vector_index`]), then the scalar indexes of its filter columns
    /// ([`Self::ensure_scalar_indexes`]). Returns whether the vector index was (re)built.
    pub async fn ensure_large_table_indexes(&self, name: TableId) -> Result<bool, StoreError> {
        StoreTable::new(self, name).ensure_large_table_indexes().await
    }

    /// Builds the scalar indexes of `name`'s filter columns ([`scalar_index_columns`]: a bitmap on
    /// `actor_id`, a B-tree on `superseded_by`) once the table has [`policy::ANN_MIN_ROWS`] rows. Without them
    /// every filtered search evaluates its filter by scanning those columns of every row (about 60 ms at
    /// 1M rows); with them the filter is an index lookup. Upkeep's index optimisation keeps them current.
    /// Returns the columns indexed now.
    pub async fn ensure_scalar_indexes(&self, name: TableId) -> Result<Vec<&'static str>, StoreError> {
        StoreTable::new(self, name).ensure_scalar_indexes().await
    }

    /// The name of `name`'s vector index and how many segments it has (`None`: no vector index).
    pub async fn vector_index_segments(&self, name: TableId) -> Result<Option<(String, usize)>, StoreError> {
        StoreTable::new(self, name).vector_index_segments().await
    }

    /// Whether `name` has an index on `vector`.
    pub async fn has_vector_index(&self, name: TableId) -> Result<bool, StoreError> {
        StoreTable::new(self, name).has_vector_index().await
    }

    /// Upkeep of docs/storage.md for every table, now (`memory optimize`): compacts small fragments,
    /// folds unindexed rows into the indexes, and prunes versions older than `prune_older_than`. Unlike
    /// background upkeep, it rewrites every fragment that has a deleted row, however few, so that once the
    /// versions before are pruned no file holds a forgotten memory's text any more (docs/tools.md,
    /// "Forgetting"); background upkeep rewrites a fragment once a tenth of its rows are deleted (Lance's
    /// default), as rewriting a large fragment for each forgotten row would cost more than it keeps.
    pub async fn optimize(&self, prune_older_than: chrono::Duration) -> Result<(), StoreError> {
        upkeep::optimize(self, prune_older_than).await
    }

    /// Brings every index of the searchable table `name` up to its rows: builds the full-text indexes
    /// if missing, the vector and scalar indexes once the table is large enough
    /// ([`Self::ensure_large_table_indexes`]), and folds the rows written since into all of them (into
    /// the vector index as a new segment, which upkeep merges). Bulk commands (`memory ingest`, `memory
    /// import`) run it at their end: rows a full-text index does not cover are scored apart from the
    /// others (see [`policy::FTS_FOLD_MAX_ROWS`]), so an ingested passage could otherwise rank below an
    /// older one with its words in another order until the next upkeep.
    pub async fn fold_new_rows_into_indexes(&self, name: TableId) -> Result<(), StoreError> {
        StoreTable::new(self, name).fold_new_rows_into_indexes().await
    }

    /// Writes every row of every table (of `actor`, or all) as JSONL: a header line ([`ExportHeader`]),
    /// then `{"table": …, "row": {…}}` per row with ids, times and vectors, so `import` restores it
    /// exactly.
    pub async fn export(&self, out: &mut (dyn Write + Send), actor: Option<&str>) -> Result<TableCounts, StoreError> {
        transfer::export(self, out, actor).await
    }

    /// Reads an export made by [`Self::export`] and upserts every row by id (an import repeated adds
    /// nothing), each row's text passed through `rules` (the memory layer's redaction and tags). When the export's embedding model differs from this binary's, vectors are recomputed
    /// from each row's `embedded_text`.
    ///
    /// # Errors
    /// A missing or unknown header, a line that is not a row of a known table, or a row that does not
    /// fit its table's columns, with the line number.
    pub async fn import(
        &self,
        text: &str,
        embedder: &LazyEmbedder,
        rules: &ImportRules,
    ) -> Result<ImportReport, StoreError> {
        transfer::import(self, text, embedder, rules).await
    }

    /// Re-embeds every row of every searchable table with this binary's model (after a model change),
    /// then records the model in `meta`, so the store opens normally again. Returns rows re-embedded by
    /// table. Safe to rerun after an interruption: rows are rewritten by id.
    pub async fn reindex(&self, embedder: &LazyEmbedder) -> Result<TableCounts, StoreError> {
        transfer::reindex(self, embedder).await
    }

    /// Rows of one table or all, newest first, at most `limit` per table.
    ///
    /// # Errors
    /// [`StoreError::Backend`] for an unknown table name or a failed read.
    pub async fn list_rows(
        &self,
        table: Option<&str>,
        actor: Option<&str>,
        limit: usize,
    ) -> Result<Vec<ListedRow>, StoreError> {
        admin::list_rows(self, table, actor, limit).await
    }

    /// Whether any table holds a row of `actor` under the project label `project` (a read of at most one
    /// row per table: it stops at the first match).
    ///
    /// # Errors
    /// [`StoreError::Backend`] for a failed read.
    pub async fn holds_project(&self, actor: &str, project: &str) -> Result<bool, StoreError> {
        admin::holds_project(self, actor, project).await
    }

    /// Every actor that has rows in the store, with its rows in all tables, most rows first (then by
    /// name). Reads the `actor_id` column of every table.
    ///
    /// # Errors
    /// A failed read.
    pub async fn actor_counts(&self) -> Result<Vec<(String, usize)>, StoreError> {
        admin::actor_counts(self).await
    }

    /// The full row with `id` (any table), as JSON without its vector, with the table's name.
    pub async fn show_row(&self, id: &str, actor: Option<&str>) -> Result<Option<(&'static str, Value)>, StoreError> {
        admin::show_row(self, id, actor).await
    }

    /// Rows, size, fragments, indexes, vector index segments and versions of every table.
    pub async fn stats(&self) -> Result<Vec<TableStats>, StoreError> {
        admin::stats(self).await
    }

    /// Ids of the `k` rows of `actor` nearest to `vector` by cosine, through the vector index (as the
    /// searches run) or, with `exact`, by a flat scan (the ground truth of a recall measurement).
    pub async fn nearest_ids(
        &self,
        name: TableId,
        actor: &str,
        vector: &[f32],
        k: usize,
        exact: bool,
    ) -> Result<Vec<String>, StoreError> {
        StoreTable::new(self, name).nearest_ids(actor, vector, k, exact).await
    }
}

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
