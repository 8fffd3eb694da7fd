//! Storage seams: what the memory layer needs from a table of fixes, independent of the backend.
//! The only backend is [`lance::LanceStore`] (one embedded LanceDB directory, design.md §4).

pub mod lance;

use async_trait::async_trait;
use uuid::Uuid;

use crate::domain::FixRecord;

/// Store failures. Messages name the setting that fixes them where there is one.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The directory could not be opened or its tables created.
    #[error("cannot open the memory store at {path}: {message} (set --db or ASTRA_DB to a writable directory)")]
    Open { path: String, message: String },
    /// The store was built with another embedding model; its vectors are not comparable with ours.
    #[error(
        "the memory store at {path} was built with embedding model `{found}`, but this astra-mcp embeds with `{expected}`: \
         point --db (ASTRA_DB) at a new directory, or open this one with the astra-mcp version that built it"
    )]
    ModelMismatch { path: String, found: String, expected: String },
    /// The store was written by a newer (or unknown) format.
    #[error(
        "the memory store at {path} has format version {found}; this astra-mcp reads version {expected}: upgrade astra-mcp"
    )]
    FormatVersion { path: String, found: String, expected: String },
    /// A backend operation failed (I/O, commit conflict after retries, query error).
    #[error("memory store operation failed: {0}")]
    Backend(String),
    /// A stored row could not be decoded.
    #[error("memory store row is unreadable ({table}.{column}): {message}")]
    Corrupt { table: &'static str, column: &'static str, message: String },
}

/// A hybrid search request over the fixes of one actor, across all of that actor's projects.
#[derive(Debug, Clone)]
pub struct FixQuery {
    pub actor_id: String,
    /// Exact, case-insensitive pre-filter on the error type.
    pub error_type: Option<String>,
    /// The query embedding, `[f32; 384]`, L2-normalized.
    pub vector: Vec<f32>,
    /// The query text for the full-text (BM25) ranking.
    pub text: String,
    /// Candidates to return from each ranking.
    pub limit: usize,
}

/// A stored fix with the cosine similarity of its vector to the query vector.
#[derive(Debug, Clone)]
pub struct ScoredFix {
    pub record: FixRecord,
    /// Cosine similarity in [-1, 1].
    pub cosine: f32,
}

/// The two rankings a hybrid search fuses, each best first.
#[derive(Debug, Clone, Default)]
pub struct FixCandidates {
    /// Nearest neighbours by cosine distance.
    pub by_vector: Vec<ScoredFix>,
    /// Full-text (BM25) matches of the query text; empty when nothing matches.
    pub by_keyword: Vec<ScoredFix>,
}

/// The `fixes` table.
#[async_trait]
pub trait FixStore: Send + Sync {
    /// Inserts `fix` with its embedding, or replaces the row with the same `memory_id` (idempotent).
    /// Returns `true` when a new row was created. Returns only after the write is committed (durable).
    async fn upsert_fix(&self, fix: &FixRecord, vector: &[f32]) -> Result<bool, StoreError>;
    /// Both rankings for a hybrid search, filters applied before ranking.
    async fn fix_candidates(&self, query: &FixQuery) -> Result<FixCandidates, StoreError>;
    /// One fix of `actor_id` by id.
    async fn get_fix(&self, actor_id: &str, memory_id: Uuid) -> Result<Option<FixRecord>, StoreError>;
    /// Deletes one fix of `actor_id`; `true` when a row was removed.
    async fn delete_fix(&self, actor_id: &str, memory_id: Uuid) -> Result<bool, StoreError>;
}
