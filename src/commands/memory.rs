//! `astra-mcp memory`: see and undo what agents stored (list, show, rm), bring back what expired
//! (expired, restore), move it (export, import, ingest), and look after the store (stats, reindex, optimize).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;

use astra_mcp::app;
use astra_mcp::app::LanceStore;
use astra_mcp::app::OpenOptions;
use astra_mcp::app::lance::TableId;
use astra_mcp::app::open_existing;
use astra_mcp::app::process::progress_bar;
use astra_mcp::cli::{MemoryCommand, StoreArgs};
use astra_mcp::config::StoreSettings;
use astra_mcp::domain::Scope;
use astra_mcp::embed::Workload;
use astra_mcp::memory::{Fusion, UseLog};
use astra_mcp::store::BrowseStore;

use super::common::{actors_note, cli_project};

pub async fn run(command: MemoryCommand, open: OpenOptions) -> anyhow::Result<()> {
    match command {
        MemoryCommand::List { store, table, limit, all_actors, json } => {
            list(open, store, table, limit, all_actors, json).await
        }
        MemoryCommand::Show { store, id, all_actors } => show(open, store, id, all_actors).await,
        MemoryCommand::Rm { store, ids } => rm(open, store, ids).await,
        MemoryCommand::Expired { store } => expired(open, store).await,
        MemoryCommand::Restore { store, ids } => restore(open, store, ids).await,
        MemoryCommand::Export { store, out, all_actors } => export(open, store, out, all_actors).await,
        MemoryCommand::Import { store, file } => import(open, store, file).await,
        MemoryCommand::Ingest { store, file } => ingest(open, store, file).await,
        MemoryCommand::Stats { store, json } => stats(open, store, json).await,
        MemoryCommand::Reindex { store } => reindex(open, store).await,
        MemoryCommand::Optimize { store, prune_older_than } => optimize(open, store, prune_older_than).await,
    }
}

/// `memory list`: memories newest first, per table; one line each, or JSON lines.
async fn list(
    open: OpenOptions,
    store: StoreArgs,
    table: Option<String>,
    limit: usize,
    all_actors: bool,
    json: bool,
) -> anyhow::Result<()> {
    let settings = StoreSettings::resolve(&store, open)?;
    let db = open_existing(&settings).await?;
    // one row past --limit per table says that the table holds more than is shown
    let actor = actor_or_all(&settings, all_actors);
    let fetched = db.list_rows(table.as_deref(), actor.as_deref(), limit.saturating_add(1)).await?;
    // the human listing names tiers (`conversation`, `core`), the JSON lines the tables (as an export)
    let tier = astra_mcp::app::lance::TableId::tier_of;
    let (mut rows, mut cut) = (Vec::with_capacity(fetched.len()), Vec::new());
    let mut shown: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for row in fetched {
        let n = shown.entry(row.table).or_default();
        if *n < limit {
            *n += 1;
            rows.push(row);
        } else if !cut.contains(&tier(row.table)) {
            cut.push(tier(row.table));
        }
    }
    for row in &rows {
        if json {
            println!("{}", serde_json::to_string(row)?);
        } else if all_actors {
            let actor = astra_mcp::app::lance::preview(&row.actor_id, 40);
            println!(
                "{:<13} {}  {}  {actor:<12} {:<12} {}",
                tier(row.table),
                row.id,
                row.created_at,
                row.project,
                row.preview
            );
        } else {
            println!("{:<13} {}  {}  {:<12} {}", tier(row.table), row.id, row.created_at, row.project, row.preview);
        }
    }
    if !cut.is_empty() {
        let (holds, each) = if cut.len() == 1 { ("holds", "") } else { ("hold", " of each") };
        eprintln!(
            "astra-mcp: {} {holds} more: the newest {limit}{each} shown; raise --limit to see more",
            cut.join(", ")
        );
    }
    if rows.is_empty() {
        let what = table.as_deref().map(|t| format!(" in `{t}`")).unwrap_or_default();
        if all_actors {
            eprintln!("astra-mcp: no memories of any actor{what} in {}", settings.db);
        } else {
            let note = actors_note(&db, &settings.actor_id).await;
            eprintln!("astra-mcp: no memories of actor `{}`{what} in {}{note}", settings.actor_id, settings.db);
        }
    }
    Ok(())
}

/// `memory show`: one memory (any table) as pretty JSON, with its table.
async fn show(open: OpenOptions, store: StoreArgs, id: String, all_actors: bool) -> anyhow::Result<()> {
    let id = memory_id(&id).ok_or_else(|| anyhow::anyhow!("{}", not_a_memory_id(&id)))?;
    let settings = StoreSettings::resolve(&store, open)?;
    let db = open_existing(&settings).await?;
    let Some((table, mut row)) = db.show_row(&id, actor_or_all(&settings, all_actors).as_deref()).await? else {
        anyhow::bail!("no memory with id {id} of actor `{}`{}", settings.actor_id, owner_note(&db, &id).await?);
    };
    // a fix's receipt is stored as JSON text: show it as the object it is, not as an escaped string
    if let Some(receipt) = row.get_mut("receipt")
        && let Some(parsed) = receipt.as_str().and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok())
    {
        *receipt = parsed;
    }
    println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "table": table, "row": row }))?);
    Ok(())
}

/// `memory expired`: the actor's expired archival passages, one line each (id, last written, last used,
/// project, text).
async fn expired(open: OpenOptions, store: StoreArgs) -> anyhow::Result<()> {
    let settings = StoreSettings::resolve(&store, open)?;
    let db = Arc::new(open_existing(&settings).await?);
    let uses = UseLog::start(db.clone(), &settings.actor_id, settings.expiry);
    let Some(after) = settings.expiry.0 else {
        eprintln!("astra-mcp: nothing expires: --expire-after-days (ASTRA_EXPIRE_AFTER_DAYS) is 0");
        return Ok(());
    };
    let now = chrono::Utc::now();
    let passages = all_passages(db.as_ref(), &settings.actor_id).await?;
    if passages.is_empty() {
        let note = actors_note(&db, &settings.actor_id).await;
        eprintln!("astra-mcp: actor `{}` has no archival passages in {}{note}", settings.actor_id, settings.db);
        return Ok(());
    }
    // only a passage written before the limit can have expired; their uses are read 500 at a time
    let old: Vec<_> = passages.iter().filter(|p| settings.expiry.passage_expired(p, None, now)).collect();
    let mut usage = std::collections::HashMap::new();
    for chunk in old.chunks(500) {
        let ids: Vec<uuid::Uuid> = chunk.iter().map(|p| p.id).collect();
        usage.extend(uses.usage(&ids).await?);
    }
    let mut found = 0;
    for passage in old {
        let used = usage.get(&passage.id);
        if !settings.expiry.passage_expired(passage, used, now) {
            continue;
        }
        found += 1;
        let last_used =
            used.and_then(|u| u.last_used_at).map_or("never used".to_string(), |t| format!("last used {}", rfc3339(t)));
        println!(
            "archival      {}  {}  {last_used:<30} {:<12} {}",
            passage.id,
            rfc3339(passage.updated_at),
            passage.project,
            astra_mcp::app::lance::preview(&passage.text, 60)
        );
    }
    if found == 0 {
        eprintln!(
            "astra-mcp: no expired passages of actor `{}`: each of its {} was written or used within {} day(s)",
            settings.actor_id,
            passages.len(),
            after.num_days()
        );
    } else {
        eprintln!("astra-mcp: `astra-mcp memory restore ID…` brings one back into searches");
    }
    Ok(())
}

/// Every passage of `actor`, page by page.
async fn all_passages(db: &LanceStore, actor: &str) -> anyhow::Result<Vec<astra_mcp::domain::Passage>> {
    const PAGE: usize = 500;
    let mut passages = Vec::new();
    loop {
        let page = BrowseStore::passage_page(db, actor, None, passages.len(), PAGE).await?;
        let n = page.rows.len();
        passages.extend(page.rows);
        if n < PAGE {
            return Ok(passages);
        }
    }
}

fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// `memory restore`: keeps each of the actor's fixes and passages given, so expiry counts from now.
/// Refuses, naming why, every id that is not one of the actor's fixes or passages (core blocks and
/// conversation items never expire); then nothing is kept.
async fn restore(open: OpenOptions, store: StoreArgs, ids: Vec<String>) -> anyhow::Result<()> {
    let not_ids: Vec<String> = ids.iter().filter(|id| memory_id(id).is_none()).map(|id| not_a_memory_id(id)).collect();
    anyhow::ensure!(not_ids.is_empty(), "{}; nothing was restored", not_ids.join("; "));
    let settings = StoreSettings::resolve(&store, open)?;
    let db = Arc::new(open_existing(&settings).await?);
    let actor = &settings.actor_id;
    // each wanted id with its passage (`None`: a fix)
    let mut wanted: Vec<(uuid::Uuid, Option<astra_mcp::domain::Passage>)> = Vec::new();
    let mut refused = Vec::new();
    for id in ids.iter().filter_map(|id| memory_id(id)) {
        // what the id is, whoever's it is: the kind of memory decides before the actor does
        let table = match db.show_row(&id, None).await? {
            None => {
                refused.push(format!("no memory with id {id}"));
                continue;
            }
            Some((table, _)) => TableId::from_name(table),
        };
        let (Some(table @ (TableId::Fixes | TableId::Archival)), Ok(uuid)) = (table, uuid::Uuid::parse_str(&id)) else {
            let tier = table.map_or("core memory", TableId::described);
            refused.push(format!("{id} is in {tier}: only fixes and archival passages expire"));
            continue;
        };
        if wanted.iter().any(|(w, _)| *w == uuid) {
            continue;
        }
        if table == TableId::Fixes && BrowseStore::fix(db.as_ref(), actor, uuid).await?.is_some() {
            wanted.push((uuid, None));
        } else if let Some(passage) = BrowseStore::passage(db.as_ref(), actor, uuid).await? {
            wanted.push((uuid, Some(passage)));
        } else {
            let note = owner_note(&db, &id).await?;
            refused.push(format!("no fix or archival passage of actor `{actor}` with id {id}{note}"));
        }
    }
    anyhow::ensure!(refused.is_empty(), "{}; nothing was restored", refused.join("; "));
    let uses = UseLog::start(db.clone(), actor, settings.expiry);
    let ids: Vec<uuid::Uuid> = wanted.iter().map(|(id, _)| *id).collect();
    let usage = uses.usage(&ids).await?;
    uses.keep("restore", &ids).await?;
    let now = chrono::Utc::now();
    let days = settings.expiry.0.map(|after| after.num_days());
    for (id, passage) in &wanted {
        match (passage, days) {
            (_, None) => println!("kept {id}: nothing expires (--expire-after-days is 0)"),
            (Some(p), Some(days)) if settings.expiry.passage_expired(p, usage.get(id), now) => {
                println!("restored {id}: searches return it again; it expires after another {days} days unused")
            }
            (Some(_), Some(days)) => {
                println!("kept {id}: it had not expired; it now expires after {days} days unused from today")
            }
            (None, Some(days)) => println!(
                "restored {id}: a fix is hidden once its lines are gone from the code and it went {days} days \
                 unused; if it was, searches return it again, and its {days} days count from today"
            ),
        }
    }
    Ok(())
}

/// `memory rm`: deletes the actor's memories by id; fails naming the ids it did not find.
async fn rm(open: OpenOptions, store: StoreArgs, ids: Vec<String>) -> anyhow::Result<()> {
    // every argument is checked before anything is deleted; each id once, in its stored spelling
    let not_ids: Vec<String> = ids.iter().filter(|id| memory_id(id).is_none()).map(|id| not_a_memory_id(id)).collect();
    anyhow::ensure!(not_ids.is_empty(), "{}; nothing was deleted", not_ids.join("; "));
    let mut wanted: Vec<String> = Vec::with_capacity(ids.len());
    for id in ids.iter().filter_map(|id| memory_id(id)) {
        if !wanted.contains(&id) {
            wanted.push(id);
        }
    }
    let settings = StoreSettings::resolve(&store, open)?;
    let db = open_existing(&settings).await?;
    // every id is tried, whatever the ones before it met; what was not deleted is said at the end
    let (mut missing, mut refused, mut deleted) = (Vec::new(), Vec::new(), 0);
    for id in &wanted {
        match db.delete_row(&settings.actor_id, id).await {
            Ok(Some(table)) => {
                println!("deleted {id} from {}", table.described());
                deleted += 1;
            }
            Ok(None) => missing.push(id.clone()),
            Err(astra_mcp::store::StoreError::Invalid(why)) => refused.push(why),
            Err(e) => return Err(e.into()),
        }
    }
    for id in &missing {
        let note = owner_note(&db, id).await?;
        let see = if note.is_empty() { ": see `astra-mcp memory list`" } else { "" };
        refused.push(format!("no memory of actor `{}` with id {id}{note}{see}", settings.actor_id));
    }
    if deleted > 0 {
        eprintln!(
            "astra-mcp: no search returns what was deleted; its text stays in the store's older versions until \
             `astra-mcp memory optimize` prunes them"
        );
    }
    anyhow::ensure!(refused.is_empty(), "{}", refused.join("; "));
    Ok(())
}

/// `memory export`: the actor's rows (every actor's with `--all-actors`) as JSONL, to a file or stdout.
async fn export(open: OpenOptions, store: StoreArgs, out: Option<PathBuf>, all_actors: bool) -> anyhow::Result<()> {
    let settings = StoreSettings::resolve(&store, open)?;
    let db = open_existing(&settings).await?;
    let actor = actor_or_all(&settings, all_actors);
    let counts = match &out {
        Some(path) => {
            // written beside `path` and renamed onto it once complete: an export that fails half-way
            // leaves no file an import would take for the whole store (nor clobbers an older export)
            let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
            let file = tempfile::NamedTempFile::new_in(dir).with_context(|| format!("creating {}", path.display()))?;
            let mut writer = std::io::BufWriter::new(file);
            let counts = db.export(&mut writer, actor.as_deref()).await?;
            let file = writer
                .into_inner()
                .map_err(|e| e.into_error())
                .with_context(|| format!("writing {}", path.display()))?;
            file.as_file().sync_all().with_context(|| format!("writing {}", path.display()))?;
            file.persist(path).with_context(|| format!("writing {}", path.display()))?;
            counts
        }
        None => {
            let mut writer = std::io::BufWriter::new(std::io::stdout());
            let counts = db.export(&mut writer, actor.as_deref()).await?;
            writer.flush()?;
            counts
        }
    };
    let note = match actor.as_deref() {
        Some(actor) if counts.is_empty() => actors_note(&db, actor).await,
        _ => String::new(),
    };
    eprintln!("astra-mcp: exported {}{note}", summary(&counts));
    Ok(())
}

/// `memory import`: reads an export back, re-embedding when it was made with another model.
async fn import(open: OpenOptions, store: StoreArgs, file: PathBuf) -> anyhow::Result<()> {
    let settings = StoreSettings::resolve(&store, open)?;
    // read and check first: a file that cannot be read, or is no export this build reads, leaves no
    // new store behind
    let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    let in_file = |e| in_file(&file, e);
    astra_mcp::app::lance::read_export_header(&text).map_err(in_file)?;
    let seen = check_import_rows(&file, &text)?;
    let made = NewStore::before_opening(&settings.db);
    let db = app::open_store(&settings).await?;
    let report = match db.import(&text, &settings.embedder(Workload::Batch), &astra_mcp::memory::IMPORT_RULES).await {
        Ok(report) => report,
        Err(e) => {
            // a store this import created holds nothing worth keeping: the next attempt starts clean
            if let Some(made) = made {
                drop(db);
                astra_mcp::app::lance::wait_for_upkeep().await;
                made.remove();
            }
            return Err(in_file(e));
        }
    };
    for name in astra_mcp::app::lance::TableId::SEARCHABLE {
        db.fold_new_rows_into_indexes(name).await?;
    }
    // an export older than the uses: its fixes and passages count as restored now, so expiry (docs/tools.md,
    // "Expiry") starts here, not when each was first written elsewhere
    let db = Arc::new(db);
    let mut without_uses: std::collections::BTreeMap<&str, Vec<uuid::Uuid>> = Default::default();
    for (actor, id) in &report.without_uses {
        without_uses.entry(actor.as_str()).or_default().push(*id);
    }
    for (actor, ids) in &without_uses {
        UseLog::start(db.clone(), actor, settings.expiry).keep("import", ids).await?;
    }
    let redacted = match report.redacted {
        0 => String::new(),
        1 => "; secrets redacted in 1 row".to_string(),
        n => format!("; secrets redacted in {n} rows"),
    };
    let forgotten = match report.stayed_forgotten {
        0 => String::new(),
        1 => "; 1 conversation item forgotten since stays forgotten".to_string(),
        n => format!("; {n} conversation items forgotten since stay forgotten"),
    };
    println!(
        "imported {}{}{redacted}{forgotten}",
        summary(&report.rows),
        if report.reembedded { " (re-embedded: the export was made with another model)" } else { "" }
    );
    if !report.without_uses.is_empty() {
        let n = report.without_uses.len();
        let (count, they) =
            if n == 1 { ("1 fix or passage".to_string(), "it") } else { (format!("{n} fixes and passages"), "they") };
        eprintln!(
            "astra-mcp: note: the export is older than usage records: {count} count as used now, so {they} expire only \
             after {} days unused from today",
            settings.expiry.0.map_or("no".to_string(), |d| d.num_days().to_string())
        );
    }
    for note in import_notes(&settings, &db, &seen).await? {
        eprintln!("astra-mcp: note: {note}");
    }
    Ok(())
}

/// What opening a local store where there was none adds to the disk, so that a failed `memory import`
/// takes it away again: the first directory of the store's path that did not exist, with everything
/// under it, or, in a directory that existed without a store, the entries the opening added.
enum NewStore {
    Tree(PathBuf),
    Entries(PathBuf, std::collections::BTreeSet<std::ffi::OsString>),
}

impl NewStore {
    /// `None` when a store is at `db` (its `meta` table) or `db` is no local path.
    fn before_opening(db: &str) -> Option<Self> {
        let Ok(astra_mcp::store::Location::Local(dir)) = astra_mcp::store::Location::parse(db) else { return None };
        let dir = PathBuf::from(dir);
        if dir.join("meta.lance").exists() {
            return None;
        }
        let mut first_new = None;
        for ancestor in dir.ancestors().filter(|a| !a.as_os_str().is_empty()) {
            if ancestor.exists() {
                break;
            }
            first_new = Some(ancestor.to_path_buf());
        }
        match first_new {
            Some(top) => Some(Self::Tree(top)),
            None => {
                let entries = std::fs::read_dir(&dir).ok()?.filter_map(|e| e.ok().map(|e| e.file_name())).collect();
                Some(Self::Entries(dir, entries))
            }
        }
    }

    /// Removes what the opening added; what cannot be removed is logged.
    fn remove(self) {
        let gone = |path: &std::path::Path| {
            let removed = if path.is_dir() { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) };
            if let Err(e) = removed {
                tracing::warn!("{} was made for the failed import and is left there: {e}", path.display());
            }
        };
        match self {
            Self::Tree(top) => gone(&top),
            Self::Entries(dir, kept) => {
                for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                    if !kept.contains(&entry.file_name()) {
                        gone(&entry.path());
                    }
                }
            }
        }
    }
}

/// The rows of the export `text` (read from `file`) against the limits of the ways in: archival rows
/// against an insert's ([`astra_mcp::tools::check_passage`]: text length, number and form of tags),
/// fixes against the lengths `store_fix_memory` allows, conversation items against
/// the stored length of an item ([`astra_mcp::memory::conversation::MAX_ITEM_CHARS`]), so that a
/// hand-edited file cannot store what the tools refuse. A line that is no row of a table fails here
/// too ([`astra_mcp::app::lance::parse_export_row`], as the import would name it): all before a store
/// is made.
///
/// Returns the rows' actors and core blocks (actor, project, section), for [`import_notes`].
fn check_import_rows(file: &std::path::Path, text: &str) -> anyhow::Result<ImportedRows> {
    let mut seen = ImportedRows::default();
    let lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()).skip(1);
    for (n, line) in lines {
        let (table, row) = astra_mcp::app::lance::parse_export_row(n + 1, line).map_err(|e| in_file(file, e))?;
        let row = &serde_json::Value::Object(row);
        let what = format!("{} line {}", file.display(), n + 1);
        let string = |field: &str| row[field].as_str().unwrap_or_default().to_string();
        // as the import will store them: blank ones and non-strings dropped
        let strings = |field: &str| -> Vec<String> {
            row[field]
                .as_array()
                .map_or_else(Vec::new, |a| a.iter().filter_map(|t| t.as_str().map(str::to_string)).collect())
        };
        if let Some(actor) = row["actor_id"].as_str() {
            seen.actors.insert(actor.to_string());
        }
        let checked = match table {
            TableId::Archival => {
                let tags = (astra_mcp::memory::IMPORT_RULES.normalize_tags)(&strings("tags"));
                astra_mcp::tools::check_passage(&what, &string("text"), &tags)
            }
            TableId::Fixes => {
                use astra_mcp::tools::{
                    MAX_ERROR_TYPE_CHARS, MAX_FIX_CHARS, MAX_OUTCOME_CHARS, MAX_PATH_CHARS, MAX_PATHS,
                };
                let paths = strings("file_paths");
                let fields = [
                    ("fix_description", MAX_FIX_CHARS),
                    ("error_type", MAX_ERROR_TYPE_CHARS),
                    ("outcome", MAX_OUTCOME_CHARS),
                ];
                let over = fields
                    .into_iter()
                    .map(|(field, max)| (field, string(field).chars().count(), max))
                    .chain(paths.iter().map(|p| ("file_paths[]", p.chars().count(), MAX_PATH_CHARS)))
                    .find(|(_, chars, max)| chars > max);
                if paths.len() > MAX_PATHS {
                    Err(format!("{what}: `file_paths` has {} entries, a fix lists at most {MAX_PATHS}.", paths.len()))
                } else if let Some((field, chars, max)) = over {
                    Err(format!("{what}: `{field}` has {chars} characters, the limit is {max}; shorten it."))
                } else {
                    Ok(())
                }
            }
            TableId::Conversation => {
                let (chars, max) = (string("text").chars().count(), astra_mcp::memory::conversation::MAX_ITEM_CHARS);
                // the `…` that marks a cut item is its one character past the limit
                if chars > max + 1 {
                    Err(format!(
                        "{what}: `text` has {chars} characters, a conversation item keeps at most {max} (and the `…` \
                         that marks a cut); shorten it."
                    ))
                } else {
                    Ok(())
                }
            }
            TableId::CoreBlocks => {
                seen.core_blocks.insert((string("actor_id"), string("project"), string("section")));
                Ok(())
            }
            _ => Ok(()),
        };
        checked.map_err(|e| anyhow::anyhow!("{}; nothing was imported", e.trim_end_matches('.')))?;
    }
    Ok(seen)
}

/// A store error of `memory import` as the file's fault when it is one ([`StoreError::Invalid`]: what
/// the file holds cannot be imported), named after the file; otherwise the store's.
///
/// [`StoreError::Invalid`]: astra_mcp::store::StoreError::Invalid
fn in_file(file: &std::path::Path, e: astra_mcp::store::StoreError) -> anyhow::Error {
    match e {
        astra_mcp::store::StoreError::Invalid(why) => anyhow::anyhow!("{}: {why}", file.display()),
        other => other.into(),
    }
}

/// What [`check_import_rows`] saw of an export.
#[derive(Default)]
struct ImportedRows {
    actors: std::collections::BTreeSet<String>,
    /// (actor, project, section).
    core_blocks: std::collections::BTreeSet<(String, String, String)>,
}

/// Notes after an import: rows of other actors than the command's stay theirs (`--actor` does not
/// re-own them), and a core block the import touched that is over this configuration's limit, as it
/// stands in the store now, refuses appends until condensed.
async fn import_notes(settings: &StoreSettings, db: &LanceStore, seen: &ImportedRows) -> anyhow::Result<Vec<String>> {
    use astra_mcp::store::CoreBlockStore;
    let mut notes = Vec::new();
    let others: Vec<&str> = seen.actors.iter().map(String::as_str).filter(|a| *a != settings.actor_id).collect();
    if !others.is_empty() {
        notes.push(format!(
            "rows keep the actors written in the file ({}), not --actor (ASTRA_ACTOR) `{}`: pass --actor {} to list \
             or search them",
            others.join(", "),
            settings.actor_id,
            others[0]
        ));
    }
    for (actor, project, section) in &seen.core_blocks {
        let Some(spec) = settings.core_blocks.iter().find(|b| &b.name == section) else { continue };
        let Some(current) = db.current_block(actor, project, section).await? else { continue };
        let chars = current.value.chars().count();
        if chars > spec.limit {
            // a block of the whole actor (`human`, `persona`) has no project
            let of = if project.is_empty() {
                format!("actor `{actor}`")
            } else {
                format!("actor `{actor}`, project `{project}`")
            };
            notes.push(format!(
                "core block `{section}` of {of} has {chars} characters, over its limit of {} here: appends to it \
                 are refused until it is condensed (core_memory_replace, or the memory browser), or its limit is \
                 raised (--core-blocks {section}={chars})",
                spec.limit
            ));
        }
    }
    Ok(notes)
}

/// `memory ingest`: JSON lines of passages into archival memory, all checked before any is stored.
async fn ingest(open: OpenOptions, store: StoreArgs, file: PathBuf) -> anyhow::Result<()> {
    let settings = StoreSettings::resolve(&store, open)?;
    let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let mut passages = Vec::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Line {
            text: String,
            #[serde(default)]
            tags: Option<Vec<String>>,
        }
        let parsed: Line = serde_json::from_str(line).with_context(|| {
            format!(
                "{} line {}: expected {{\"text\": \"…\", \"tags\": [\"…\"]}}; nothing was ingested",
                file.display(),
                n + 1
            )
        })?;
        let tags = parsed.tags.unwrap_or_default();
        // the limits of archival_memory_insert, so no way in stores what the tool refuses
        astra_mcp::tools::check_passage(&format!("{} line {}", file.display(), n + 1), &parsed.text, &tags)
            .map_err(|e| anyhow::anyhow!("{}; nothing was ingested", e.to_string().trim_end_matches('.')))?;
        passages.push((parsed.text, tags));
    }
    let lance = Arc::new(app::open_store(&settings).await?);
    let project = cli_project(&settings, &lance).await?.label;
    let archival = astra_mcp::memory::ArchivalMemory::new(
        lance.clone(),
        settings.embedder(Workload::Batch),
        astra_mcp::memory::ArchivalConfig {
            scope: Scope { actor_id: settings.actor_id.clone(), project },
            near_duplicate_cosine: astra_mcp::memory::DEFAULT_NEAR_DUPLICATE_COSINE,
            fusion: Fusion::archival(),
        },
    );
    let bar = progress_bar(passages.len() as u64, "passages");
    let started = std::time::Instant::now();
    let ingested = archival
        .ingest(&passages, "ingest", &|done, total| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        })
        .await?;
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    // the indexes the searches need, now rather than at the next upkeep
    lance.fold_new_rows_into_indexes(astra_mcp::app::lance::TableId::Archival).await?;
    let astra_mcp::memory::Ingested { added, already_stored, repeated } = ingested;
    let repeated = match repeated {
        0 => String::new(),
        1 => ", 1 line repeating an earlier one".to_string(),
        n => format!(", {n} lines repeating earlier ones"),
    };
    let passages = if added == 1 { "passage" } else { "passages" };
    println!(
        "ingested {added} {passages} ({already_stored} already stored{repeated}) in {seconds:.1} s: {:.1} passages/s",
        added as f64 / seconds.max(1e-9)
    );
    Ok(())
}

/// `memory stats`: rows, fragments, indexes and versions per table.
async fn stats(open: OpenOptions, store: StoreArgs, json: bool) -> anyhow::Result<()> {
    let settings = StoreSettings::resolve(&store, open)?;
    let db = open_existing(&settings).await?;
    let stats = db.stats().await?;
    if json {
        println!("{}", serde_json::to_string_pretty(&stats)?);
    } else {
        println!("store {}", settings.db);
        println!(
            "{:<14} {:>8} {:>8} {:>12} {:>9} {:>6} {:>7} {:>8} {:>8}",
            "table", "rows", "deleted", "bytes", "fragments", "small", "indexes", "segments", "versions"
        );
        for s in &stats {
            println!(
                "{:<14} {:>8} {:>8} {:>12} {:>9} {:>6} {:>7} {:>8} {:>8}",
                s.table,
                s.rows,
                s.deleted_rows.map_or("-".to_string(), |d| d.to_string()),
                s.bytes,
                s.fragments,
                s.small_fragments,
                s.indices,
                s.vector_index_segments.map_or("-".to_string(), |n| n.to_string()),
                s.versions
            );
        }
    }
    Ok(())
}

/// `memory reindex`: re-embeds every row with this binary's model.
async fn reindex(open: OpenOptions, store: StoreArgs) -> anyhow::Result<()> {
    let settings = StoreSettings::resolve(&store, open)?;
    LanceStore::require_existing(&settings.db).await?;
    let db = LanceStore::open_for_reindex(&settings.db, open).await?;
    let counts = db.reindex(&settings.embedder(Workload::Batch)).await?;
    println!("re-embedded {}; the store now opens with {}", summary(&counts), astra_mcp::embed::MODEL_ID);
    Ok(())
}

/// `memory optimize`: compacts small fragments, folds new rows into the indexes, prunes old versions.
async fn optimize(open: OpenOptions, store: StoreArgs, prune_older_than: u64) -> anyhow::Result<()> {
    let settings = StoreSettings::resolve(&store, open)?;
    let db = open_existing(&settings).await?;
    let before = db.stats().await?;
    let keep = chrono::Duration::seconds(i64::try_from(prune_older_than).unwrap_or(i64::MAX));
    if prune_older_than < 60 {
        eprintln!(
            "astra-mcp: pruning versions younger than 60 s: writes of other processes on this machine wait for \
             each table's prune; a long read in progress elsewhere (a `memory export`) may fail. On a bucket, run \
             this only while no other machine uses the store: a write it commits meanwhile can be lost"
        );
    }
    db.optimize(keep).await?;
    let after = db.stats().await?;
    // rows first: writes by running servers meanwhile add fragments, which would read as a failure
    for (b, a) in before.iter().zip(&after) {
        println!(
            "{:<14} rows {} -> {}, fragments {} -> {}, versions {} -> {}, bytes {} -> {}",
            a.table, b.rows, a.rows, b.fragments, a.fragments, b.versions, a.versions, b.bytes, a.bytes
        );
    }
    Ok(())
}

/// `: it belongs to actor `ann` (pass --actor ann)` when another actor holds memory `id`, else empty.
async fn owner_note(db: &LanceStore, id: &str) -> anyhow::Result<String> {
    let owner = db.show_row(id, None).await?.and_then(|(_, row)| row.get("actor_id")?.as_str().map(str::to_string));
    Ok(match owner {
        Some(actor) => {
            let actor = astra_mcp::app::lance::preview(&actor, 64);
            format!(": it belongs to actor `{actor}` (pass --actor {actor}, or set ASTRA_ACTOR)")
        }
        None => String::new(),
    })
}

/// `arg` as the store spells a memory id, `None` when it is none: a UUID in any of its spellings
/// (upper case, braces, no hyphens; spaces around it) becomes the lower-case hyphenated form the tables
/// hold, a core block version's `<32 hex digits>#<version>` is lower-cased.
fn memory_id(arg: &str) -> Option<String> {
    let arg = arg.trim();
    if let Ok(id) = uuid::Uuid::parse_str(arg) {
        return Some(id.to_string());
    }
    let (hash, version) = arg.split_once('#')?;
    let is_version = hash.len() == 32
        && hash.chars().all(|c| c.is_ascii_hexdigit())
        && !version.is_empty()
        && version.chars().all(|c| c.is_ascii_digit());
    is_version.then(|| format!("{}#{version}", hash.to_ascii_lowercase()))
}

/// What `memory show` / `rm` say of an argument that is no memory id at all.
fn not_a_memory_id(id: &str) -> String {
    let id = astra_mcp::app::lance::preview(id, 64);
    format!(
        "`{id}` is not a memory id: a memory's id is a UUID (36 characters, e.g. \
         3b0e8f2a-5c1d-4e6f-9a7b-2c3d4e5f6a7b), or for a core block version `<32 hex digits>#<version>`, as \
         `astra-mcp memory list` prints them"
    )
}

fn actor_or_all(settings: &StoreSettings, all_actors: bool) -> Option<String> {
    (!all_actors).then(|| settings.actor_id.clone())
}

/// `3 archival, 1 fixes` (rows per table), or `no rows`.
fn summary(counts: &astra_mcp::app::lance::TableCounts) -> String {
    if counts.is_empty() {
        return "no rows".to_string();
    }
    let tier = astra_mcp::app::lance::TableId::tier_of;
    counts.iter().map(|(t, n)| format!("{n} {}", tier(t))).collect::<Vec<_>>().join(", ")
}
