//! Opening a store: where it lives (a directory, a `file://` URL of one, or an object-store URI) and how
//! it is read ([`OpenOptions`]); the tables, created on first open; the `meta` table's format version and
//! embedding model, written into a new store and checked against this binary in an existing one, so a
//! store built differently is refused rather than misread; and the full-text indexes each searchable
//! table has, an index built with another version's analyzer being rebuilt before any search reads it.

use std::sync::Arc;
use std::time::Duration;

use arrow_array::{RecordBatch, RecordBatchIterator, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use lancedb::{Connection, Table};

use super::commit::{TableLock, retry};
use super::fts::{fts_columns, has_fts_index, has_stale_fts_index};
use super::handle::{FORMAT_VERSION, LanceStore, READ_CONSISTENCY, StoreTable, TableHandle, backend, collect};
use super::tables::{META_TABLE, TableId};
use super::{archival, bucket, conversation, core_blocks, distill, fixes, io, row_cache, rows, uses};
use crate::embed::{DIMENSION, MODEL_ID};
use crate::store::{Location, StoreError};

/// How a store is opened: how it reads its files and how much its caches hold. Settings of one opening,
/// not of the process (`--lance-io`, `--row-cache-rows`, `--store-cache-mib`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenOptions {
    /// How a local directory's files are read ([`io`]).
    pub read_io: io::ReadIo,
    /// Rows per searchable table the [`row_cache`] holds; 0 turns it off.
    pub row_cache_rows: usize,
    /// MiB the store's caches hold in all ([`io::session`]).
    pub cache_mib: u64,
    /// How long a read may lag other processes' commits (`--read-consistency-ms`); `None`: the
    /// default of where the store lives, [`READ_CONSISTENCY`] on a local directory and
    /// [`bucket::READ_CONSISTENCY`] on object storage.
    pub read_consistency: Option<Duration>,
    /// Open an object store that does not refuse a second conditional write of one key
    /// (`--unsafe-single-writer`; [`bucket::probe_conditional_writes`]).
    pub unsafe_single_writer: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        Self {
            read_io: io::ReadIo::Auto,
            row_cache_rows: row_cache::DEFAULT_ROW_CACHE_ROWS,
            cache_mib: io::DEFAULT_CACHE_MIB,
            read_consistency: None,
            unsafe_single_writer: false,
        }
    }
}

/// [`LanceStore::require_existing`].
pub(super) async fn require_existing(path: &str) -> Result<(), StoreError> {
    let exists = match Location::parse(path) {
        Ok(Location::Local(dir)) => std::path::Path::new(&dir).is_dir(),
        Ok(Location::Bucket(uri)) => bucket::store_exists(&uri).await?,
        Err(_) => false,
    };
    if exists { Ok(()) } else { Err(StoreError::Missing { path: path.to_string() }) }
}

/// Opens (creating when absent) the store at `path` as `options` say, checking the `meta` table's format
/// version and, with `check_model`, its embedding model ([`LanceStore::open_with`]).
pub(super) async fn open_checked(
    path: &str,
    options: OpenOptions,
    check_model: bool,
) -> Result<LanceStore, StoreError> {
    let open_err = |e: &dyn std::fmt::Display| StoreError::Open { path: path.to_string(), message: e.to_string() };
    if path.starts_with("file+uring:") {
        return Err(StoreError::ReadIo {
            path: path.to_string(),
            message: "a file+uring:// URL is not a store path (Lance would commit to it unsafely); give the \
                      directory's path, and --lance-io uring"
                .into(),
        });
    }
    // A `file://` URL is a local directory: its path gets the locks and the reads of one.
    let location = Location::parse(path).map_err(|message| open_err(&message))?;
    let local = location.is_local();
    let path = location.as_str();
    if !local && !options.unsafe_single_writer {
        // before anything is written: a store that would lose commits gets no tables
        bucket::probe_conditional_writes(path).await?;
    }
    // how the store is read (see `io`), settled before anything is created
    let session = io::session(options.read_io, options.cache_mib, local)
        .map_err(|message| StoreError::ReadIo { path: path.to_string(), message })?;
    let location = if local {
        // made absolute: lancedb reads a bare name such as `db` as a cloud URI
        std::fs::create_dir_all(path).map_err(|e| open_err(&e))?;
        Location::Local(std::path::absolute(path).map_err(|e| open_err(&e))?.to_string_lossy().into_owned())
    } else {
        location.clone()
    };
    let path = location.as_str();
    let connect = lancedb::connect(path).session(session.clone());
    let read_consistency =
        options.read_consistency.unwrap_or(if local { READ_CONSISTENCY } else { bucket::READ_CONSISTENCY });
    let conn = connect.read_consistency_interval(read_consistency).execute().await.map_err(|e| open_err(&e))?;
    let meta = open_or_create(&conn, &location, META_TABLE, meta_schema()).await?;
    check_meta(&location, &meta, check_model).await?;
    // The other tables at once: on object storage each opening is several round trips.
    let tables = futures::future::try_join_all(
        TableId::ALL.map(|id| open_or_create(&conn, &location, id.name(), schema_of(id))),
    )
    .await?;
    if !local {
        let named = std::iter::once((META_TABLE, &meta)).chain(TableId::ALL.iter().map(|id| id.name()).zip(&tables));
        futures::future::try_join_all(named.map(|(name, table)| bucket::check_keyed(path, name, table))).await?;
    }
    // a row cache for each table searches rank, sized by what the table allows
    let capacities = futures::future::join_all(TableId::ALL.iter().zip(&tables).map(|(id, table)| async move {
        if id.is_searchable() { row_cache_capacity(table, options.row_cache_rows).await } else { 0 }
    }))
    .await;
    let mut handles = tables.into_iter().zip(capacities).map(|(table, rows)| TableHandle::new(table, rows));
    let store = LanceStore {
        location: location.clone(),
        conn,
        // in the order of `TableId::ALL`
        tables: Arc::new(std::array::from_fn(|_| handles.next().expect("one table per TableId"))),
        fold_running: Arc::default(),
        session,
    };
    for name in TableId::SEARCHABLE {
        for &column in fts_columns(name) {
            if has_fts_index(StoreTable::new(&store, name).table(), name, column).await.map_err(|e| open_err(&e))? {
                StoreTable::new(&store, name).handle().fts_ready.lock().await.insert(column);
            } else if has_stale_fts_index(StoreTable::new(&store, name).table(), name, column)
                .await
                .map_err(|e| open_err(&e))?
            {
                // an index built with another analyzer (an older version of this program): rebuilt
                // now, so no search reads it with this version's query tokenizer
                StoreTable::new(&store, name).ensure_fts().await.map_err(|e| open_err(&e))?;
            }
        }
    }
    Ok(store)
}

/// The Arrow schema of table `id`, as a new store creates it.
fn schema_of(id: TableId) -> SchemaRef {
    match id {
        TableId::Fixes => fixes::schema(),
        TableId::Archival => archival::schema(),
        TableId::Conversation => conversation::schema(),
        TableId::CoreBlocks => core_blocks::schema(),
        TableId::Forgotten => conversation::forgotten_schema(),
        TableId::DistillRuns => distill::schema(),
        TableId::Uses => uses::schema(),
    }
}

/// The rows `table`'s [`row_cache`] may hold: `rows` ([`OpenOptions::row_cache_rows`]), or none when the table
/// was created with Lance's stable row ids, where `_rowid` is a row's id across updates, not its
/// address (an updated row keeps it), so what the cache holds for it could be out of date. This
/// store never creates such tables; another program could.
async fn row_cache_capacity(table: &Table, rows: usize) -> usize {
    let stable = match table.as_native() {
        Some(native) => native.manifest().await.map(|m| m.uses_stable_row_ids()).unwrap_or(true),
        None => true,
    };
    if stable { 0 } else { rows }
}

/// Opens table `name` of the store at `path`, creating it empty when absent. Lance commits the creation
/// of a table that another process created meanwhile on top of that table, as an overwrite (its commit
/// loads the table it finds and writes the new, empty version after the other's): the rows written
/// since would be gone. So a creator holds the table's creation lock ([`creation_lock`]) and looks
/// again before creating; a process that finds the lock taken waits for the table to appear.
///
/// # Errors
/// [`StoreError::Open`]: the store's, or the table still absent after [`CREATION_WAIT`] with another
/// process holding its creation lease.
async fn open_or_create(
    conn: &Connection,
    location: &Location,
    name: &str,
    schema: SchemaRef,
) -> Result<Table, StoreError> {
    let path = location.as_str();
    let open_err = |e: &dyn std::fmt::Display| StoreError::Open { path: path.to_string(), message: e.to_string() };
    let open = || async {
        match conn.open_table(name).execute().await {
            Ok(table) => Ok(Some(table)),
            Err(lancedb::Error::TableNotFound { .. }) => Ok(None),
            Err(e) => Err(open_err(&e)),
        }
    };
    if let Some(table) = open().await? {
        return Ok(table);
    }
    let waiting = std::time::Instant::now();
    loop {
        if let Some(lock) = creation_lock(location, name).await? {
            let table = match open().await {
                Ok(Some(table)) => Ok(table),
                Ok(None) => conn.create_empty_table(name, schema.clone()).execute().await.map_err(|e| open_err(&e)),
                Err(e) => Err(e),
            };
            lock.release().await;
            return table;
        }
        tokio::time::sleep(Duration::from_millis(fastrand::u64(100..=200))).await;
        if let Some(table) = open().await? {
            return Ok(table);
        }
        if waiting.elapsed() > CREATION_WAIT {
            return Err(open_err(&format!(
                "its table `{name}` is absent and another process holds the lease to create it (a process that \
                 died creating it holds it for {} s): try again",
                bucket::CREATION_LEASE.as_secs()
            )));
        }
    }
}

/// How long opening a store waits for a table another process is creating.
const CREATION_WAIT: Duration = Duration::from_secs(90);

/// The lock of table `name`'s creation: the table's write lock ([`TableLock`], `flock(2)`) on a local
/// directory, waited for; on object storage a lease object ([`bucket::try_lease`],
/// [`bucket::CREATION_LEASE`]), `None` while another process holds it.
async fn creation_lock(location: &Location, name: &str) -> Result<Option<crate::store::RunLock>, StoreError> {
    let Location::Bucket(uri) = location else {
        return Ok(Some(crate::store::RunLock::new(TableLock::acquire(location, name).await?)));
    };
    let lease = format!("create-{name}");
    bucket::try_lease(uri, &lease, bucket::CREATION_LEASE, "table creation").await
}

pub(super) fn meta_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![rows::key_field("key"), Field::new("value", DataType::Utf8, false)]))
}

/// Writes the meta rows into a new store, or checks an existing store's rows against this binary.
async fn check_meta(location: &Location, meta: &Table, check_model: bool) -> Result<(), StoreError> {
    let path = location.as_str();
    let expected = [
        ("format_version", FORMAT_VERSION.to_string()),
        ("embedding_model", MODEL_ID.to_string()),
        ("embedding_dimension", DIMENSION.to_string()),
    ];
    let batches = collect(&meta.query()).await.map_err(backend)?;
    let mut found = std::collections::HashMap::new();
    for batch in &batches {
        let rows = rows::Rows::new(batch, "meta");
        for (k, v) in rows.strs("key")?.into_iter().zip(rows.strs("value")?) {
            found.insert(k, v);
        }
    }
    if found.is_empty() {
        let schema = meta_schema();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from_iter_values(expected.iter().map(|(k, _)| *k))),
                Arc::new(StringArray::from_iter_values(expected.iter().map(|(_, v)| v.as_str()))),
            ],
        )
        .map_err(backend)?;
        // Keyed upsert: two processes initialising one store at once write the same rows once.
        retry(meta, || {
            let mut merge = meta.merge_insert(&["key"]);
            merge.when_not_matched_insert_all();
            let reader = RecordBatchIterator::new(vec![Ok(batch.clone())], schema.clone());
            async move { merge.execute(Box::new(reader)).await }
        })
        .await
        .map_err(backend)?;
        if !location.is_local() {
            // a mistyped bucket or prefix opens as a new store, not as an error
            tracing::warn!(
                store = path,
                "no store was at this address: created a new, empty one (if you meant an existing store, check the \
                 bucket and prefix)"
            );
        } else {
            // said at warn level: a mistyped --db otherwise looks like memory that vanished
            tracing::warn!(
                store = path,
                "no store was at this path: created a new, empty one (if you meant an existing store, check --db / \
                 ASTRA_DB)"
            );
        }
        return Ok(());
    }
    let version = found.get("format_version").map(String::as_str).unwrap_or("none");
    if version != FORMAT_VERSION {
        return Err(StoreError::FormatVersion {
            path: path.to_string(),
            found: version.to_string(),
            expected: FORMAT_VERSION.to_string(),
        });
    }
    let model = found.get("embedding_model").cloned().unwrap_or_default();
    let dim = found.get("embedding_dimension").cloned().unwrap_or_default();
    if check_model && (model != MODEL_ID || dim != DIMENSION.to_string()) {
        return Err(StoreError::ModelMismatch {
            path: path.to_string(),
            found: format!("{model} ({dim}-d)"),
            expected: format!("{MODEL_ID} ({DIMENSION}-d)"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::OpenOptions;
    use crate::domain::Passage;
    use crate::store::lance::LanceStore;
    use crate::store::lance::test_rows::passage;
    use crate::store::{ArchivalStore, SearchFilter, Searchable, TextQuery};

    /// A process that finds a table absent creates it only after looking again under the table's
    /// creation lock: meanwhile another process created it and wrote a row, which a creation committed
    /// after it would have overwritten (Lance commits it on top, as an overwrite).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_table_another_process_created_meanwhile_is_opened_not_created_again() {
        use crate::store::lance::{TableId, archival, commit::TableLock};
        let dir = tempfile::tempdir().unwrap();
        let path = std::path::absolute(dir.path()).unwrap().to_string_lossy().into_owned();
        let location = crate::store::Location::Local(path.clone());
        let held = TableLock::acquire(&location, TableId::Archival.name()).await.unwrap();
        let opening = tokio::spawn({
            let path = path.clone();
            async move {
                let conn = lancedb::connect(&path).execute().await.unwrap();
                super::open_or_create(&conn, &location, TableId::Archival.name(), archival::schema()).await.map(|_| ())
            }
        });
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(!opening.is_finished(), "it found the table absent and waits for the creation lock");
        let other = lancedb::connect(&path).execute().await.unwrap();
        let table = other.create_empty_table(TableId::Archival.name(), archival::schema()).execute().await.unwrap();
        let row = passage("ann", "the billing service drains its queue");
        table.add(archival::to_batch(&[row]).unwrap()).execute().await.unwrap();
        drop(held);
        opening.await.unwrap().unwrap();
        let latest = lancedb::connect(&path).execute().await.unwrap();
        let rows = latest.open_table(TableId::Archival.name()).execute().await.unwrap().count_rows(None).await.unwrap();
        assert_eq!(rows, 1, "the other process's row is kept");
    }

    /// Lance caches a manifest per commit and index files per index update, each under its own key, so
    /// under its default sizes (7 GiB in all) the caches of a store taking writes and searches grow with
    /// every commit; bounded by [`OpenOptions::cache_mib`], they stay within it.
    #[tokio::test]
    async fn lance_s_caches_stay_within_the_store_cache_setting() {
        const BOUND_MIB: u64 = 16;
        let workload = |cache_mib: u64| async move {
            let dir = tempfile::tempdir().unwrap();
            let options = OpenOptions { cache_mib, ..OpenOptions::default() };
            let store = LanceStore::open_with(dir.path().to_str().unwrap(), options).await.unwrap();
            // about 0.2 MiB cached per round under Lance's defaults (68 MB after 300, measured)
            for i in 0..200 {
                let (row, vector) =
                    passage("ann", &format!("note {i}: the billing service {}", "retries ".repeat(i % 50)));
                store.insert_passages(&[(row, vector.clone())]).await.unwrap();
                let filter = SearchFilter { actor_id: "ann".into(), ..Default::default() };
                let query = TextQuery { filter, vector, text: format!("note {i} billing"), limit: 5 };
                Searchable::<Passage>::keyword(&store, &query).await.unwrap();
                Searchable::<Passage>::nearest(&store, &query).await.unwrap();
            }
            store.cache_bytes()
        };
        let lance_defaults = workload(7 * 1024).await;
        let bounded = workload(BOUND_MIB).await;
        assert!(lance_defaults > BOUND_MIB << 20, "the workload caches more than the bound: {lance_defaults}");
        assert!(bounded <= BOUND_MIB << 20, "{bounded} bytes cached under a bound of {BOUND_MIB} MiB");
    }
}
