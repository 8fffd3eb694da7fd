//! Getting conversations into recall storage: `astra-mcp sessions import FILE...` reads transcript files
//! ([`formats`]), and `astra-mcp hook claude-code` imports the transcript a Claude Code hook names
//! (`crate::hooks`). Both store through [`ConversationMemory::import`], so a repeated import adds
//! nothing and secrets are redacted before anything is embedded or stored.

pub mod formats;

use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::memory::{ConversationMemory, ImportCounts, ImportTarget, NewItem};
use formats::{ParsedItem, TranscriptFormat};

/// What importing one session of one file did.
#[derive(Debug, Clone)]
pub struct SessionImport {
    pub path: PathBuf,
    pub format: TranscriptFormat,
    pub session_id: String,
    pub counts: ImportCounts,
}

/// What importing one file did.
#[derive(Debug, Clone)]
pub struct FileImport {
    pub sessions: Vec<SessionImport>,
    /// Lines that were not JSON objects (e.g. the half-written last line of a live session).
    pub skipped_lines: usize,
}

/// Who owns imported items and which project they are filed under.
#[derive(Debug, Clone)]
pub struct Owner {
    pub actor_id: String,
    pub project: String,
}

/// The session id of a file without one: its file name without extension.
fn fallback_session(path: &Path) -> String {
    path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "imported".to_string())
}

fn to_new_item(item: &ParsedItem) -> NewItem {
    NewItem {
        source_key: item.source_key.clone(),
        turn: i64::from(item.turn),
        role: item.role,
        speaker: None,
        text: item.text.clone(),
        timestamp: item.timestamp,
        date_label: None,
    }
}

/// Imports one transcript file. The format is detected from the content unless given; items are filed
/// under the session id the file carries (`session_id` overrides it; files without one use the file
/// name).
///
/// # Errors
/// The file cannot be read, or its format is not recognised (the message lists the supported ones).
pub async fn import_file(
    memory: &ConversationMemory,
    owner: &Owner,
    path: &Path,
    format: Option<TranscriptFormat>,
    session_id: Option<&str>,
) -> anyhow::Result<FileImport> {
    let bytes = tokio::fs::read(path).await.with_context(|| format!("reading {}", path.display()))?;
    let parsed = match format {
        Some(f) => formats::parse_as(f, &bytes),
        None => formats::parse_transcript(&bytes).with_context(|| format!("{}", path.display()))?,
    };
    let fallback = fallback_session(path);
    // group by session, keeping file order inside each
    let mut groups: Vec<(String, Vec<NewItem>)> = Vec::new();
    for item in &parsed.items {
        let sid =
            session_id.map(str::to_string).or_else(|| item.session_id.clone()).unwrap_or_else(|| fallback.clone());
        match groups.iter_mut().find(|(s, _)| *s == sid) {
            Some((_, items)) => items.push(to_new_item(item)),
            None => groups.push((sid, vec![to_new_item(item)])),
        }
    }
    let mut sessions = Vec::new();
    for (sid, mut items) in groups {
        // a file may interleave sessions: an item's turn is its position in its own session
        for (turn, item) in items.iter_mut().enumerate() {
            item.turn = turn as i64;
        }
        let target = ImportTarget {
            actor_id: owner.actor_id.clone(),
            project: owner.project.clone(),
            session_id: sid.clone(),
            source: parsed.format.name().to_string(),
        };
        let counts = memory.import(&target, &items).await?;
        sessions.push(SessionImport { path: path.to_path_buf(), format: parsed.format, session_id: sid, counts });
    }
    Ok(FileImport { sessions, skipped_lines: parsed.skipped_lines })
}
