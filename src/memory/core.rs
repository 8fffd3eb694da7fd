//! Core memory (MemGPT's in-context memory, arXiv:2310.08560 §2.1): a few named blocks of text the agent
//! keeps pinned in its context and edits with `core_memory_append` / `core_memory_replace`. Each block
//! has a character limit that is enforced, never silently cut. Every change writes a new version, so a
//! user can list the history and restore an earlier value (`astra-mcp core history|restore`).
//!
//! Scope: `persona` and `human` belong to the actor (all projects); every other block to the actor and
//! the project.

use std::sync::Arc;

use chrono::Utc;
use tokio::sync::broadcast;

use super::MemoryError;
use super::redact::for_storage;
use crate::domain::{CoreBlockVersion, Scope};
use crate::store::{CoreBlockStore, Purge};

/// Character limit of a block unless configured otherwise.
pub const DEFAULT_BLOCK_LIMIT: usize = 2_000;
/// Blocks every store has.
pub const DEFAULT_BLOCKS: [&str; 3] = ["persona", "human", "project"];
/// Blocks that belong to the actor across projects; the rest are per project.
pub const ACTOR_BLOCKS: [&str; 2] = ["persona", "human"];

/// A configured block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockSpec {
    /// Lower-case name, `[a-z0-9_-]`, 1–64 characters.
    pub name: String,
    /// Maximum characters (Unicode scalar values).
    pub limit: usize,
}

impl BlockSpec {
    /// What the block is for, as shown in resource listings.
    pub fn description(&self) -> String {
        match self.name.as_str() {
            "persona" => "Who the agent is for this user: its role, tone, and standing instructions.".to_string(),
            "human" => "What the agent knows about the user: name, preferences, ways of working.".to_string(),
            "project" => "What the agent knows about this project: layout, commands, conventions.".to_string(),
            other => format!("Core memory block `{other}`."),
        }
    }

    pub fn is_actor_scoped(&self) -> bool {
        ACTOR_BLOCKS.contains(&self.name.as_str())
    }
}

/// Parses `name=limit,name=limit` (limits optional: `style` alone takes the default); the default blocks
/// are always present and a given limit overrides theirs.
///
/// # Errors
/// A name outside `[a-z0-9_-]{1,64}` or a limit that is not a number from 1 to 100000.
pub fn parse_block_specs(spec: Option<&str>) -> Result<Vec<BlockSpec>, String> {
    let mut blocks: Vec<BlockSpec> =
        DEFAULT_BLOCKS.iter().map(|n| BlockSpec { name: (*n).to_string(), limit: DEFAULT_BLOCK_LIMIT }).collect();
    let mut named = std::collections::HashSet::new();
    for part in spec.unwrap_or("").split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, limit) = match part.split_once('=') {
            Some((n, l)) => {
                let limit: usize = l.trim().parse().map_err(|_| {
                    format!(
                        "core block `{part}`: the limit after `=` must be a number of characters, e.g. `style=1000`"
                    )
                })?;
                (n.trim(), limit)
            }
            None => (part, DEFAULT_BLOCK_LIMIT),
        };
        if name.is_empty()
            || name.len() > 64
            || !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
        {
            return Err(format!("core block name `{name}` must be 1-64 characters of a-z, 0-9, `_` or `-`"));
        }
        if !(1..=100_000).contains(&limit) {
            return Err(format!("core block `{name}`: limit {limit} is outside 1..=100000 characters"));
        }
        if !named.insert(name.to_string()) {
            return Err(format!("core block `{name}` is named twice; give each block once"));
        }
        match blocks.iter_mut().find(|b| b.name == name) {
            Some(b) => b.limit = limit,
            None => blocks.push(BlockSpec { name: name.to_string(), limit }),
        }
    }
    Ok(blocks)
}

/// A block's current state.
#[derive(Debug, Clone)]
pub struct Block {
    pub spec: BlockSpec,
    pub value: String,
    /// 0 when never written.
    pub version: i64,
    pub updated_at: Option<chrono::DateTime<Utc>>,
}

/// Versions of a block a repeated `core_memory_replace` looks back through for the replacement it asks
/// for, made already ([`CoreMemory::replace`]).
const REPLACED_LOOKBACK: usize = 5;

/// What an edit of a core block did: the block as it now is, and whether this edit wrote a new version
/// (`false` when the block already read as the edit would leave it, e.g. a call repeated after its answer
/// was lost).
#[derive(Debug, Clone)]
pub struct Edited {
    pub block: Block,
    pub changed: bool,
}

impl Block {
    pub fn chars(&self) -> usize {
        self.value.chars().count()
    }

    /// The block's resource URI.
    pub fn uri(&self) -> String {
        block_uri(&self.spec.name)
    }
}

/// `memory://core/<section>`.
pub fn block_uri(section: &str) -> String {
    format!("memory://core/{section}")
}

/// The section named by a `memory://core/<section>` URI.
pub fn section_of_uri(uri: &str) -> Option<&str> {
    uri.strip_prefix("memory://core/").filter(|s| !s.is_empty() && !s.contains('/'))
}

/// A change of one block, broadcast to subscribers (`notifications/resources/updated`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockChanged {
    pub section: String,
}

/// The core memory of one actor and project.
pub struct CoreMemory {
    store: Arc<dyn CoreBlockStore>,
    scope: Scope,
    blocks: Vec<BlockSpec>,
    changes: broadcast::Sender<BlockChanged>,
}

/// How a change is computed from the current value: the new value, or a refusal message.
type Edit<'a> = dyn Fn(&str) -> Result<String, String> + Send + Sync + 'a;

impl CoreMemory {
    pub fn new(store: Arc<dyn CoreBlockStore>, scope: Scope, blocks: Vec<BlockSpec>) -> Self {
        let (changes, _) = broadcast::channel(64);
        Self { store, scope, blocks, changes }
    }

    pub fn blocks(&self) -> &[BlockSpec] {
        &self.blocks
    }

    /// Receives every change this server makes to a block.
    pub fn subscribe(&self) -> broadcast::Receiver<BlockChanged> {
        self.changes.subscribe()
    }

    fn spec(&self, tool: &str, section: &str) -> Result<&BlockSpec, MemoryError> {
        self.blocks.iter().find(|b| b.name == section).ok_or_else(|| {
            // a tool's refusal names the tool; an operator's (`core show`, the memory browser) needs not
            let prefix = if tool.starts_with("core_memory_") { format!("{tool}: ") } else { String::new() };
            MemoryError::refused(format!(
                "{prefix}there is no core memory block `{section}`. The blocks are: {}.",
                self.blocks.iter().map(|b| b.name.as_str()).collect::<Vec<_>>().join(", ")
            ))
        })
    }

    fn block_project(&self, spec: &BlockSpec) -> String {
        if spec.is_actor_scoped() { String::new() } else { self.scope.project.clone() }
    }

    /// The current value of `section`.
    pub async fn read(&self, section: &str) -> Result<Block, MemoryError> {
        let spec = self.spec("read", section)?.clone();
        let current = self.store.current_block(&self.scope.actor_id, &self.block_project(&spec), section).await?;
        Ok(match current {
            Some(v) => Block { spec, value: v.value, version: v.version, updated_at: Some(v.created_at) },
            None => Block { spec, value: String::new(), version: 0, updated_at: None },
        })
    }

    /// Every block, in configuration order.
    pub async fn read_all(&self) -> Result<Vec<Block>, MemoryError> {
        let mut out = Vec::with_capacity(self.blocks.len());
        for spec in &self.blocks {
            out.push(self.read(&spec.name).await?);
        }
        Ok(out)
    }

    /// Every version of `section`, oldest first.
    pub async fn history(&self, section: &str) -> Result<Vec<CoreBlockVersion>, MemoryError> {
        let spec = self.spec("history", section)?;
        Ok(self.store.block_history(&self.scope.actor_id, &self.block_project(spec), section).await?)
    }

    /// Appends `text` on a new line (secrets redacted), within the block's limit. A block that already
    /// ends with that line is left as it is: a call repeated after an answer was lost (a failure the
    /// model is told to retry) does not write the line twice.
    pub async fn append(&self, session_id: &str, section: &str, text: &str) -> Result<Edited, MemoryError> {
        let text = for_storage(text.trim());
        let limit = self.spec("core_memory_append", section)?.limit;
        self.change(session_id, "core_memory_append", section, "append", &|current: &str| {
            // the block's last line is this text already (white space around it aside)
            let base = current.trim_end();
            let last_line = base.rsplit('\n').next().unwrap_or_default().trim();
            if base == text || last_line == text || base.ends_with(&format!("\n{text}")) {
                return Ok(current.to_string());
            }
            // white space after the last line (blank lines, a line break) is not kept before the new one
            let value = if base.is_empty() { text.clone() } else { format!("{base}\n{text}") };
            within_limit("core_memory_append", section, current, &value, limit, CONDENSE)?;
            Ok(value)
        })
        .await
    }

    /// Replaces the one exact occurrence of `old_text` with `new_text` (which may be empty: a deletion).
    /// A block where the replacement is made already is left as it is: `old_text` occurs only inside
    /// `new_text`, or it no longer occurs and one of the last [`REPLACED_LOOKBACK`] versions was this very
    /// replacement (a call repeated after its answer was lost, or the same edit by another session).
    pub async fn replace(
        &self,
        session_id: &str,
        section: &str,
        old_text: &str,
        new_text: &str,
    ) -> Result<Edited, MemoryError> {
        const TOOL: &str = "core_memory_replace";
        let new_text = for_storage(new_text);
        let limit = self.spec(TOOL, section)?.limit;
        let result = self.change(session_id, TOOL, section, "replace", &|current: &str| {
            let count = current.matches(old_text).count();
            // made already (a call repeated after its answer was lost): every occurrence of `old_text` is
            // inside one of `new_text`, and replacing again would grow the block ("v2" → "v2 v2")
            if !old_text.is_empty() && count > 0 && new_text.contains(old_text) {
                let inside = current.matches(new_text.as_str()).count() * new_text.matches(old_text).count();
                if inside == count {
                    return Ok(current.to_string());
                }
            }
            match count {
                0 => Err(match closest_passage(current, old_text) {
                    Some(close) => format!(
                        "{TOOL}: `old_text` does not occur in block `{section}`. The closest passage is:\n\"{close}\"\n\
                         Copy the exact text you want to replace from the block (core memory is in the prompt \
                         `core_memory` and the resource {}).",
                        block_uri(section)
                    ),
                    None => format!(
                        "{TOOL}: `old_text` does not occur in block `{section}`, which is empty. Use core_memory_append to add text."
                    ),
                }),
                1 => {
                    let value = replace_once(current, old_text, &new_text);
                    within_limit(TOOL, section, current, &value, limit, CONDENSE)?;
                    Ok(value)
                }
                n => Err(format!(
                    "{TOOL}: `old_text` occurs {n} times in block `{section}`; include more of the surrounding text so it matches exactly one place."
                )),
            }
        })
        .await;
        match result {
            Err(MemoryError::Refused(_)) if !old_text.is_empty() => {
                match self.replaced_already(TOOL, section, old_text, &new_text).await? {
                    Some(block) => Ok(Edited { block, changed: false }),
                    None => result,
                }
            }
            result => result,
        }
    }

    /// The block as it is, if `old_text` no longer occurs in it, `new_text` still does (when not empty),
    /// and one of its last [`REPLACED_LOOKBACK`] versions was the replacement of the one `old_text` of the
    /// version before with `new_text`.
    async fn replaced_already(
        &self,
        tool: &str,
        section: &str,
        old_text: &str,
        new_text: &str,
    ) -> Result<Option<Block>, MemoryError> {
        let history = self.history(section).await?;
        let Some(current) = history.last() else { return Ok(None) };
        if current.value.contains(old_text) || !current.value.contains(new_text) {
            return Ok(None);
        }
        let made = history.windows(2).rev().take(REPLACED_LOOKBACK).any(|pair| {
            pair[1].operation == "replace"
                && pair[0].value.matches(old_text).count() == 1
                && replace_once(&pair[0].value, old_text, new_text) == pair[1].value
        });
        if !made {
            return Ok(None);
        }
        let spec = self.spec(tool, section)?.clone();
        Ok(Some(Block {
            spec,
            value: current.value.clone(),
            version: current.version,
            updated_at: Some(current.created_at),
        }))
    }

    /// Writes `version`'s value of `section` as a new version (the history keeps everything).
    /// With `expected_version` (a page that showed the block), the restore is refused, as [`Self::set`]
    /// refuses an edit, when the block changed since.
    pub async fn restore(
        &self,
        section: &str,
        version: i64,
        expected_version: Option<i64>,
    ) -> Result<Block, MemoryError> {
        let history = self.history(section).await?;
        let old = history.iter().find(|v| v.version == version).ok_or_else(|| {
            MemoryError::refused(format!(
                "block `{section}` has no version {version}; its versions are {}",
                version_list(&history)
            ))
        })?;
        let value = old.value.clone();
        let limit = self.spec("restore", section)?.limit;
        self.change_version("", "restore", section, "restore", &|current: Option<&CoreBlockVersion>| {
            if let Some(expected) = expected_version {
                unchanged_since("restore", section, current, expected, "open it again and restore from there")?;
            }
            let then = "That version is longer than the block's limit now: edit the block to a shorter value instead.";
            within_limit("restore", section, current.map_or("", |c| c.value.as_str()), &value, limit, then)?;
            Ok(value.clone())
        })
        .await
        .map(|edited| edited.block)
    }

    /// Deletes `version` of `section` from the block's history, for a value that must not stay on record (a
    /// secret pasted into a block and edited out since). The current version is refused: a new version
    /// without the text comes first. Errors: `Refused` for an unknown block, an absent version (purged
    /// already, or never written) or the current one; `Store` when the store fails.
    pub async fn purge(&self, section: &str, version: i64) -> Result<(), MemoryError> {
        let project = self.block_project(self.spec("purge", section)?);
        match self.store.purge_block_version(&self.scope.actor_id, &project, section, version).await? {
            Purge::Purged => {
                tracing::info!(actor = %self.scope.actor_id, section, version, "core block version purged");
                Ok(())
            }
            Purge::Current => Err(MemoryError::refused(format!(
                "version {version} is the current value of block `{section}`: save a new version without the text \
                 you want gone first, then purge this one"
            ))),
            Purge::Absent => Err(MemoryError::refused(format!(
                "block `{section}` has no version {version} (purged already?); its versions are {}",
                version_list(&self.history(section).await?)
            ))),
        }
    }

    /// Sets `section` to `value` (secrets redacted) as a new version, within the block's limit, if its
    /// current version is still `expected_version` (0: never written), checked atomically with the write:
    /// an edit made on a page that another writer changed meanwhile is refused, not written over it.
    pub async fn set(&self, section: &str, value: &str, expected_version: i64) -> Result<Block, MemoryError> {
        let value = for_storage(value);
        let limit = self.spec("edit", section)?.limit;
        self.change_version("", "edit", section, "edit", &|current: Option<&CoreBlockVersion>| {
            let then = "check its latest change, then save your text again to replace it";
            unchanged_since("edit", section, current, expected_version, then)?;
            within_limit(
                "edit",
                section,
                current.map_or("", |c| c.value.as_str()),
                &value,
                limit,
                "Shorten the text.",
            )?;
            Ok(value.clone())
        })
        .await
        .map(|edited| edited.block)
    }

    /// Applies `edit` to the current value and writes the result as the next version, atomically with
    /// respect to every other change of the store (see `store::CoreBlockStore::update_block`).
    async fn change(
        &self,
        session_id: &str,
        tool: &str,
        section: &str,
        operation: &str,
        edit: &Edit<'_>,
    ) -> Result<Edited, MemoryError> {
        self.change_version(session_id, tool, section, operation, &|current: Option<&CoreBlockVersion>| {
            edit(current.map_or("", |c| c.value.as_str()))
        })
        .await
    }

    /// [`Self::change`] with the edit seeing the whole current version (`None`: never written).
    async fn change_version(
        &self,
        session_id: &str,
        tool: &str,
        section: &str,
        operation: &str,
        edit: &crate::store::BlockEdit<'_>,
    ) -> Result<Edited, MemoryError> {
        let spec = self.spec(tool, section)?.clone();
        let template = CoreBlockVersion {
            actor_id: self.scope.actor_id.clone(),
            project: self.block_project(&spec),
            section: section.to_string(),
            version: 0,
            value: String::new(),
            operation: operation.to_string(),
            session_id: session_id.to_string(),
            created_at: Utc::now(),
        };
        // whether the edit's last run (the one the store kept) left the value as it found it: then the
        // store wrote no version
        let unchanged = std::sync::atomic::AtomicBool::new(false);
        let watched = |current: Option<&CoreBlockVersion>| {
            let value = edit(current)?;
            unchanged.store(current.is_some_and(|c| c.value == value), std::sync::atomic::Ordering::Relaxed);
            Ok(value)
        };
        let next = self.store.update_block(&template, &watched).await?.map_err(MemoryError::Refused)?;
        let changed = !unchanged.load(std::sync::atomic::Ordering::Relaxed);
        if changed {
            let _ = self.changes.send(BlockChanged { section: section.to_string() });
        }
        let block = Block { spec, value: next.value, version: next.version, updated_at: Some(next.created_at) };
        Ok(Edited { block, changed })
    }
}

/// Refuses the `action` (`edit`, `restore`) of a page that showed `section` at version `expected` (0:
/// never written) when the block is at another version now; `then` says what to do instead.
fn unchanged_since(
    action: &str,
    section: &str,
    current: Option<&CoreBlockVersion>,
    expected: i64,
    then: &str,
) -> Result<(), String> {
    let now = current.map_or(0, |c| c.version);
    if now == expected {
        return Ok(());
    }
    Err(format!(
        "{action} refused: block `{section}` changed since you opened it (version {expected}, now {now}). Nothing \
         was changed; {then}."
    ))
}

/// `block` with its one occurrence of `old_text` replaced by `new_text`. Deleting whole lines (an
/// empty `new_text`, `old_text` from a line's start to a line's end) deletes their line break too, so that no
/// blank line is left where it was.
fn replace_once(block: &str, old_text: &str, new_text: &str) -> String {
    if new_text.is_empty()
        && !old_text.is_empty()
        && let Some(at) = block.find(old_text)
    {
        let end = at + old_text.len();
        let starts_line = at == 0 || block[..at].ends_with('\n');
        if starts_line && block[end..].starts_with('\n') {
            return format!("{}{}", &block[..at], &block[end + 1..]);
        }
        // the last line: the line break before it goes
        if starts_line && end == block.len() && at > 0 {
            return block[..at - 1].to_string();
        }
    }
    block.replacen(old_text, new_text, 1)
}

/// What an agent over a block's limit can do.
const CONDENSE: &str = "Shorten the text, or condense the block first with core_memory_replace.";

/// Refuses a new value over the block's limit, unless it shrinks a block that is over its limit already
/// (a lowered limit must not lock the block: condensing it has to stay possible). `then` is the remedy
/// the refusal ends with, for the one who asked: an agent's tool or a person's edit.
fn within_limit(tool: &str, section: &str, current: &str, value: &str, limit: usize, then: &str) -> Result<(), String> {
    let chars = value.chars().count();
    if chars > limit && chars >= current.chars().count() {
        return Err(format!(
            "{tool} refused: block `{section}` would have {chars} characters, over its limit of {limit} (it has {} now). \
             Nothing was changed. {then}",
            current.chars().count()
        ));
    }
    Ok(())
}

/// The version numbers of a history, for a refusal: "1, 3, 4" (purged ones leave gaps), or "none".
fn version_list(history: &[CoreBlockVersion]) -> String {
    if history.is_empty() {
        return "none".to_string();
    }
    history.iter().map(|v| v.version.to_string()).collect::<Vec<_>>().join(", ")
}

/// The passage of `block` most like `needle` (normalised Levenshtein), among its lines and runs of
/// consecutive lines as long as the needle has lines. `None` for an empty block.
pub fn closest_passage(block: &str, needle: &str) -> Option<String> {
    let lines: Vec<&str> = block.lines().filter(|l| !l.trim().is_empty()).collect();
    if lines.is_empty() {
        return None;
    }
    let span = needle.lines().filter(|l| !l.trim().is_empty()).count().clamp(1, lines.len());
    let mut best: Option<(f64, String)> = None;
    for width in [span, 1] {
        for window in lines.windows(width) {
            let candidate = window.join("\n");
            let mut pieces = vec![candidate.clone()];
            // within one long line, sentences are better candidates than the whole line
            if width == 1 {
                pieces.extend(candidate.split_inclusive(['.', ';', '!', '?']).map(|s| s.trim().to_string()));
            }
            for piece in pieces.into_iter().filter(|p| !p.is_empty()) {
                let score = strsim::normalized_levenshtein(&piece.to_lowercase(), &needle.to_lowercase());
                if best.as_ref().is_none_or(|(s, _)| score > *s) {
                    best = Some((score, piece));
                }
            }
        }
    }
    // a whole long line can be the best match: quote its start only
    best.map(|(_, p)| match p.char_indices().nth(MAX_QUOTE_CHARS) {
        Some((cut, _)) => format!("{}…", &p[..cut]),
        None => p,
    })
}

/// Characters of the closest passage quoted in a refusal.
const MAX_QUOTE_CHARS: usize = 400;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_specs_keep_defaults_and_override_limits() {
        let specs = parse_block_specs(Some("project=4000, style, notes=500")).unwrap();
        let names: Vec<_> = specs.iter().map(|s| (s.name.as_str(), s.limit)).collect();
        assert_eq!(names, vec![("persona", 2000), ("human", 2000), ("project", 4000), ("style", 2000), ("notes", 500)]);
        assert!(parse_block_specs(Some("Bad Name=3")).is_err());
        assert!(parse_block_specs(Some("x=0")).is_err());
        assert!(parse_block_specs(Some("x=abc")).unwrap_err().contains("number"));
        assert!(parse_block_specs(Some("a=1,a=2")).unwrap_err().contains("named twice"));
    }

    /// Deleting whole lines leaves no blank line, wherever they are; deleting part of a line, or
    /// replacing a line with text, keeps the line breaks as they were.
    #[test]
    fn deleting_a_whole_line_deletes_its_line_break() {
        let block = "Prefers tabs.\nUses pytest -q.\nDeploys on Fridays.";
        assert_eq!(replace_once(block, "Uses pytest -q.", ""), "Prefers tabs.\nDeploys on Fridays.");
        assert_eq!(replace_once(block, "Prefers tabs.", ""), "Uses pytest -q.\nDeploys on Fridays.");
        assert_eq!(replace_once(block, "Deploys on Fridays.", ""), "Prefers tabs.\nUses pytest -q.");
        assert_eq!(replace_once(block, "Prefers tabs.\nUses pytest -q.", ""), "Deploys on Fridays.");
        assert_eq!(replace_once(block, "Uses pytest -q.\n", ""), "Prefers tabs.\nDeploys on Fridays.");
        assert_eq!(replace_once(block, " -q", ""), "Prefers tabs.\nUses pytest.\nDeploys on Fridays.");
        assert_eq!(replace_once(block, "Uses pytest -q.", "Uses uv."), "Prefers tabs.\nUses uv.\nDeploys on Fridays.");
        assert_eq!(replace_once("Only line.", "Only line.", ""), "");
    }

    #[test]
    fn closest_passage_finds_the_near_miss_line() {
        let block = "Prefers tabs over spaces.\nUses pytest with -q.\nDeploys on Fridays.";
        assert_eq!(closest_passage(block, "Uses pytest with -v").as_deref(), Some("Uses pytest with -q."));
        assert_eq!(closest_passage("", "x"), None);
    }

    #[test]
    fn uri_round_trip() {
        assert_eq!(section_of_uri(&block_uri("human")), Some("human"));
        assert_eq!(section_of_uri("memory://core/"), None);
        assert_eq!(section_of_uri("memory://other/human"), None);
    }
}
