//! Archival memory (MemGPT's archival storage, arXiv:2310.08560 §2.2): passages an agent chooses to keep,
//! with provenance, searched on demand. Duplicates follow docs/storage.md: identical text (after
//! whitespace/case normalisation) is one row and a repeated insert returns it with `deduplicated: true`;
//! near-duplicates are stored and listed so the agent can decide.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::MemoryError;
use super::gate::GateState;
use super::redact::{for_storage, redact};
use super::retrieval::{Fusion, Hit, Search};
use crate::domain::{Passage, Scope, passage_id};
use crate::embed::LazyEmbedder;
use crate::store::{ArchivalStore, SearchFilter, Searchable, TextQuery};

/// Default cosine at or above which a stored passage counts as a near-duplicate of a new one.
pub const NEAR_DUPLICATE_COSINE: f32 = 0.95;
/// Texts per embedding call of a bulk ingest.
pub const INGEST_EMBED_BATCH: usize = 64;
/// Rows per commit of a bulk ingest.
pub const INGEST_WRITE_BATCH: usize = 2_048;
/// Near-duplicates listed in an insert result at most.
const MAX_NEAR_DUPLICATES: usize = 5;

/// Default of `--near-duplicate-cosine`: from this cosine similarity a stored passage of the project is
/// reported as a near-duplicate of a new one.
pub const DEFAULT_NEAR_DUPLICATE_COSINE: f32 = 0.95;

/// Settings of archival memory.
#[derive(Debug, Clone)]
pub struct ArchivalConfig {
    pub scope: Scope,
    /// Cosine similarity from which an existing passage is reported as a near-duplicate.
    pub near_duplicate_cosine: f32,
    pub fusion: Fusion,
}

/// What a bulk ingest ([`ArchivalMemory::ingest`]) did; counts of passages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ingested {
    /// Passages written.
    pub added: usize,
    /// Distinct texts of the file that were already stored (nothing written for them).
    pub already_stored: usize,
    /// Lines whose text an earlier line of the same call already gave (their tags joined its tags).
    pub repeated: usize,
}

/// What an insert did.
#[derive(Debug, Clone)]
pub struct Inserted {
    /// The stored passage: the new one, or the existing one when `deduplicated`.
    pub passage: Passage,
    /// True when identical text was already stored: no new passage was written (new tags were added to it).
    pub deduplicated: bool,
    /// Other passages of the same actor and project with cosine >= the near-duplicate threshold.
    pub near_duplicates: Vec<(Passage, f32)>,
    /// Tags of this insert (normalised) that the deduplicated passage did not take: it holds
    /// [`crate::domain::MAX_PASSAGE_TAGS`] already.
    pub tags_not_added: Vec<String>,
}

impl Inserted {
    /// The answer for text stored already as `kept`, to which this insert asked to add `tags`.
    fn deduplicated(kept: Passage, tags: &[String]) -> Self {
        let tags_not_added = tags.iter().filter(|t| !kept.tags.contains(t)).cloned().collect();
        Self { passage: kept, deduplicated: true, near_duplicates: Vec::new(), tags_not_added }
    }
}

/// A search request after validation.
#[derive(Debug, Clone, Default)]
pub struct PassageSearch {
    pub query: String,
    pub tags_any: Vec<String>,
    pub top_k: usize,
    pub start: Option<DateTime<Utc>>,
    pub end: Option<DateTime<Utc>>,
    /// Also rank passages a later memory superseded.
    pub include_superseded: bool,
}

/// The archival memory service of one actor and project.
pub struct ArchivalMemory {
    store: Arc<dyn ArchivalStore>,
    embedder: LazyEmbedder,
    config: ArchivalConfig,
}

/// Tags with secrets redacted, trimmed, lower-cased, de-duplicated, sorted.
pub fn normalize_tags(tags: &[String]) -> Vec<String> {
    let mut out: Vec<String> =
        tags.iter().map(|t| for_storage(t.trim()).to_lowercase()).filter(|t| !t.is_empty()).collect();
    out.sort();
    out.dedup();
    out
}

impl ArchivalMemory {
    pub fn new(store: Arc<dyn ArchivalStore>, embedder: LazyEmbedder, config: ArchivalConfig) -> Self {
        Self { store, embedder, config }
    }

    pub fn scope(&self) -> &Scope {
        &self.config.scope
    }

    /// Stores `text` (secrets redacted first) with `tags` and the session's provenance. Returns the
    /// existing passage with `deduplicated: true` when the same normalised text is stored already.
    pub async fn insert(
        &self,
        session: Option<&GateState>,
        text: &str,
        tags: &[String],
        source: &str,
    ) -> Result<Inserted, MemoryError> {
        let scope = &self.config.scope;
        let text = for_storage(text.trim());
        let id = passage_id(&scope.actor_id, &scope.project, &text);
        let tags = normalize_tags(tags);
        let vector = self.embedder.embed_query(&text).await?;
        // The same text has the same vector, so the near-duplicate search finds a stored copy first
        // (no lookup by id beside it: on object storage that read costs a request per fragment). A copy
        // it misses (superseded, or past its candidates) is skipped by the insert, which reports it.
        let (existing, near_duplicates) = self.nearest_stored(&vector, id).await?;
        // The same text again: nothing new is written, but new tags are kept. Whether it is still stored
        // is settled on the store's latest version (`add_passage_tags`): the search's view may lag
        // another machine that has just forgotten it, and then it is stored anew below.
        if existing.is_some()
            && let Some(kept) = self.store.add_passage_tags(&scope.actor_id, id, &tags).await?
        {
            return Ok(Inserted::deduplicated(kept, &tags));
        }
        let now = Utc::now();
        let passage = Passage {
            id,
            actor_id: scope.actor_id.clone(),
            project: scope.project.clone(),
            session_id: session.map(|s| s.session_id().to_string()).unwrap_or_default(),
            turn: session.map(|s| s.turn()),
            source: source.to_string(),
            tags,
            embedded_text: text.clone(),
            text,
            created_at: now,
            updated_at: now,
            superseded_by: None,
        };
        let row = [(passage.clone(), vector)];
        for _ in 0..2 {
            if !self.store.insert_passages(&row).await?.is_empty() {
                return Ok(Inserted { passage, deduplicated: false, near_duplicates, tags_not_added: Vec::new() });
            }
            // stored already: by another writer since our search, or a copy the search did not return
            // (absent from the latest version: the insert's view lagged a forget, and is current now)
            if let Some(kept) = self.store.add_passage_tags(&scope.actor_id, id, &passage.tags).await? {
                return Ok(Inserted::deduplicated(kept, &passage.tags));
            }
        }
        Err(MemoryError::Store(crate::store::StoreError::Contention(format!(
            "passage {id} was stored and forgotten again while this insert ran: call it again"
        ))))
    }

    /// Bulk insert (`memory ingest`): `passages` (text, tags) are redacted and de-duplicated, the ones
    /// not stored yet are embedded in batches of [`INGEST_EMBED_BATCH`] sorted by length (less padding
    /// per batch), and written in commits of [`INGEST_WRITE_BATCH`] rows. `progress(done, total)` after
    /// each commit. Near-duplicates are not reported. A text given more than once (after the same
    /// normalisation as [`passage_id`]) is stored once with the tags of all its copies; a passage already
    /// stored is skipped and keeps its tags.
    ///
    /// # Errors
    /// The model or the store; rows committed before the error stay stored (re-running skips them).
    pub async fn ingest(
        &self,
        passages: &[(String, Vec<String>)],
        source: &str,
        progress: &(dyn Fn(usize, usize) + Send + Sync),
    ) -> Result<Ingested, MemoryError> {
        let scope = &self.config.scope;
        let mut first: std::collections::HashMap<uuid::Uuid, usize> = std::collections::HashMap::new();
        let mut rows: Vec<(uuid::Uuid, String, Vec<String>)> = Vec::new();
        let mut repeated = 0;
        for (text, tags) in passages {
            let text = for_storage(text.trim());
            if text.is_empty() {
                continue;
            }
            let id = passage_id(&scope.actor_id, &scope.project, &text);
            match first.entry(id) {
                std::collections::hash_map::Entry::Occupied(at) => {
                    repeated += 1;
                    let merged = &mut rows[*at.get()].2;
                    for tag in normalize_tags(tags) {
                        if merged.len() < crate::domain::MAX_PASSAGE_TAGS && !merged.contains(&tag) {
                            merged.push(tag);
                        }
                    }
                    merged.sort();
                }
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(rows.len());
                    rows.push((id, text, normalize_tags(tags)));
                }
            }
        }
        let ids: Vec<uuid::Uuid> = rows.iter().map(|(id, _, _)| *id).collect();
        let stored = self.store.existing_passage_ids(&scope.actor_id, &ids).await?;
        let before = rows.len();
        rows.retain(|(id, _, _)| !stored.contains(id));
        let already = before - rows.len();
        rows.sort_by_key(|(_, text, _)| text.chars().count());
        let total = rows.len();
        let mut done = 0;
        for group in rows.chunks(INGEST_WRITE_BATCH) {
            let mut batch = Vec::with_capacity(group.len());
            for chunk in group.chunks(INGEST_EMBED_BATCH) {
                let vectors = self.embedder.embed_documents(chunk.iter().map(|(_, t, _)| t.clone()).collect()).await?;
                let now = Utc::now();
                for ((id, text, tags), vector) in chunk.iter().zip(vectors) {
                    let passage = Passage {
                        id: *id,
                        actor_id: scope.actor_id.clone(),
                        project: scope.project.clone(),
                        session_id: String::new(),
                        turn: None,
                        source: source.to_string(),
                        tags: tags.clone(),
                        embedded_text: text.clone(),
                        text: text.clone(),
                        created_at: now,
                        updated_at: now,
                        superseded_by: None,
                    };
                    batch.push((passage, vector));
                }
            }
            self.store.insert_passages(&batch).await?;
            done += group.len();
            progress(done, total);
        }
        Ok(Ingested { added: total, already_stored: already, repeated })
    }

    /// From the nearest of the actor's current passages to `vector` (twice [`MAX_NEAR_DUPLICATES`]): the
    /// one with `id` if among them, and the others of this project with cosine at or above the
    /// near-duplicate threshold, at most [`MAX_NEAR_DUPLICATES`], nearest first.
    async fn nearest_stored(
        &self,
        vector: &[f32],
        id: uuid::Uuid,
    ) -> Result<(Option<Passage>, Vec<(Passage, f32)>), MemoryError> {
        let scope = &self.config.scope;
        let candidates = self
            .store
            .candidates(&TextQuery {
                filter: SearchFilter { actor_id: scope.actor_id.clone(), ..Default::default() },
                vector: vector.to_vec(),
                text: String::new(),
                limit: MAX_NEAR_DUPLICATES * 2,
            })
            .await?;
        let mut same = None;
        let mut near = Vec::new();
        for c in candidates.by_vector {
            if c.row.id == id {
                same = Some(c.row);
            } else if c.row.project == scope.project
                && c.cosine >= self.config.near_duplicate_cosine
                && near.len() < MAX_NEAR_DUPLICATES
            {
                near.push((c.row, c.cosine));
            }
        }
        Ok((same, near))
    }

    /// The current passages of this actor and project tagged with any of `tags_any` (normalised as
    /// stored), the newest first, at most `limit`.
    pub async fn recent_tagged(&self, tags_any: &[String], limit: usize) -> Result<Vec<Passage>, MemoryError> {
        let scope = &self.config.scope;
        Ok(self.store.recent_passages(&scope.actor_id, &scope.project, &normalize_tags(tags_any), limit).await?)
    }

    /// Hybrid search over the actor's passages in every project, filters (tags, time) before ranking.
    pub async fn search(&self, request: &PassageSearch) -> Result<Vec<Hit<Passage>>, MemoryError> {
        let started = std::time::Instant::now();
        let query = redact(&request.query).into_owned();
        let text_query = TextQuery {
            filter: SearchFilter {
                actor_id: self.config.scope.actor_id.clone(),
                tags_any: normalize_tags(&request.tags_any),
                start: request.start,
                end: request.end,
                include_superseded: request.include_superseded,
                ..Default::default()
            },
            vector: Vec::new(),
            text: query.clone(),
            limit: self.config.fusion.limit(request.top_k),
        };
        let search = Search {
            name: "archival",
            embedder: &self.embedder,
            query: &query,
            fusion: &self.config.fusion,
            top_k: request.top_k,
            started,
        };
        search
            .over(Arc::clone(&self.store) as Arc<dyn Searchable<Passage>>, text_query)
            .await
            // a hit's row is read after the ranking: one superseded in between is read in its new state
            .map(|hits| {
                hits.into_iter().filter(|h| request.include_superseded || h.row.superseded_by.is_none()).collect()
            })
    }
}
