//! The rules of astra-mcp's memory, independent of transport and storage engine: the fix-memory gates
//! (docs/tools.md, "The gates") and their per-session state ([`GateState`]), the tiers of MemGPT (core,
//! archival, recall), hybrid ranking, staleness, redaction. Tools call into this layer; it calls the
//! store and embedder seams.

pub mod archival;
pub mod conversation;
pub mod core;
pub mod fixes;
pub mod fusion;
pub mod gate;
pub mod injection;
pub mod project;
pub mod redact;
pub mod retrieval;
pub mod revalidate;
pub mod testrun;
pub mod uses;
pub mod workspace;

pub use archival::{ArchivalConfig, ArchivalMemory, DEFAULT_NEAR_DUPLICATE_COSINE, Ingested, Inserted, PassageSearch};
pub use conversation::{ConversationMemory, ConversationSearch, ImportCounts, ImportTarget, NewItem, ToolCallRecorder};
pub use core::{Block, BlockSpec, CoreMemory, Edited};
pub use fixes::{FixHit, FixMemory, FixMemoryConfig, RunTestsReport, StoreFixRequest, StoredFix};
pub use gate::GateState;
pub use retrieval::{DEFAULT_MIN_SCORE, Fusion, Hit, Ranked};
pub use uses::UseLog;

/// What an import of an export applies to each row: the redaction and tag normalisation of inserts.
pub const IMPORT_RULES: crate::store::ImportRules =
    crate::store::ImportRules { redact: redact::redact, normalize_tags: archival::normalize_tags };

/// Why a memory operation did not happen. The split decides what a client sees (see `tools`).
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// A rule refused the request; the message tells the agent what to do next (tool result, `isError`).
    #[error("{0}")]
    Refused(String),
    /// The embedding model is unavailable (missing files, failed load): the operator must act.
    #[error(transparent)]
    Embed(#[from] crate::embed::EmbedError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// Local I/O failed (running tests, hashing the workspace).
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
}

impl MemoryError {
    pub(crate) fn refused(message: impl Into<String>) -> Self {
        Self::Refused(message.into())
    }
}
