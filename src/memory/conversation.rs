//! Conversation history (MemGPT's recall storage): every stored conversation item, searchable with
//! `conversation_search`. Items arrive from this server's own tool calls, from imported transcripts
//! (`sessions import`, `hook claude-code`) and from evaluations.
//!
//! Each item is stored with two texts, chosen on the LoCoMo evaluation (docs/retrieval.md): the
//! embedding sees the item alone (`speaker: text`), which picks the exact turn out; the full-text (BM25)
//! index sees the item in its context — its date and the two items before it in its session — because a
//! turn alone ("Yes, last Tuesday") rarely carries the words a later question uses. The two rankings
//! are fused by their scores (see [`Fusion::conversation`]).

use std::collections::HashSet;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::MemoryError;
use super::redact::redact;
use super::retrieval::{Fusion, Hit, Search};
use crate::domain::{ConversationItem, Role, context_line, conversation_item_id, conversation_vector_text};
use crate::embed::LazyEmbedder;
use crate::store::{ConversationStore, SearchFilter, Searchable, TextQuery};

/// Characters of an item's text that are stored (a pasted log or file beyond this is cut, marked `…`).
pub const MAX_ITEM_CHARS: usize = 20_000;
/// Items embedded and written per batch on import.
const IMPORT_BATCH: usize = 256;
/// Characters of an item kept in the embedded text (the model reads 256 word pieces at most).
const ITEM_CHARS: usize = 2_000;
pub use crate::domain::CONTEXT_ITEMS;

/// An item to store, before ids and embeddings.
#[derive(Debug, Clone)]
pub struct NewItem {
    /// The item's key in its source (message uuid, line position, dialog id).
    pub source_key: String,
    /// 0-based position in its session.
    pub turn: i64,
    pub role: Role,
    /// Who said it, when the source names people (LoCoMo speakers); otherwise the role is used.
    pub speaker: Option<String>,
    pub text: String,
    /// When it was said; `None` takes the import time.
    pub timestamp: Option<DateTime<Utc>>,
    /// A date label for the context line (e.g. LoCoMo's session date text); `None` uses `timestamp`.
    pub date_label: Option<String>,
}

/// The session an import writes into.
#[derive(Debug, Clone)]
pub struct ImportTarget {
    pub actor_id: String,
    pub project: String,
    pub session_id: String,
    /// `claude-code`, `codex`, `responses`, `mcp`, `locomo`, …
    pub source: String,
}

/// What an import did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImportCounts {
    /// Items given.
    pub read: usize,
    /// Items written now.
    pub added: usize,
    /// Items already stored by an earlier import (nothing written).
    pub already_stored: usize,
    /// Items forgotten since an earlier import (`memory_forget`): not stored again.
    pub forgotten: usize,
}

/// A `conversation_search` request after validation.
#[derive(Debug, Clone, Default)]
pub struct ConversationSearch {
    pub query: String,
    /// Empty: every role.
    pub roles: Vec<Role>,
    pub top_k: usize,
    pub start: Option<DateTime<Utc>>,
    pub end: Option<DateTime<Utc>>,
    /// Restrict to these sessions (evaluation scopes a search to one conversation); `None`: all.
    pub session_ids: Option<Vec<String>>,
}

/// The conversation store of a server or an import.
pub struct ConversationMemory {
    store: Arc<dyn ConversationStore>,
    embedder: LazyEmbedder,
    fusion: Fusion,
}

fn clip(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

fn label(item: &NewItem) -> String {
    item.speaker.clone().unwrap_or_else(|| item.role.as_str().to_string())
}

/// The text an item is embedded with: `speaker: text` (the role stands in for a speaker), without UUIDs
/// for the model ([`conversation_vector_text`]).
pub fn embedded_text(item: &NewItem) -> String {
    format!("{}: {}", label(item), clip(item.text.trim(), ITEM_CHARS))
}

/// The text the full-text index sees: `[date] ` then the items of `previous` (oldest first, at most
/// [`CONTEXT_ITEMS`], each `speaker: text` on its own line), then the item's own line. The date is the
/// item's `date_label`, else its timestamp as `3 November 2025` (day, month name and year are the words
/// questions use).
pub fn search_text(item: &NewItem, previous: &[NewItem]) -> String {
    let date = item
        .date_label
        .clone()
        .or_else(|| item.timestamp.map(|t| t.format("%-d %B %Y").to_string()))
        .map(|d| format!("[{d}] "))
        .unwrap_or_default();
    let mut out = date;
    for p in &previous[previous.len().saturating_sub(CONTEXT_ITEMS)..] {
        out.push_str(&context_line(&embedded_text(p)));
        out.push('\n');
    }
    out.push_str(&embedded_text(item));
    out
}

impl ConversationMemory {
    pub fn new(store: Arc<dyn ConversationStore>, embedder: LazyEmbedder, fusion: Fusion) -> Self {
        Self { store, embedder, fusion }
    }

    /// Refuses a session that belongs to another actor: a session's owner is the actor of its first item.
    ///
    /// # Errors
    /// [`MemoryError::Refused`] naming the session (never the other actor); store failures.
    pub async fn check_owner(&self, actor_id: &str, session_id: &str) -> Result<(), MemoryError> {
        match self.store.session_owner(session_id).await? {
            Some(owner) if owner != actor_id => Err(MemoryError::refused(format!(
                "permission denied: session `{session_id}` belongs to another actor; use another session id"
            ))),
            _ => Ok(()),
        }
    }

    /// The turn number after the last stored item of `session_id` (0 for a new session), so a session that
    /// continues (`drive` with a run id used before) appends instead of colliding with its old turns.
    ///
    /// # Errors
    /// A store failure.
    pub async fn next_turn(&self, actor_id: &str, session_id: &str) -> Result<i64, MemoryError> {
        Ok(self.store.last_turn(actor_id, session_id).await?.map_or(0, |t| t + 1))
    }

    /// Stores the items of one session that are not stored yet (ids are derived from the source key, so
    /// a repeated import adds nothing and embeds nothing). Secrets are redacted before anything is
    /// embedded or stored. `items` must be in session order: each is embedded with the one before it.
    ///
    /// # Errors
    /// [`MemoryError::Refused`] when the session belongs to another actor (its owner is fixed by its first
    /// item); store and embedding failures.
    pub async fn import(&self, target: &ImportTarget, items: &[NewItem]) -> Result<ImportCounts, MemoryError> {
        self.check_owner(&target.actor_id, &target.session_id).await?;
        let now = Utc::now();
        let items: Vec<NewItem> = items
            .iter()
            .map(|i| {
                let text = redact(&i.text);
                let text = match text.char_indices().nth(MAX_ITEM_CHARS) {
                    Some((cut, _)) => format!("{}…", &text[..cut]),
                    None => text.into_owned(),
                };
                NewItem { text, ..i.clone() }
            })
            .filter(|i| !i.text.trim().is_empty())
            .collect();
        let id_of =
            |i: &NewItem| conversation_item_id(&target.actor_id, &target.session_id, &target.source, &i.source_key);
        let read = items.len();
        // forgotten items are neither stored again nor quoted in the context of the items after them
        let all_ids: Vec<_> = items.iter().map(id_of).collect();
        let forgotten: HashSet<_> = self.store.forgotten_item_ids(&all_ids).await?;
        let items: Vec<NewItem> = items.into_iter().filter(|i| !forgotten.contains(&id_of(i))).collect();
        let forgotten = read - items.len();
        let ids: Vec<_> = items.iter().map(id_of).collect();
        let existing: HashSet<_> = self.store.existing_item_ids(&ids).await?;
        let mut counts = ImportCounts { read, forgotten, ..Default::default() };
        let mut pending: Vec<ConversationItem> = Vec::new();
        for (pos, item) in items.iter().enumerate() {
            if existing.contains(&ids[pos]) {
                counts.already_stored += 1;
                continue;
            }
            let previous = &items[pos.saturating_sub(CONTEXT_ITEMS)..pos];
            pending.push(ConversationItem {
                id: ids[pos],
                actor_id: target.actor_id.clone(),
                project: target.project.clone(),
                session_id: target.session_id.clone(),
                turn: item.turn,
                role: item.role,
                source: target.source.clone(),
                source_key: item.source_key.clone(),
                text: item.text.clone(),
                created_at: item.timestamp.unwrap_or(now),
                updated_at: now,
                embedded_text: embedded_text(item),
                search_text: search_text(item, previous),
            });
        }
        for chunk in pending.chunks(IMPORT_BATCH) {
            let texts = chunk.iter().map(|i| conversation_vector_text(&i.embedded_text).into_owned()).collect();
            let vectors = self.embed_by_length(texts).await?;
            let rows: Vec<_> = chunk.iter().cloned().zip(vectors).collect();
            counts.added += self.store.insert_items(&rows).await?;
        }
        counts.already_stored = counts.read - counts.added - counts.forgotten;
        Ok(counts)
    }

    /// Embeds each distinct text once, in order of length (less padding per batch), returning a vector
    /// per text in input order.
    async fn embed_by_length(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, MemoryError> {
        let mut distinct: Vec<&str> = texts.iter().map(String::as_str).collect();
        distinct.sort_by(|a, b| a.len().cmp(&b.len()).then_with(|| a.cmp(b)));
        distinct.dedup();
        let vectors = self.embedder.embed_documents(distinct.iter().map(|t| t.to_string()).collect()).await?;
        let by_text: std::collections::HashMap<&str, &Vec<f32>> = distinct.into_iter().zip(&vectors).collect();
        Ok(texts.iter().map(|t| by_text[t.as_str()].clone()).collect())
    }

    /// Hybrid search over the actor's stored conversation items, filters before ranking.
    pub async fn search(
        &self,
        actor_id: &str,
        request: &ConversationSearch,
    ) -> Result<Vec<Hit<ConversationItem>>, MemoryError> {
        let started = std::time::Instant::now();
        let query = redact(&request.query).into_owned();
        let text_query = TextQuery {
            filter: SearchFilter {
                actor_id: actor_id.to_string(),
                session_ids: request.session_ids.clone(),
                roles: request.roles.clone(),
                start: request.start,
                end: request.end,
                ..Default::default()
            },
            vector: Vec::new(),
            text: query.clone(),
            limit: self.fusion.limit(request.top_k),
        };
        let search = Search {
            name: "conversation",
            embedder: &self.embedder,
            query: &query,
            fusion: &self.fusion,
            top_k: request.top_k,
            started,
        };
        search.over(Arc::clone(&self.store) as Arc<dyn Searchable<ConversationItem>>, text_query).await
    }

    pub fn fusion(&self) -> &Fusion {
        &self.fusion
    }
}

enum RecorderMessage {
    Record(Box<(ImportTarget, NewItem)>),
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// How long the tool-call recorder gathers calls before writing them: the calls of this window are
/// embedded in one batch and stored in one commit, rather than each costing its own beside the call
/// it records. A call's record is searchable within about this long, and a process killed with
/// `SIGKILL` loses at most this window's records (the memories the calls stored are not affected).
pub const RECORD_WINDOW: std::time::Duration = std::time::Duration::from_millis(500);

/// Records this server's tool calls as `tool` items of their session, off the request path: a call
/// returns without waiting for the embedding and the write, and the calls of each [`RECORD_WINDOW`]
/// are written together. [`ToolCallRecorder::flush`] ends the window and waits for everything queued
/// before it (the server calls it at shutdown).
#[derive(Clone)]
pub struct ToolCallRecorder {
    tx: tokio::sync::mpsc::UnboundedSender<RecorderMessage>,
}

impl ToolCallRecorder {
    /// Starts the writer task on the current Tokio runtime.
    pub fn start(memory: Arc<ConversationMemory>) -> Self {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<RecorderMessage>();
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let until = tokio::time::Instant::now() + RECORD_WINDOW;
                let mut batch = vec![first];
                while !matches!(batch.last(), Some(RecorderMessage::Flush(_))) {
                    match tokio::time::timeout_at(until, rx.recv()).await {
                        Ok(Some(more)) => batch.push(more),
                        Ok(None) | Err(_) => break,
                    }
                }
                let mut waiting = Vec::new();
                let mut groups: Vec<(ImportTarget, Vec<NewItem>)> = Vec::new();
                for message in batch {
                    match message {
                        RecorderMessage::Record(record) => {
                            let (target, item) = *record;
                            match groups.iter_mut().find(|(t, _)| t.session_id == target.session_id) {
                                Some((_, items)) => items.push(item),
                                None => groups.push((target, vec![item])),
                            }
                        }
                        RecorderMessage::Flush(done) => waiting.push(done),
                    }
                }
                for (target, items) in groups {
                    if let Err(e) = memory.import(&target, &items).await {
                        tracing::warn!(session = %target.session_id, "could not record tool calls: {e}");
                    }
                }
                for done in waiting {
                    let _ = done.send(());
                }
            }
        });
        Self { tx }
    }

    /// Queues one tool call of a session.
    pub fn record(&self, target: ImportTarget, item: NewItem) {
        if self.tx.send(RecorderMessage::Record(Box::new((target, item)))).is_err() {
            tracing::warn!("tool call recorder stopped; a tool call was not recorded");
        }
    }

    /// Waits until every call queued so far is written.
    pub async fn flush(&self) {
        let (done, wait) = tokio::sync::oneshot::channel();
        if self.tx.send(RecorderMessage::Flush(done)).is_ok() {
            let _ = wait.await;
        }
    }
}
