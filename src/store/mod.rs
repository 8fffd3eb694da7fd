//! Storage seams: what the memory layer needs from a table of fixes, independent of the backend.
//! The only backend is [`lance::LanceStore`] (one embedded LanceDB directory, docs/storage.md).

pub mod lance;

use async_trait::async_trait;
use uuid::Uuid;

use chrono::{DateTime, Utc};

use crate::domain::{ConversationItem, CoreBlockVersion, DistillRun, FixRecord, MemoryUse, Passage, Role};

/// Store failures. Messages name the setting that fixes them where there is one.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The directory (or bucket) could not be opened or its tables created.
    #[error("cannot open the memory store at {path}: {} ({})", without_source_locations(.message), open_hint(.path))]
    Open { path: String, message: String },
    /// The way of reading the store's files asked for (`--lance-io`) is not possible here.
    #[error("cannot open the memory store at {path}: {message}")]
    ReadIo { path: String, message: String },
    /// The store was built with another embedding model; its vectors are not comparable with ours.
    #[error(
        "the memory store at {path} was built with embedding model `{found}`, but this astra-mcp embeds with `{expected}`: \
         run `astra-mcp memory reindex --db {path}` to re-embed it, or point --db (ASTRA_DB) at another directory"
    )]
    ModelMismatch { path: String, found: String, expected: String },
    /// The store was written by a newer (or unknown) format.
    #[error(
        "the memory store at {path} has format version {found}; this astra-mcp reads version {expected}: upgrade astra-mcp"
    )]
    FormatVersion { path: String, found: String, expected: String },
    /// The object store accepted a second conditional write (`If-None-Match: *`) of one key: it would
    /// let two writers overwrite each other's commits (lance-format/lance#4205).
    #[error(
        "the object store behind {path} does not refuse a second conditional write (If-None-Match: *) of one key, \
         so two processes writing at once would silently lose each other's commits; use a store that honours \
         conditional writes (AWS S3, MinIO, Cloudflare R2, Google Cloud Storage), or, if one process alone ever \
         writes to this store, pass --unsafe-single-writer (ASTRA_UNSAFE_SINGLE_WRITER=1)"
    )]
    UnsafeObjectStore { path: String },
    /// A call into the storage engine failed: `kind` says what it means to the store, read from the
    /// engine's error variants (`lance::failure`), and the engine's error is kept as the source.
    #[error("memory store operation failed: {}", without_source_locations(&.source.to_string()))]
    Engine { kind: EngineFailure, source: std::sync::Arc<dyn std::error::Error + Send + Sync> },
    /// An operation of the store itself failed (a lock, a file it writes, a row it encodes); the message
    /// says which.
    #[error("memory store operation failed: {}", without_source_locations(.0))]
    Backend(String),
    /// What an import or a command was given does not fit (an export file's header or rows, a version
    /// that may not be purged): the message names it and what to do; nothing was changed.
    #[error("{0}")]
    Invalid(String),
    /// Other sessions kept changing the rows a write needs while it ran (a passage forgotten again each
    /// time the insert found it stored): nothing of the write was committed, and calling it again is
    /// the remedy. Commit conflicts that outlast the retries are [`Self::Backend`] errors that
    /// [`Self::is_contention`] recognises ([`Self::Engine`] of kind `Conflict` or `Contention`).
    #[error("memory store operation failed: {0}")]
    Contention(String),
    /// No store is where a command that only reads was pointed ([`lance::LanceStore::require_existing`]).
    #[error("no memory store at {path}: {}; `astra-mcp serve` (or `memory import`) creates one", missing_hint(.path))]
    Missing { path: String },
    /// A stored row could not be decoded.
    #[error("memory store row is unreadable ({table}.{column}): {message}")]
    Corrupt { table: &'static str, column: &'static str, message: String },
}

/// What a failed call into the storage engine means to the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EngineFailure {
    /// A commit lost to another writer's (nothing of it was committed; running it again is safe).
    Conflict,
    /// The engine refused the commit: too many writers at once.
    Contention,
    /// A file of the version read is gone (pruned under the read).
    MissingFile,
    /// Anything else: I/O, a query error, a bad argument.
    Other,
}

impl StoreError {
    /// Whether this is a write that kept losing to other writers' commits of the same rows (Lance's
    /// commit conflicts, after the store's retries): nothing of it was committed, and calling it again
    /// is the remedy, not a look at the store's connection.
    pub fn is_contention(&self) -> bool {
        match self {
            Self::Contention(_) => true,
            Self::Engine { kind, .. } => matches!(kind, EngineFailure::Conflict | EngineFailure::Contention),
            _ => false,
        }
    }
}

/// `text` without the source locations Lance appends to its errors (`, /root/.cargo/registry/…/
/// conflict_resolver.rs:855:38`): the user reading an error has no use for them, and a debug log of the
/// error itself keeps them.
fn without_source_locations(text: &str) -> std::borrow::Cow<'_, str> {
    static LOCATION: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| regex::Regex::new(r",? ?/[^\s,]+\.rs:\d+:\d+").expect("valid regex"));
    LOCATION.replace_all(text, "")
}

/// Where a store lives, settled once from `--db`: a directory on this machine, or a prefix in an object
/// store. Everything that differs between the two (locks, read consistency, what a missing store
/// means, the hints of errors) asks this, not the text of the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A local directory (a `file://` URL is read as its path; made absolute when the store opens).
    Local(String),
    /// An object-store URI as given, e.g. `s3://bucket/prefix`: any `scheme://` other than `file://`.
    Bucket(String),
}

impl Location {
    /// Reads a `--db` value: a `file://` URL is its local path, any other `scheme://…` a bucket, anything
    /// else a local path.
    ///
    /// # Errors
    /// A `file://` URL that names no local path (`file://host/x`), as a message naming it.
    pub fn parse(db: &str) -> Result<Self, String> {
        match url::Url::parse(db) {
            Ok(url) if url.scheme() == "file" => url
                .to_file_path()
                .map(|p| Self::Local(p.to_string_lossy().into_owned()))
                .map_err(|()| format!("{db} is not a local file:// URL")),
            _ if db.contains("://") => Ok(Self::Bucket(db.to_string())),
            _ => Ok(Self::Local(db.to_string())),
        }
    }

    pub fn is_local(&self) -> bool {
        matches!(self, Self::Local(_))
    }

    /// The directory's path, or the URI.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Local(path) | Self::Bucket(path) => path,
        }
    }
}

/// Whether `db` names a store in a bucket.
fn in_bucket(db: &str) -> bool {
    matches!(Location::parse(db), Ok(Location::Bucket(_)))
}

/// What to check when the store at `path` does not open: a directory's writability, or a bucket's
/// endpoint, name and credentials.
fn missing_hint(path: &str) -> &'static str {
    if is_a_file(path) {
        IS_A_FILE
    } else if in_bucket(path) {
        "check the bucket and prefix of --db (ASTRA_DB)"
    } else {
        "check --db (ASTRA_DB)"
    }
}

/// A `--db` that names a file, not a directory: what a store directory is, said at once.
const IS_A_FILE: &str = "that is a file: --db (ASTRA_DB) names a store directory";

/// Whether `path` (a local path or `file://` URL; a bucket's URI is never one) is something other than
/// a directory.
fn is_a_file(path: &str) -> bool {
    let path = path.strip_prefix("file://").unwrap_or(path);
    std::fs::metadata(path).is_ok_and(|m| !m.is_dir())
}

fn open_hint(path: &str) -> &'static str {
    if is_a_file(path) {
        IS_A_FILE
    } else if in_bucket(path) {
        "check the bucket and prefix in --db, the endpoint (AWS_ENDPOINT_URL, AWS_ALLOW_HTTP for plain HTTP) \
         and the credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)"
    } else {
        "set --db or ASTRA_DB to a writable directory"
    }
}

/// The memory layer's rules for text that enters the store other than through a memory (an import),
/// handed in by the caller so the store does not know them (`crate::memory::IMPORT_RULES`).
#[derive(Clone, Copy)]
pub struct ImportRules {
    /// `text` with secrets replaced; borrowed when nothing changed.
    pub redact: fn(&str) -> std::borrow::Cow<'_, str>,
    /// Archival tags as inserts store them.
    pub normalize_tags: fn(&[String]) -> Vec<String>,
}

/// The filter of a search over the fixes of one actor, across all of that actor's projects.
#[derive(Debug, Clone, Default)]
pub struct FixFilter {
    /// The only actor whose fixes are searched (trusted configuration).
    pub actor_id: String,
    /// Exact, case-insensitive pre-filter on the error type.
    pub error_type: Option<String>,
}

/// A hybrid search request over fixes.
pub type FixQuery = Query<FixFilter>;

/// The `fixes` table.
#[async_trait]
pub trait FixStore: Searchable<FixRecord> {
    /// Inserts `fix` with its embedding, or replaces the row with the same `memory_id` (idempotent).
    /// Returns `true` when a new row was created. Returns only after the write is committed (durable).
    async fn upsert_fix(&self, fix: &FixRecord, vector: &[f32]) -> Result<bool, StoreError>;
    /// The verified fixes of `actor_id` in `project`, the most recently confirmed first, at most `limit`.
    async fn recent_fixes(&self, actor_id: &str, project: &str, limit: usize) -> Result<Vec<FixRecord>, StoreError>;
    /// Replaces the receipt of each fix of `actor_id` in `renewed` (matched by `memory_id`), in one
    /// commit, keeping its other columns and vector; a row deleted or stored again since the caller read
    /// it (another `updated_at`) is left as it is. Returns how many rows were replaced.
    async fn renew_fixes(&self, actor_id: &str, renewed: &[FixRecord]) -> Result<u64, StoreError>;
    /// One fix of `actor_id` by id.
    async fn get_fix(&self, actor_id: &str, memory_id: Uuid) -> Result<Option<FixRecord>, StoreError>;
    /// Deletes one fix of `actor_id`; `true` when a row was removed.
    async fn delete_fix(&self, actor_id: &str, memory_id: Uuid) -> Result<bool, StoreError>;
}

/// The `uses` table: when a memory was returned, injected, or followed by passing tests. Append-only;
/// ids only, no text.
#[async_trait]
pub trait UseStore: Send + Sync {
    /// Stores `uses` (with the other writes into the table waiting in this process, in one commit); a
    /// use whose id is stored already (a session's credit of a memory) is left as it is.
    async fn record_uses(&self, uses: &[MemoryUse]) -> Result<(), StoreError>;
    /// The uses of `actor_id` of the memories `ids`, in no order.
    async fn uses_of(&self, actor_id: &str, ids: &[Uuid]) -> Result<Vec<MemoryUse>, StoreError>;
    /// Every use of `actor_id`, in no order.
    async fn actor_uses(&self, actor_id: &str) -> Result<Vec<MemoryUse>, StoreError>;
    /// The uses of `actor_id` in session `session_id`, in no order.
    async fn session_uses(&self, actor_id: &str, session_id: &str) -> Result<Vec<MemoryUse>, StoreError>;
}

/// A row of a searchable table: its id, and the filter its table is searched with.
pub trait SearchedRow: Clone + Send + Sync + 'static {
    type Filter: QueryFilter;
    /// The row's id (what fusion and the reads match rows by).
    fn id(&self) -> Uuid;
}

impl SearchedRow for Passage {
    type Filter = SearchFilter;
    fn id(&self) -> Uuid {
        self.id
    }
}

impl SearchedRow for ConversationItem {
    type Filter = SearchFilter;
    fn id(&self) -> Uuid {
        self.id
    }
}

impl SearchedRow for FixRecord {
    type Filter = FixFilter;
    fn id(&self) -> Uuid {
        self.memory_id
    }
}

/// A table a hybrid search runs over, in the three steps a search interleaves
/// (`memory::retrieval::Search`): the full-text rankings, the vector ranking, and the reading of the
/// rows it returns. One seam for the three searchable tables (fixes, archival passages, conversation
/// items); each memory searches through it with one call.
#[async_trait]
pub trait Searchable<T: SearchedRow>: Send + Sync {
    /// The full-text (BM25) rankings of `query.text`, one per indexed column (the vector is not read).
    async fn keyword(&self, query: &Query<T::Filter>) -> Result<KeywordRankings, StoreError>;
    /// The vector ranking of `query.vector`, each row with its cosine ([`Candidates::join`] adds the
    /// full-text rankings). Needs no full-text result, so a search runs it beside them.
    async fn nearest(&self, query: &Query<T::Filter>) -> Result<VectorRanking, StoreError>;
    /// The rows of `refs` that are still stored for `actor_id`, in the order of `refs`, each with its
    /// vector (`[f32; 384]`).
    async fn rows(&self, actor_id: &str, refs: &[RowRef]) -> Result<Vec<(T, Vec<f32>)>, StoreError>;
    /// Both rankings of a hybrid search with their rows read, one after the other (the evaluation and
    /// the smoke test read the rankings apart from fusion).
    async fn candidates(&self, query: &Query<T::Filter>) -> Result<Candidates<T>, StoreError> {
        let keyword = self.keyword(query).await?;
        let ranked = Candidates::join(self.nearest(query).await?, keyword);
        let refs: Vec<RowRef> = ranked.all().copied().collect();
        let rows = self.rows(query.filter.actor_id(), &refs).await?;
        Ok(ranked.with_rows(rows, T::id, &query.vector))
    }
}

/// A row of any searchable table with the cosine similarity of its vector to the query vector and its
/// rank in the ranking that holds it.
#[derive(Debug, Clone)]
pub struct Scored<T> {
    pub row: T,
    /// Cosine similarity in [-1, 1]; NaN in a full-text ranking before the row is read.
    pub cosine: f32,
    /// The ranking's own score: the cosine for the vector ranking, Lance's BM25 `_score` (≥ 0, higher is
    /// better) for the full-text rankings. NaN when the store gave none.
    pub score: f32,
    /// 1-based rank in its ranking by that ranking's own score (cosine, or BM25 for the full-text
    /// rankings). Rows with equal scores share the best rank of their group ("1224", standard competition
    /// ranking), so the order Lance returns ties in decides nothing: fusion breaks them by the other
    /// rankings. Two passages with the same words in another order tie on BM25.
    pub rank: usize,
}

/// Standard competition ranks ("1224") for `scores`, which are best first: each score gets 1 + the
/// number of scores before it that differ from it, so equal neighbours share a rank. NaN counts as its
/// own value (never equal).
pub fn competition_ranks(scores: impl IntoIterator<Item = f32>) -> Vec<usize> {
    let mut ranks = Vec::new();
    let mut previous: Option<f32> = None;
    for (i, score) in scores.into_iter().enumerate() {
        let rank = match (previous, ranks.last()) {
            (Some(p), Some(&r)) if p == score => r,
            _ => i + 1,
        };
        ranks.push(rank);
        previous = Some(score);
    }
    ranks
}

/// The rankings a hybrid search fuses, each best first, filtered. As [`RowRef`]s (before the rows are
/// read), the full-text rankings' `cosine` is NaN: only the vector ranking knows it then.
#[derive(Debug, Clone)]
pub struct Candidates<T> {
    /// Nearest neighbours by cosine distance.
    pub by_vector: Vec<Scored<T>>,
    /// Full-text (BM25) matches of the query text; empty when nothing matches. For conversation items
    /// this ranks the item in its context (`search_text`).
    pub by_keyword: Vec<Scored<T>>,
    /// The second full-text ranking, of exact evidence: for conversation items BM25 over the item's own
    /// text (`embedded_text`), so an item that itself contains a rare identifier outranks its neighbours
    /// whose context merely quotes it; for fixes BM25 of the query's identifier phrases (two parts of an
    /// identifier side by side, `lock ttl`), which tells look-alike fixes apart. Empty elsewhere.
    pub by_exact: Vec<Scored<T>>,
    /// What the query could reach in `by_keyword` ([`KeywordRankings::reach`]); `None` when not known.
    pub keyword_reach: Option<f32>,
    /// How long the store took to produce them.
    pub timings: StageTimings,
}

impl Candidates<RowRef> {
    /// The vector ranking and the full-text rankings of one query as the candidates a search fuses: the
    /// first full-text ranking is `by_keyword`, the second (conversation items and fixes) `by_exact`.
    pub fn join(vector: VectorRanking, keyword: KeywordRankings) -> Self {
        let mut rankings = keyword.rankings.into_iter();
        Candidates {
            by_vector: vector.ranked,
            by_keyword: rankings.next().unwrap_or_default(),
            by_exact: rankings.next().unwrap_or_default(),
            keyword_reach: keyword.reach,
            timings: StageTimings { vector_ms: vector.ms, keyword_ms: keyword.ms, rows_ms: 0.0 },
        }
    }

    /// Every ranked row, once, vector ranking first.
    pub fn all(&self) -> impl Iterator<Item = &RowRef> {
        let mut seen = std::collections::HashSet::new();
        self.by_vector
            .iter()
            .chain(&self.by_keyword)
            .chain(&self.by_exact)
            .map(|s| &s.row)
            .filter(move |r| seen.insert(r.id))
    }

    /// The same rankings over `rows` (read for these refs, matched by `id`), each scored by the cosine of
    /// its vector with `query`; refs whose row is gone are dropped.
    pub fn with_rows<T: Clone>(
        self,
        rows: Vec<(T, Vec<f32>)>,
        id: impl Fn(&T) -> Uuid,
        query: &[f32],
    ) -> Candidates<T> {
        let by_id: std::collections::HashMap<Uuid, (T, f32)> =
            rows.into_iter().map(|(row, v)| (id(&row), (row, crate::embed::cosine(query, &v)))).collect();
        let map = |ranking: Vec<Scored<RowRef>>| {
            ranking
                .into_iter()
                .filter_map(|s| {
                    by_id.get(&s.row.id).map(|(row, cosine)| Scored {
                        row: row.clone(),
                        cosine: *cosine,
                        score: s.score,
                        rank: s.rank,
                    })
                })
                .collect()
        };
        Candidates {
            by_vector: map(self.by_vector),
            by_keyword: map(self.by_keyword),
            by_exact: map(self.by_exact),
            keyword_reach: self.keyword_reach,
            timings: self.timings,
        }
    }
}

impl<T> Default for Candidates<T> {
    fn default() -> Self {
        Self {
            by_vector: Vec::new(),
            by_keyword: Vec::new(),
            by_exact: Vec::new(),
            keyword_reach: None,
            timings: StageTimings::default(),
        }
    }
}

/// Wall-clock time of a hybrid search's store stages, in ms. Logged at debug level by the searches
/// (target `astra_mcp::search`), beside the query's embedding time.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StageTimings {
    /// The vector (ANN or exact) query, ms. A search starts it once the query is embedded, beside the
    /// full-text queries when they are still running.
    pub vector_ms: f64,
    /// The full-text (BM25) queries, ms, one per indexed column, one after another. A search runs them
    /// while it embeds the query and ranks by vector, so they overlap both.
    pub keyword_ms: f64,
    /// Reading the rows of the hits a search returns (after fusion) that were not read beside the
    /// vector ranking ([`KeywordRankings::tops`]), ms.
    pub rows_ms: f64,
}

/// A ranked row before its columns are read: a search ranks and fuses these, then reads only the rows
/// it returns ([`Searchable::rows`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowRef {
    pub id: Uuid,
    /// Lance's address of the row (`_rowid`) in the table version the ranking read; a fetch checks the
    /// id it finds there, since a compaction in between moves rows.
    pub row_id: u64,
}

/// The full-text (BM25) rankings of one query: one per indexed column, each best first. They need no
/// query embedding, so a search fetches them while the query is embedded and ranked by vector, and joins
/// them with the vector ranking afterwards ([`Candidates::join`]).
#[derive(Debug, Clone, Default)]
pub struct KeywordRankings {
    /// Each ranking's refs with their [`Scored::rank`] by BM25; `cosine` is NaN (not known yet).
    pub rankings: Vec<Vec<Scored<RowRef>>>,
    /// What the first ranking's query could reach, for fixes (`None` elsewhere, or when not known): the
    /// sum of each query word's best BM25 score in the column, a word no fix holds counted at the best
    /// word's score (a word no row holds is rarer than any that matched). Fusion divides the ranking's scores by
    /// it ([`crate::memory::fusion`]), so a row that shares one incidental word with the query counts for
    /// that word's share, not for the whole query.
    pub reach: Option<f32>,
    /// How long the queries took, ms.
    pub ms: f64,
}

impl KeywordRankings {
    /// The first `n` refs of each ranking, once each: the rows a search reads while its vector ranking
    /// runs, since with the fusion's weights its hits are nearly always among them.
    pub fn tops(&self, n: usize) -> Vec<RowRef> {
        let mut seen = std::collections::HashSet::new();
        self.rankings.iter().flat_map(|r| r.iter().take(n)).map(|s| s.row).filter(|r| seen.insert(r.id)).collect()
    }
}

/// The vector ranking of one query: refs best first by cosine with the query (`Scored::cosine`), filtered.
#[derive(Debug, Clone, Default)]
pub struct VectorRanking {
    pub ranked: Vec<Scored<RowRef>>,
    /// How long the query took (ANN or exact search, the filter and the re-ranking), ms.
    pub ms: f64,
}

/// Filters of a search over archival passages or conversation items; every filter applies before ranking.
#[derive(Debug, Clone, Default)]
pub struct SearchFilter {
    /// The only actor whose rows are searched (trusted configuration).
    pub actor_id: String,
    /// Rows of these sessions only (`None`: any).
    pub session_ids: Option<Vec<String>>,
    /// Rows carrying any of these tags (archival only; empty: any).
    pub tags_any: Vec<String>,
    /// Rows said by these roles (conversation items only; empty: any).
    pub roles: Vec<Role>,
    /// Rows created at or after this time.
    pub start: Option<DateTime<Utc>>,
    /// Rows created at or before this time.
    pub end: Option<DateTime<Utc>>,
    /// Include archival passages a later memory superseded.
    pub include_superseded: bool,
}

/// A hybrid search request over archival passages or conversation items.
pub type TextQuery = Query<SearchFilter>;

/// A hybrid search request over one searchable table ([`Searchable`]): one query text, one query
/// embedding, the table's filter `F`, applied before ranking.
#[derive(Debug, Clone)]
pub struct Query<F> {
    pub filter: F,
    /// The query embedding, `[f32; 384]`, L2-normalized (empty until the query is embedded).
    pub vector: Vec<f32>,
    /// The query text for the full-text (BM25) rankings; blank for vector-only.
    pub text: String,
    /// Candidates to return from each ranking.
    pub limit: usize,
}

impl<F> Query<F> {
    /// The same request with the query's embedding.
    pub fn with_vector(self, vector: Vec<f32>) -> Self {
        Self { vector, ..self }
    }
}

/// The filter of a searchable table's queries: it names the one actor whose rows are ranked and read.
pub trait QueryFilter: Clone + Send + Sync + 'static {
    fn actor_id(&self) -> &str;
}

impl QueryFilter for SearchFilter {
    fn actor_id(&self) -> &str {
        &self.actor_id
    }
}

impl QueryFilter for FixFilter {
    fn actor_id(&self) -> &str {
        &self.actor_id
    }
}

/// The `archival` table (MemGPT archival memory).
#[async_trait]
pub trait ArchivalStore: Searchable<Passage> {
    /// Inserts the passages whose id is not stored yet; returns the ids that were new. Rows whose id is
    /// already present are left as they are (identical text is one row). Durable on return.
    async fn insert_passages(&self, rows: &[(Passage, Vec<f32>)]) -> Result<Vec<Uuid>, StoreError>;
    /// One passage of `actor_id` by id.
    async fn get_passage(&self, actor_id: &str, id: Uuid) -> Result<Option<Passage>, StoreError>;
    /// Which of `ids` are stored (for `actor_id`; ids embed the actor, so no other actor's can match).
    async fn existing_passage_ids(
        &self,
        actor_id: &str,
        ids: &[Uuid],
    ) -> Result<std::collections::HashSet<Uuid>, StoreError>;
    /// Adds `tags` to a stored passage (a repeated insert of its text with new tags), in their order, as
    /// long as it has fewer than [`crate::domain::MAX_PASSAGE_TAGS`]; returns the passage as stored
    /// afterwards, `None` when it is gone.
    async fn add_passage_tags(&self, actor_id: &str, id: Uuid, tags: &[String]) -> Result<Option<Passage>, StoreError>;
    /// The current (not superseded) passages of `actor_id` in `project` carrying any of `tags_any`, the
    /// newest first, at most `limit`.
    async fn recent_passages(
        &self,
        actor_id: &str,
        project: &str,
        tags_any: &[String],
        limit: usize,
    ) -> Result<Vec<Passage>, StoreError>;
    /// Writes a distillation run's changes in one commit: all of them or none. `new` rows are inserted
    /// (a row with the same id stored meanwhile keeps its creation time, and gains the new tags);
    /// `changed` rows replace stored rows of the same id (with their stored vector when given `None`),
    /// keeping tags added meanwhile, and are skipped when their row is gone (forgotten since it was read:
    /// never resurrected). Durable on return.
    async fn apply_passages(
        &self,
        new: &[(Passage, Vec<f32>)],
        changed: &[(Passage, Option<Vec<f32>>)],
    ) -> Result<AppliedPassages, StoreError>;
    /// How many passages of `actor_id` were last written exactly at `at` (`updated_at`, µs).
    async fn count_written_at(&self, actor_id: &str, at: DateTime<Utc>) -> Result<usize, StoreError>;
}

/// What [`ArchivalStore::apply_passages`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AppliedPassages {
    /// New rows inserted.
    pub inserted: usize,
    /// Stored rows replaced (changed rows, and new rows whose id was stored meanwhile).
    pub replaced: usize,
    /// Changed rows skipped because their row was gone.
    pub skipped: usize,
}

/// The `distill_runs` table: the state of every distillation run.
#[async_trait]
pub trait DistillRunStore: Send + Sync {
    /// Writes `run`, replacing the row of the same run id. Durable on return.
    async fn put_run(&self, run: &DistillRun) -> Result<(), StoreError>;
    /// The runs of `actor_id` (every actor's when `None`), oldest first.
    async fn runs(&self, actor_id: Option<&str>) -> Result<Vec<DistillRun>, StoreError>;
    /// The lock of `actor_id`'s distillation runs, taken without waiting: `None` while another run of the
    /// actor holds it (in this process, in another on the same machine for a local store, on any
    /// machine for a store on object storage). Held until [`RunLock::release`].
    async fn try_lock_runs(&self, actor_id: &str) -> Result<Option<RunLock>, StoreError>;
}

/// A held lock of [`DistillRunStore::try_lock_runs`]. Release it with [`Self::release`]; dropping it
/// releases a local lock too, but a lease on object storage then stays until it expires.
pub struct RunLock {
    #[allow(dead_code, reason = "held for its Drop")]
    guard: Option<Box<dyn std::any::Any + Send + Sync>>,
    release: Option<futures::future::BoxFuture<'static, ()>>,
}

impl RunLock {
    /// Wraps the guard that releases the lock when dropped.
    pub fn new(guard: impl std::any::Any + Send + Sync) -> Self {
        Self { guard: Some(Box::new(guard)), release: None }
    }

    /// A lock released by running `release` (a request to the store).
    pub fn with_release(release: futures::future::BoxFuture<'static, ()>) -> Self {
        Self { guard: None, release: Some(release) }
    }

    /// Releases the lock.
    pub async fn release(mut self) {
        if let Some(release) = self.release.take() {
            release.await;
        }
    }
}

/// The `session_items` table (MemGPT recall storage: every stored conversation item).
#[async_trait]
pub trait ConversationStore: Searchable<ConversationItem> {
    /// Inserts the items whose id is not stored yet; returns how many were new. Durable on return.
    async fn insert_items(&self, rows: &[(ConversationItem, Vec<f32>)]) -> Result<usize, StoreError>;
    /// Which of `ids` are stored already (so callers embed only new items).
    async fn existing_item_ids(&self, ids: &[Uuid]) -> Result<std::collections::HashSet<Uuid>, StoreError>;
    /// Which of `ids` were forgotten (they must not be stored again, nor quoted in other items' context).
    async fn forgotten_item_ids(&self, ids: &[Uuid]) -> Result<std::collections::HashSet<Uuid>, StoreError>;
    /// The actor whose items a session holds (the one who created it), if it has any.
    async fn session_owner(&self, session_id: &str) -> Result<Option<String>, StoreError>;
    /// Every item of `actor_id` said by one of `roles`, at or after `since` when given, ordered by
    /// session and turn (what a distillation run reads).
    async fn actor_items(
        &self,
        actor_id: &str,
        roles: &[Role],
        since: Option<DateTime<Utc>>,
    ) -> Result<Vec<ConversationItem>, StoreError>;
    /// The highest turn stored for a session of `actor_id`, if any.
    async fn last_turn(&self, actor_id: &str, session_id: &str) -> Result<Option<i64>, StoreError>;
}

/// How a change of a core block is computed from its current version (`None`: never written): the new
/// value, or a refusal message for the agent.
pub type BlockEdit<'a> = dyn Fn(Option<&CoreBlockVersion>) -> Result<String, String> + Send + Sync + 'a;

/// The `core_blocks` table: every version of every core memory block.
#[async_trait]
pub trait CoreBlockStore: Send + Sync {
    /// The latest version of a block, `None` when it was never written.
    async fn current_block(
        &self,
        actor_id: &str,
        project: &str,
        section: &str,
    ) -> Result<Option<CoreBlockVersion>, StoreError>;
    /// Applies `edit` to the latest version and writes the result as the next version, atomically with
    /// respect to every other writer of the store (read, edit and write happen under one lock on the
    /// block's store). `Ok(Err(message))` when `edit` refused. An edit that leaves the value as it is writes
    /// nothing and returns the latest version. Durable on return.
    async fn update_block(
        &self,
        template: &CoreBlockVersion,
        edit: &BlockEdit<'_>,
    ) -> Result<Result<CoreBlockVersion, String>, StoreError>;
    /// Deletes `version` of a block from its history: the row leaves every read at once, and its text the
    /// store's files at the next compaction that rewrites its fragment (`memory optimize`). The block's
    /// latest version (its current value) stays: the next change would take its number again, and a
    /// page that showed the block at that number would then save over a change it never saw.
    async fn purge_block_version(
        &self,
        actor_id: &str,
        project: &str,
        section: &str,
        version: i64,
    ) -> Result<Purge, StoreError>;
    /// Every version of a block, oldest first.
    async fn block_history(
        &self,
        actor_id: &str,
        project: &str,
        section: &str,
    ) -> Result<Vec<CoreBlockVersion>, StoreError>;
}

/// What [`CoreBlockStore::purge_block_version`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purge {
    Purged,
    /// The block has no such version (never written, or purged already).
    Absent,
    /// The version is the block's current value: kept.
    Current,
}

/// One page of a listing and how many rows the whole listing has.
#[derive(Debug, Clone)]
pub struct Page<T> {
    pub rows: Vec<T>,
    /// Rows in the listing, all pages together.
    pub total: usize,
}

/// One conversation session of an actor, as the memory browser lists it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SessionSummary {
    pub session_id: String,
    pub project: String,
    /// Items stored for the session.
    pub items: usize,
    pub first_at: DateTime<Utc>,
    pub last_at: DateTime<Utc>,
}

/// A memory's table, id and time, with its text on one line (`memory list`, the browser's last writes).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ListedRow {
    pub table: &'static str,
    pub id: String,
    pub actor_id: String,
    pub project: String,
    pub session_id: String,
    /// RFC 3339, UTC.
    pub created_at: String,
    /// The row's main text on one line, at most 100 characters, control characters escaped.
    pub preview: String,
}

/// Size and shape of one table (`memory stats`, the browser's overview).
#[derive(Debug, Clone, serde::Serialize)]
pub struct TableStats {
    pub table: &'static str,
    pub rows: usize,
    /// Rows marked deleted but not yet compacted away.
    pub deleted_rows: Option<usize>,
    /// Bytes of data and index files the manifest records.
    pub bytes: usize,
    pub fragments: usize,
    pub small_fragments: usize,
    pub indices: usize,
    /// Segments of the vector index (`None`: no vector index), at most
    /// [`lance::MAX_VECTOR_INDEX_SEGMENTS`] after upkeep.
    pub vector_index_segments: Option<usize>,
    /// Versions (commits) still on disk; `optimize` prunes old ones.
    pub versions: usize,
}

/// What to tell someone who found nothing as `actor`: which other actors the store holds memories of
/// (`counts`: [`BrowseStore::actor_counts`]), e.g. "the store holds memories of other actors: `ann` (12
/// rows), `bob` (3 rows); pass --actor ID (ASTRA_ACTOR) to see theirs", or that it holds none at all.
/// `None` when `actor` is the only one with memories.
pub fn other_actors_note(actor: &str, counts: &[(String, usize)]) -> Option<String> {
    let others: Vec<String> = counts
        .iter()
        .filter(|(a, _)| a != actor)
        .take(10)
        .map(|(a, n)| {
            format!("`{}` ({n} {})", crate::domain::text::escape_controls(a), if *n == 1 { "row" } else { "rows" })
        })
        .collect();
    match (others.is_empty(), counts.is_empty()) {
        (_, true) => Some("the store holds no memories of any actor yet".to_string()),
        (true, false) => None,
        (false, false) => {
            let more = counts.iter().filter(|(a, _)| a != actor).count().saturating_sub(others.len());
            let more = if more > 0 { format!(" and {more} more") } else { String::new() };
            Some(format!(
                "the store holds memories of other actors: {}{more}; pass --actor ID (ASTRA_ACTOR) to see theirs",
                others.join(", ")
            ))
        }
    }
}

/// An actor's memories counted: per table and project, per day, and the newest writes.
#[derive(Debug, Clone, Default)]
pub struct Census {
    /// `(table, project, rows)`, by table then project; `core_blocks` counts block versions.
    pub per_project: Vec<(&'static str, String, usize)>,
    /// Rows created per UTC day (every table), oldest day first, days without rows left out.
    pub per_day: Vec<(chrono::NaiveDate, usize)>,
    /// The newest rows of every table, newest first.
    pub latest: Vec<ListedRow>,
}

/// What the memory browser reads besides searches (docs/ui.md): one actor's rows a page at a time, newest
/// first, and the counts and sizes of its overview. A page reads two narrow columns of the listing and
/// then only its own rows in full.
#[async_trait]
pub trait BrowseStore: DistillRunStore {
    /// The actor's fixes, newest first.
    async fn fix_page(&self, actor_id: &str, offset: usize, limit: usize) -> Result<Page<FixRecord>, StoreError>;
    /// The actor's fix `id`.
    async fn fix(&self, actor_id: &str, id: Uuid) -> Result<Option<FixRecord>, StoreError>;
    /// The actor's passages (superseded ones too), newest first; those carrying `tag` when given.
    async fn passage_page(
        &self,
        actor_id: &str,
        tag: Option<&str>,
        offset: usize,
        limit: usize,
    ) -> Result<Page<Passage>, StoreError>;
    /// The actor's passage `id`.
    async fn passage(&self, actor_id: &str, id: Uuid) -> Result<Option<Passage>, StoreError>;
    /// The passages that `id` superseded (their `superseded_by` is `id`), newest first.
    async fn superseded_by(&self, actor_id: &str, id: Uuid) -> Result<Vec<Passage>, StoreError>;
    /// The actor's conversation sessions, the most recently active first.
    async fn session_page(
        &self,
        actor_id: &str,
        offset: usize,
        limit: usize,
    ) -> Result<Page<SessionSummary>, StoreError>;
    /// The actor's conversation item `id`.
    async fn item(&self, actor_id: &str, id: Uuid) -> Result<Option<ConversationItem>, StoreError>;
    /// The items of one session of the actor, in turn order.
    async fn session_items_page(
        &self,
        actor_id: &str,
        session_id: &str,
        offset: usize,
        limit: usize,
    ) -> Result<Page<ConversationItem>, StoreError>;
    /// Counts per table and project and per day, and the `latest` newest rows.
    async fn census(&self, actor_id: &str, latest: usize) -> Result<Census, StoreError>;
    /// Size and shape of every table (of the whole store: every actor's rows).
    async fn table_stats(&self) -> Result<Vec<TableStats>, StoreError>;
    /// Every actor with rows in the store and its rows in all tables, most rows first.
    async fn actor_counts(&self) -> Result<Vec<(String, usize)>, StoreError>;
    /// The actor's memories as the JSON lines of `astra-mcp memory export` (docs/storage.md).
    async fn export_actor(&self, actor_id: &str) -> Result<Vec<u8>, StoreError>;
}

/// Deleting any memory by id (`memory_forget`, `memory rm`).
#[async_trait]
pub trait ForgetStore: Send + Sync {
    /// Deletes the fix, passage or conversation item `id` of `actor_id` from its table and that table's
    /// indexes. Returns the tier it was in (`fixes`, `archival`, `conversation`), `None` when the actor
    /// has no such memory.
    async fn forget(&self, actor_id: &str, id: Uuid) -> Result<Option<&'static str>, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Who else holds memories, for an actor that found nothing: names and counts, or that the store
    /// is empty; nothing when the actor is the only one.
    #[test]
    fn the_other_actors_are_named_with_their_rows() {
        let counts = vec![("ann".to_string(), 12), ("local".to_string(), 2), ("bob".to_string(), 1)];
        assert_eq!(
            other_actors_note("local", &counts).unwrap(),
            "the store holds memories of other actors: `ann` (12 rows), `bob` (1 row); pass --actor ID (ASTRA_ACTOR) \
             to see theirs"
        );
        assert_eq!(other_actors_note("ann", &counts[..1]), None);
        assert_eq!(other_actors_note("x", &[]).unwrap(), "the store holds no memories of any actor yet");
    }

    /// The source locations Lance appends to its errors are left out of what a user reads; the rest of
    /// the message stays whole.
    #[test]
    fn a_store_error_reads_without_lance_s_source_locations() {
        let lance = "lance error: LanceError(IO): Generic S3 error: Failed to resolve region for bucket 'bench', \
                     /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/lance-io-14.0.2/src/object_store/\
                     providers/aws.rs:342:13";
        let open = StoreError::Open { path: "s3://bench/store".into(), message: lance.into() };
        assert!(
            open.to_string().starts_with(
                "cannot open the memory store at s3://bench/store: lance error: LanceError(IO): Generic S3 error: \
                 Failed to resolve region for bucket 'bench' (check the bucket"
            ),
            "{open}"
        );
        let conflict = "Retryable commit conflict for version 41: preempted. Please retry., \
                        /root/.cargo/registry/src/x/lance-14.0.2/src/io/commit/conflict_resolver.rs:855:38";
        assert_eq!(
            StoreError::Backend(conflict.into()).to_string(),
            "memory store operation failed: Retryable commit conflict for version 41: preempted. Please retry."
        );
        assert!(!StoreError::Backend(conflict.into()).is_contention(), "the cause is read from variants, not words");
        let engine = |kind| StoreError::Engine { kind, source: std::sync::Arc::new(std::fmt::Error) };
        assert!(engine(EngineFailure::Conflict).is_contention() && engine(EngineFailure::Contention).is_contention());
        assert!(!engine(EngineFailure::MissingFile).is_contention() && !engine(EngineFailure::Other).is_contention());
    }

    /// `--db` read once: `file://` is a local path, another scheme a bucket, a bare path local.
    #[test]
    fn a_db_value_is_a_directory_or_a_bucket() {
        assert_eq!(Location::parse("/var/db"), Ok(Location::Local("/var/db".into())));
        assert_eq!(Location::parse("db"), Ok(Location::Local("db".into())));
        assert_eq!(Location::parse("file:///var/db"), Ok(Location::Local("/var/db".into())));
        assert_eq!(Location::parse("s3://b/p"), Ok(Location::Bucket("s3://b/p".into())));
        assert!(Location::parse("file://host/db").unwrap_err().contains("not a local file:// URL"));
        assert_eq!(missing_hint("file:///var/db"), "check --db (ASTRA_DB)");
        assert_eq!(missing_hint("s3://b/p"), "check the bucket and prefix of --db (ASTRA_DB)");
    }

    #[test]
    fn equal_scores_share_the_best_rank_of_their_group() {
        assert_eq!(competition_ranks([9.0, 7.5, 7.5, 7.5, 3.0, 3.0, 1.0]), vec![1, 2, 2, 2, 5, 5, 7]);
        assert_eq!(competition_ranks([0.9, 0.8, 0.7]), vec![1, 2, 3], "no ties: positions");
        assert_eq!(competition_ranks([f32::NAN, f32::NAN]), vec![1, 2], "NaN never ties");
        assert_eq!(competition_ranks([]), Vec::<usize>::new());
    }

    #[test]
    fn tops_are_the_first_refs_of_each_ranking_once() {
        let r = |n: u128| RowRef { id: Uuid::from_u128(n), row_id: n as u64 };
        let ranking = |ns: &[u128]| {
            ns.iter()
                .enumerate()
                .map(|(i, &n)| Scored { row: r(n), cosine: f32::NAN, score: f32::NAN, rank: i + 1 })
                .collect()
        };
        let keyword =
            KeywordRankings { rankings: vec![ranking(&[1, 2, 3]), ranking(&[2, 4, 5]), vec![]], reach: None, ms: 0.0 };
        assert_eq!(keyword.tops(2), vec![r(1), r(2), r(4)]);
        assert_eq!(keyword.tops(0), vec![]);
        assert_eq!(keyword.tops(9).len(), 5);
    }
}
