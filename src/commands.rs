//! The operator commands (`sessions`, `hook`, `memory`, `core`, `eval`): each opens the store with the
//! identity of `StoreArgs` and prints a result for a person (stdout) with progress and errors on
//! stderr. Part of the binary, not the library, which never prints (stdout is the protocol in
//! `serve`). Nothing here is reachable by a model.

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;

use astra_mcp::cli::{CoreCommand, EvalCommand, HookCommand, MemoryCommand, SessionsCommand};
use astra_mcp::config::StoreSettings;
use astra_mcp::domain::Scope;
use astra_mcp::embed::{LazyEmbedder, ModelPaths, Workload};
use astra_mcp::eval::locomo;
use astra_mcp::memory::redact::escape_controls;
use astra_mcp::memory::{ConversationMemory, CoreMemory, Fusion};
use astra_mcp::sessions::formats::TranscriptFormat;
use astra_mcp::sessions::{self, Owner};
use astra_mcp::store::lance::LanceStore;

/// The project label of a command run outside a server: `--project`, else the current directory's name.
fn cli_project(settings: &StoreSettings) -> String {
    let cwd = std::env::current_dir().ok().and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()));
    settings.project_or(cwd)
}

/// Opens the store of a command that inspects or changes existing memories: a mistyped `--db` is an
/// error, not a new empty store.
async fn open_existing(settings: &StoreSettings) -> anyhow::Result<LanceStore> {
    if !settings.db.contains("://") {
        anyhow::ensure!(
            std::path::Path::new(&settings.db).is_dir(),
            "no memory store at {}: check --db (ASTRA_DB); `astra-mcp serve` creates one",
            settings.db
        );
    }
    settings.open_store().await
}

fn conversation_memory(store: LanceStore, embedder: LazyEmbedder) -> ConversationMemory {
    ConversationMemory::new(Arc::new(store), embedder, Fusion::conversation())
}

fn print_imports(result: &sessions::FileImport) {
    for s in &result.sessions {
        println!(
            "{}: {} session {}: {} items read, {} added, {} already stored",
            s.path.display(),
            s.format,
            s.session_id,
            s.counts.read,
            s.counts.added,
            s.counts.already_stored
        );
    }
    if result.sessions.is_empty() {
        println!("(no conversation items found)");
    }
    if result.skipped_lines > 0 {
        eprintln!("astra-mcp: {} lines were not JSON objects and were skipped", result.skipped_lines);
    }
}

pub async fn sessions(command: SessionsCommand) -> anyhow::Result<()> {
    let SessionsCommand::Import { store, files, format, session_id } = command;
    let settings = StoreSettings::resolve(&store)?;
    let session_id = session_id.map(|s| s.trim().to_string());
    anyhow::ensure!(
        session_id.as_ref().is_none_or(|s| !s.is_empty()),
        "--session-id is empty: give an id or leave it out"
    );
    let format = format
        .map(|f| {
            TranscriptFormat::from_name(&f)
                .with_context(|| format!("--format `{f}`: use claude-code, codex or responses"))
        })
        .transpose()?;
    let owner = Owner { actor_id: settings.actor_id.clone(), project: cli_project(&settings) };
    let memory = conversation_memory(settings.open_store().await?, settings.embedder(Workload::Batch));
    let mut failed = 0;
    for file in &files {
        match sessions::import_file(&memory, &owner, file, format, session_id.as_deref()).await {
            Ok(result) => print_imports(&result),
            Err(e) => {
                failed += 1;
                eprintln!("astra-mcp: {e:#}");
            }
        }
    }
    anyhow::ensure!(failed == 0, "{failed} of {} files could not be imported", files.len());
    Ok(())
}

/// `hook claude-code` / `hook codex`: the work is `astra_mcp::hooks`; this prints its outcome. Context
/// goes to stdout (the client adds it for the model), reports to stderr; an error becomes one line on stderr with
/// exit code 1 (main), never 2, which would block the session.
pub async fn hook(command: HookCommand) -> anyhow::Result<()> {
    let (HookCommand::ClaudeCode(args) | HookCommand::Codex(args)) = command;
    let mut input = Vec::new();
    std::io::stdin().read_to_end(&mut input).context("reading the hook input from stdin")?;
    let settings = astra_mcp::config::HookSettings::resolve(&args).map_err(one_line)?;
    match astra_mcp::hooks::run(&input, &settings).await.map_err(one_line)? {
        astra_mcp::hooks::Outcome::Context { stdout, report } => {
            let mut out = std::io::stdout().lock();
            out.write_all(stdout.as_bytes()).and_then(|()| out.flush()).context("writing the hook output")?;
            eprintln!("astra-mcp: {report}");
        }
        astra_mcp::hooks::Outcome::Imported(report) => eprintln!("astra-mcp: {report}"),
        astra_mcp::hooks::Outcome::Nothing => {}
    }
    Ok(())
}

/// The error chain on one line: Claude Code shows a failing hook's stderr to the user.
fn one_line(e: anyhow::Error) -> anyhow::Error {
    anyhow::anyhow!("{}", format!("{e:#}").split_whitespace().collect::<Vec<_>>().join(" "))
}

fn actor_or_all(settings: &StoreSettings, all_actors: bool) -> Option<String> {
    (!all_actors).then(|| settings.actor_id.clone())
}

pub async fn memory(command: MemoryCommand) -> anyhow::Result<()> {
    match command {
        MemoryCommand::List { store, table, limit, all_actors, json } => {
            let settings = StoreSettings::resolve(&store)?;
            let db = open_existing(&settings).await?;
            let rows = db.list_rows(table.as_deref(), actor_or_all(&settings, all_actors).as_deref(), limit).await?;
            for row in &rows {
                if json {
                    println!("{}", serde_json::to_string(row)?);
                } else {
                    println!("{:<13} {}  {}  {:<12} {}", row.table, row.id, row.created_at, row.project, row.preview);
                }
            }
            if rows.is_empty() {
                eprintln!("astra-mcp: no memories of actor `{}` in {}", settings.actor_id, settings.db);
            }
        }
        MemoryCommand::Show { store, id, all_actors } => {
            let settings = StoreSettings::resolve(&store)?;
            let db = open_existing(&settings).await?;
            let (table, row) = db
                .show_row(&id, actor_or_all(&settings, all_actors).as_deref())
                .await?
                .with_context(|| format!("no memory with id {id} (of actor `{}`)", settings.actor_id))?;
            println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "table": table, "row": row }))?);
        }
        MemoryCommand::Rm { store, ids } => {
            let settings = StoreSettings::resolve(&store)?;
            let db = open_existing(&settings).await?;
            let mut missing = Vec::new();
            for id in &ids {
                match db.delete_row(&settings.actor_id, id).await? {
                    Some(table) => println!("deleted {id} from {table}"),
                    None => missing.push(id.clone()),
                }
            }
            anyhow::ensure!(
                missing.is_empty(),
                "no memory of actor `{}` with id {}: see `astra-mcp memory list`",
                settings.actor_id,
                missing.join(", ")
            );
        }
        MemoryCommand::Export { store, out, all_actors } => {
            let settings = StoreSettings::resolve(&store)?;
            let db = open_existing(&settings).await?;
            let actor = actor_or_all(&settings, all_actors);
            let counts = match &out {
                Some(path) => {
                    let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
                    let mut writer = std::io::BufWriter::new(file);
                    let counts = db.export(&mut writer, actor.as_deref()).await?;
                    writer.flush()?;
                    counts
                }
                None => {
                    let stdout = std::io::stdout();
                    let mut lock = stdout.lock();
                    db.export(&mut lock, actor.as_deref()).await?
                }
            };
            eprintln!("astra-mcp: exported {}", summary(&counts));
        }
        MemoryCommand::Import { store, file } => {
            let settings = StoreSettings::resolve(&store)?;
            // read and check first: a file that cannot be read, or is no export this build reads, leaves no
            // new store behind
            let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
            astra_mcp::store::lance::manage::read_export_header(&text).map_err(|e| match e {
                astra_mcp::store::StoreError::Backend(why) => anyhow::anyhow!("{}: {why}", file.display()),
                other => other.into(),
            })?;
            let db = settings.open_store().await?;
            let report = db.import(&text, &settings.embedder(Workload::Batch)).await?;
            for name in astra_mcp::store::lance::SEARCHABLE_TABLES {
                db.fold_new_rows_into_indexes(name).await?;
            }
            let redacted = match report.redacted {
                0 => String::new(),
                1 => "; secrets redacted in 1 row".to_string(),
                n => format!("; secrets redacted in {n} rows"),
            };
            println!(
                "imported {}{}{redacted}",
                summary(&report.rows),
                if report.reembedded { " (re-embedded: the export was made with another model)" } else { "" }
            );
        }
        MemoryCommand::Ingest { store, file } => {
            let settings = StoreSettings::resolve(&store)?;
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
            let project = cli_project(&settings);
            let lance = Arc::new(settings.open_store().await?);
            let archival = astra_mcp::memory::ArchivalMemory::new(
                lance.clone(),
                settings.embedder(Workload::Batch),
                astra_mcp::memory::ArchivalConfig {
                    scope: Scope { actor_id: settings.actor_id.clone(), project },
                    near_duplicate_cosine: astra_mcp::config::DEFAULT_NEAR_DUPLICATE_COSINE,
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
            lance.fold_new_rows_into_indexes(astra_mcp::store::lance::ARCHIVAL_TABLE).await?;
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
        }
        MemoryCommand::Stats { store, json } => {
            let settings = StoreSettings::resolve(&store)?;
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
        }
        MemoryCommand::Reindex { store } => {
            let settings = StoreSettings::resolve(&store)?;
            anyhow::ensure!(
                settings.db.contains("://") || std::path::Path::new(&settings.db).is_dir(),
                "no memory store at {}: check --db (ASTRA_DB)",
                settings.db
            );
            let db = LanceStore::open_for_reindex(&settings.db).await?;
            let counts = db.reindex(&settings.embedder(Workload::Batch)).await?;
            println!("re-embedded {}; the store now opens with {}", summary(&counts), astra_mcp::embed::MODEL_ID);
        }
        MemoryCommand::Optimize { store, prune_older_than } => {
            let settings = StoreSettings::resolve(&store)?;
            let db = open_existing(&settings).await?;
            let before = db.stats().await?;
            let keep = chrono::Duration::seconds(i64::try_from(prune_older_than).unwrap_or(i64::MAX));
            if prune_older_than < 60 {
                eprintln!(
                    "astra-mcp: pruning versions younger than 60 s: a server using this store right now may fail \
                     a search until it reopens the table; prefer the default when servers are running"
                );
            }
            db.optimize(keep).await?;
            let after = db.stats().await?;
            for (b, a) in before.iter().zip(&after) {
                println!(
                    "{:<14} fragments {} -> {}, versions {} -> {}, bytes {} -> {}",
                    a.table, b.fragments, a.fragments, b.versions, a.versions, b.bytes, a.bytes
                );
            }
        }
    }
    Ok(())
}

/// `3 archival, 1 fixes` (rows per table), or `no rows`.
fn summary(counts: &astra_mcp::store::lance::manage::TableCounts) -> String {
    if counts.is_empty() {
        return "no rows".to_string();
    }
    counts.iter().map(|(t, n)| format!("{n} {t}")).collect::<Vec<_>>().join(", ")
}

fn core_memory(settings: &StoreSettings, store: LanceStore) -> CoreMemory {
    let scope = Scope { actor_id: settings.actor_id.clone(), project: cli_project(settings) };
    CoreMemory::new(Arc::new(store), scope, settings.core_blocks.clone())
}

pub async fn core(command: CoreCommand) -> anyhow::Result<()> {
    match command {
        CoreCommand::Show { store, section } => {
            let settings = StoreSettings::resolve(&store)?;
            let core = core_memory(&settings, open_existing(&settings).await?);
            let blocks = match section {
                Some(s) => vec![core.read(&s).await?],
                None => core.read_all().await?,
            };
            println!("{}", astra_mcp::transport::render_core_memory(&blocks));
        }
        CoreCommand::History { store, section } => {
            let settings = StoreSettings::resolve(&store)?;
            let core = core_memory(&settings, open_existing(&settings).await?);
            let history = core.history(&section).await?;
            if history.is_empty() {
                println!("block `{section}` has never been written");
            }
            for v in history {
                println!(
                    "version {} at {} by {}{}:",
                    v.version,
                    v.created_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    v.operation,
                    if v.session_id.is_empty() { String::new() } else { format!(" (session {})", v.session_id) }
                );
                for line in v.value.lines() {
                    println!("    {line}");
                }
            }
        }
        CoreCommand::Restore { store, section, version } => {
            let settings = StoreSettings::resolve(&store)?;
            let core = core_memory(&settings, open_existing(&settings).await?);
            let block = core.restore(&section, version).await?;
            println!("block `{section}` restored from version {version}; it is now version {}", block.version);
        }
    }
    Ok(())
}

pub async fn eval(command: EvalCommand) -> anyhow::Result<()> {
    match command {
        EvalCommand::Locomo { dir, db, model_dir, ort_dylib, vector_weight, keyword_weight, own_text_weight, json } => {
            let conversations = locomo::load(&dir)?;
            let temp;
            let db = match db {
                Some(db) => db,
                None => {
                    temp = tempfile::tempdir().context("creating a temporary store")?;
                    temp.path().join("db").to_string_lossy().into_owned()
                }
            };
            let embedder = eval_embedder(model_dir, ort_dylib).await?;
            let defaults = Fusion::conversation();
            let fusion = Fusion {
                vector_weight: vector_weight.unwrap_or(defaults.vector_weight),
                keyword_weight: keyword_weight.unwrap_or(defaults.keyword_weight),
                own_text_weight: own_text_weight.unwrap_or(defaults.own_text_weight),
                ..defaults
            };
            let store = LanceStore::open(&db).await?;
            store.ensure_indexes().await?; // a store reused from an earlier run may lack a newer index
            let memory = ConversationMemory::new(Arc::new(store), embedder, fusion);
            let tty = std::io::stderr().is_terminal();
            let report = locomo::run(&memory, &conversations, |what, done, total| {
                if tty || done == total {
                    eprintln!("astra-mcp: {what} {done}/{total} conversations");
                }
            })
            .await?;
            print!("{}", locomo::render(&report));
            println!(
                "fusion: vector_weight={} keyword_weight={} own_text_weight={}; store {db}",
                fusion.vector_weight, fusion.keyword_weight, fusion.own_text_weight
            );
            write_json(json.as_deref(), &report)
        }
        EvalCommand::Fixes { model_dir, ort_dylib, vector_weight, keyword_weight, json } => {
            let embedder = eval_embedder(model_dir, ort_dylib).await?;
            let defaults = Fusion::fixes();
            let fusion = Fusion {
                vector_weight: vector_weight.unwrap_or(defaults.vector_weight),
                keyword_weight: keyword_weight.unwrap_or(defaults.keyword_weight),
                ..defaults
            };
            let temp = tempfile::tempdir().context("creating a temporary store")?;
            let store = LanceStore::open(&temp.path().join("db").to_string_lossy()).await?;
            let set = astra_mcp::eval::fixes::EvalSet::bundled();
            let report =
                astra_mcp::eval::fixes::run(Arc::new(store), embedder, &set, &astra_mcp::eval::fixes::compared(fusion))
                    .await?;
            print!("{}", astra_mcp::eval::fixes::render(&report));
            println!("fusion: vector_weight={} keyword_weight={}", fusion.vector_weight, fusion.keyword_weight);
            write_json(json.as_deref(), &report)
        }
    }
}

/// The embedder of the evaluations, loaded, with the server's interactive settings (so timings are
/// the server's).
async fn eval_embedder(model_dir: Option<PathBuf>, ort_dylib: Option<PathBuf>) -> anyhow::Result<LazyEmbedder> {
    let cache = ModelPaths::in_cache(&ModelPaths::default_cache_dir());
    let embedder = LazyEmbedder::onnx(
        ModelPaths { model_dir: model_dir.unwrap_or(cache.model_dir), ort_dylib: ort_dylib.unwrap_or(cache.ort_dylib) },
        Workload::Interactive,
    );
    embedder.get().await?;
    Ok(embedder)
}

/// Writes `report` as pretty JSON to `path`, when given.
fn write_json(path: Option<&std::path::Path>, report: &impl serde::Serialize) -> anyhow::Result<()> {
    if let Some(path) = path {
        std::fs::write(path, serde_json::to_string_pretty(report)?).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// `name` from the environment, else from `.env` in the working directory.
fn env_or_dotenv(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty()).or_else(|| {
        dotenvy::from_path_iter(".env").ok()?.filter_map(Result::ok).find_map(|(k, v)| (k == name).then_some(v))
    })
}

/// The key comes from the environment, else from `.env` in the working directory (never a flag).
fn openai_api_key() -> Option<String> {
    env_or_dotenv(astra_mcp::env_vars::OPENAI_API_KEY)
}

/// `<data dir>/astra-mcp`: the default home of the ledger and the runs' evidence.
fn data_dir() -> std::path::PathBuf {
    dirs::data_dir().unwrap_or_else(|| ".".into()).join("astra-mcp")
}

/// The Responses API base URL: flag > environment > `.env` > the OpenAI endpoint (a base URL in `.env`
/// must not be ignored while its key is used).
fn base_url(args: &astra_mcp::cli::ModelArgs) -> String {
    args.base_url
        .clone()
        .or_else(|| env_or_dotenv(astra_mcp::env_vars::OPENAI_BASE_URL))
        .unwrap_or_else(|| "https://api.openai.com/v1".to_string())
}

/// The drive settings of `args` for run `run_id`.
fn drive_config(
    args: &astra_mcp::cli::ModelArgs,
    tool_loop: &astra_mcp::cli::LoopArgs,
    run_id: &str,
    prompt: String,
) -> astra_mcp::drive::DriveConfig {
    let data = data_dir();
    astra_mcp::drive::DriveConfig {
        base_url: base_url(args),
        api_key: openai_api_key(),
        approve_live_cost: args.approve_live_cost,
        model: args.model.clone(),
        run_id: run_id.to_string(),
        prompt,
        max_turns: tool_loop.max_turns,
        max_tool_calls: tool_loop.max_tool_calls,
        max_output_tokens: args.max_output_tokens,
        reasoning_effort: args.reasoning_effort.clone(),
        verbosity: tool_loop.verbosity.clone(),
        pricing: astra_mcp::drive::Pricing {
            input_per_million_usd: args.input_usd_per_million,
            output_per_million_usd: args.output_usd_per_million,
        },
        run_budget_usd: args.run_budget_usd,
        project_budget_usd: args.project_budget_usd,
        ledger: args.ledger.clone().unwrap_or_else(|| data.join("ledger.jsonl")),
        runs_dir: tool_loop.runs_dir.clone().unwrap_or_else(|| data.join("runs")),
        timeout_secs: args.request_timeout,
        context_budget_tokens: tool_loop.context_budget_tokens,
    }
}

/// `astra-mcp drive`: one Responses API run on this server's tools; prints the final text and the
/// run's counts.
pub async fn drive(args: astra_mcp::cli::DriveArgs) -> anyhow::Result<()> {
    use astra_mcp::cli::ServeArgs;
    use astra_mcp::config::ServeSettings;

    let prompt = match (&args.prompt, &args.prompt_file) {
        (Some(text), _) => text.clone(),
        (None, Some(file)) => {
            std::fs::read_to_string(file).with_context(|| format!("reading --prompt-file {}", file.display()))?
        }
        (None, None) => "The tests of this workspace fail. Fix the code (not the tests) so they pass.".to_string(),
    };
    anyhow::ensure!(!args.run_id.trim().is_empty(), "--run-id is empty: give the run an id");
    let serve = ServeArgs {
        stdio: true,
        http: None,
        allow_remote: false,
        config: None,
        shutdown_grace: 30,
        limits: astra_mcp::cli::LimitArgs::default(),
        store: args.store.clone(),
        workspace: Some(args.workspace.clone()),
        test_command: args.test_command.clone(),
        test_timeout: args.test_timeout,
        trust_client_outcomes: false,
        min_score: astra_mcp::config::DEFAULT_MIN_SCORE,
        near_duplicate_cosine: astra_mcp::config::DEFAULT_NEAR_DUPLICATE_COSINE,
    };
    let settings = ServeSettings::resolve(&serve)?;
    let workspace = settings.fixes.workspace.clone().context("--workspace is required")?;
    let config = drive_config(&args.model, &args.tool_loop, args.run_id.trim(), prompt);
    // refuse before opening anything when no request may be sent
    preflight(&config)?;
    let (hosts, opening) = settings.open();
    opening.await.map_err(|e| anyhow::anyhow!("{e:#}"))?;
    let host = hosts.host(hosts.default_scope()).await?;
    let result = astra_mcp::drive::run(&host, &workspace, &config).await;
    hosts.flush().await;
    let report = result?;
    println!("{}", report.final_text);
    eprintln!(
        "astra-mcp drive: {} requests in {} chain(s), {} tool calls, {} input + {} output tokens, {:.4} USD; evidence in {}",
        report.requests,
        report.chains,
        report.tool_calls,
        report.input_tokens,
        report.output_tokens,
        report.cost_usd,
        config.runs_dir.join(&config.run_id).display()
    );
    Ok(())
}

/// The approval and the key, checked before anything is opened.
fn preflight(config: &astra_mcp::drive::DriveConfig) -> anyhow::Result<()> {
    use astra_mcp::drive::DriveError;
    if !config.approve_live_cost {
        return Err(DriveError::NotApproved(format!("{}/responses", config.base_url.trim_end_matches('/'))).into());
    }
    if config.api_key.as_deref().is_none_or(|k| k.trim().is_empty()) {
        return Err(DriveError::NoApiKey.into());
    }
    Ok(())
}

/// `astra-mcp session-demo`: alpha, then beta in a new session (and `--repeat` more betas); prints the
/// table, and fails when a check does.
pub async fn session_demo(args: astra_mcp::cli::SessionDemoArgs) -> anyhow::Result<()> {
    use astra_mcp::drive::demo::{self, DemoSettings};

    anyhow::ensure!(!args.run_id.trim().is_empty(), "--run-id is empty: give the experiment an id");
    let run_id = args.run_id.trim().to_string();
    let drive = drive_config(&args.model, &args.tool_loop, &run_id, String::new());
    preflight(&drive)?;
    // The checks read the evidence of this experiment's runs: an id used before would mix in old ones.
    let used = [run_id.clone(), format!("{run_id}-alpha"), format!("{run_id}-beta")]
        .into_iter()
        .any(|name| drive.runs_dir.join(name).exists());
    anyhow::ensure!(
        !used,
        "--run-id `{run_id}` was used before (evidence under {}): give this experiment a new id",
        drive.runs_dir.display()
    );
    let mut store_args = args.store.clone();
    if store_args.db.is_none() {
        // the experiment keeps its own store unless told otherwise
        store_args.db = Some(drive.runs_dir.join(&run_id).join("db").to_string_lossy().into_owned());
    }
    let settings = StoreSettings::resolve(&store_args)?;
    let store = Arc::new(settings.open_store().await?);
    let embedder = settings.embedder(Workload::Interactive);
    embedder.start_loading();
    let demo = DemoSettings {
        projects: args.projects.clone(),
        test_command: args.test_command.clone(),
        test_timeout: std::time::Duration::from_secs(args.test_timeout),
        run_id,
        repeat: args.repeat,
        actor_id: settings.actor_id.clone(),
        drive,
    };
    let report = demo::run(store, embedder, settings.core_blocks.clone(), &demo).await?;
    print!("{}", report.table());
    let mut failed = Vec::new();
    if report.alpha_fix.is_none() {
        failed.push("alpha stored no fix".to_string());
    }
    for row in &report.rows {
        if !row.new_chain {
            failed.push(format!("{}: its first request carried previous_response_id", row.session));
        }
        if row.memory_retrieved == Some(false) {
            failed.push(format!("{}: alpha's fix was not retrieved before the first edit", row.session));
        }
        if !row.untouched_tests_passed {
            failed.push(format!("{}: the untouched acceptance tests fail", row.session));
        }
    }
    anyhow::ensure!(failed.is_empty(), "session-demo checks failed: {}", failed.join("; "));
    eprintln!("astra-mcp session-demo: every check passed (store {})", settings.db);
    Ok(())
}

/// `astra-mcp distill`: one run for the actor, or `distill status`.
pub async fn distill(args: astra_mcp::cli::DistillArgs) -> anyhow::Result<()> {
    use astra_mcp::cli::DistillCommand;
    use astra_mcp::distill::{DistillConfig, Distiller};

    if let Some(DistillCommand::Status { db, actor, json }) = args.command {
        let db = db.unwrap_or_else(|| astra_mcp::config::default_db_path().to_string_lossy().into_owned());
        let store_args = astra_mcp::cli::StoreArgs { db: Some(db), ..args.store.clone() };
        let settings = StoreSettings::resolve(&store_args)?;
        let store = Arc::new(open_existing(&settings).await?);
        let runs = Distiller::new(store, settings.embedder(Workload::Batch)).status(actor.as_deref()).await?;
        print_runs(&runs, json);
        return Ok(());
    }
    let settings = StoreSettings::resolve(&args.store)?;
    let model = &args.model;
    let config = DistillConfig {
        actor_id: settings.actor_id.clone(),
        since: args.since,
        max_items: args.max_items.map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        instructions: args.instructions.clone(),
        base_url: base_url(model),
        api_key: openai_api_key(),
        approve_live_cost: model.approve_live_cost,
        model: model.model.clone(),
        max_output_tokens: model.max_output_tokens,
        reasoning_effort: model.reasoning_effort.clone(),
        pricing: astra_mcp::drive::Pricing {
            input_per_million_usd: model.input_usd_per_million,
            output_per_million_usd: model.output_usd_per_million,
        },
        run_budget_usd: model.run_budget_usd,
        actor_budget_usd: model.project_budget_usd,
        ledger: model.ledger.clone().unwrap_or_else(|| data_dir().join("ledger.jsonl")),
        timeout_secs: model.request_timeout,
    };
    // refuse before opening anything when no request may be sent
    if !config.approve_live_cost {
        let url = format!("{}/responses", config.base_url.trim_end_matches('/'));
        return Err(astra_mcp::drive::DriveError::NotApproved(url).into());
    }
    if config.api_key.as_deref().is_none_or(|k| k.trim().is_empty()) {
        return Err(astra_mcp::drive::DriveError::NoApiKey.into());
    }
    let store = Arc::new(open_existing(&settings).await?);
    let run = Distiller::new(store, settings.embedder(Workload::Batch)).run(&config).await?;
    println!(
        "distill run {} {}: {} items read; {} added, {} updated, {} superseded, {} unchanged, {} rejected; \
{} requests, {} input + {} output tokens, {:.4} USD",
        run.run_id,
        run.state.as_str(),
        run.items_read,
        run.added,
        run.updated,
        run.superseded,
        run.unchanged,
        run.rejected,
        run.requests,
        run.input_tokens,
        run.output_tokens,
        run.cost_usd
    );
    for change in &run.changes {
        let field = |k: &str| change[k].as_str().unwrap_or_default().to_string();
        let line = match field("action").as_str() {
            "add" => format!("  + {} {}", field("memory_id"), field("text")),
            "update" => format!("  ~ {} {} (was: {})", field("memory_id"), field("text"), field("previous_text")),
            "supersede" => {
                format!(
                    "  ! {} {} (supersedes {}: {})",
                    field("memory_id"),
                    field("text"),
                    field("target_id"),
                    field("previous_text")
                )
            }
            _ => format!("  = {} {}", field("memory_id"), field("text")),
        };
        println!("{}", astra_mcp::store::lance::manage::preview(&line, 2_000));
    }
    Ok(())
}

/// `distill status`: a table, or JSON lines.
fn print_runs(runs: &[astra_mcp::distill::RunStatus], json: bool) {
    if json {
        for status in runs {
            let mut value = serde_json::to_value(&status.run).expect("runs serialize");
            value["interrupted"] = serde_json::json!(status.interrupted);
            println!("{value}");
        }
        return;
    }
    if runs.is_empty() {
        println!("no distill runs");
        return;
    }
    println!(
        "{:<36} {:<16} {:<10} {:<20} {:>5} {:>5} {:>7} {:>10} {:>8}  ERROR",
        "RUN", "ACTOR", "STATE", "STARTED", "READ", "ADDED", "UPDATED", "SUPERSEDED", "USD"
    );
    for status in runs {
        let r = &status.run;
        let state = if status.interrupted { "RUNNING*" } else { r.state.as_str() };
        let error = r.error.clone().unwrap_or_default();
        let line = format!(
            "{:<36} {:<16} {:<10} {:<20} {:>5} {:>5} {:>7} {:>10} {:>8.4}  {}",
            r.run_id,
            r.actor_id,
            state,
            r.started_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            r.items_read,
            r.added,
            r.updated,
            r.superseded,
            r.cost_usd,
            error.chars().take(200).collect::<String>()
        );
        println!("{}", escape_controls(&line));
    }
    if runs.iter().any(|s| s.interrupted) {
        println!("* interrupted: no process holds the run's lock; the actor's next run closes it");
    }
}

/// Lines of a text file, blank ones skipped.
fn lines_of(path: &std::path::Path) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let lines: Vec<String> = text.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_string).collect();
    anyhow::ensure!(!lines.is_empty(), "{} has no text lines", path.display());
    Ok(lines)
}

/// `astra-mcp bench`: one JSON object per measurement on stdout.
pub async fn bench(command: astra_mcp::cli::BenchCommand) -> anyhow::Result<()> {
    use astra_mcp::cli::BenchCommand;
    use serde_json::json;
    let machine = json!({"cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)});
    match command {
        BenchCommand::Embed { store, texts, batch, sort_by_length, one_batch } => {
            let settings = StoreSettings::resolve(&store)?;
            let embedder = settings.embedder(Workload::Batch);
            let mut texts = lines_of(&texts)?;
            if sort_by_length {
                texts.sort_by_key(|t| t.chars().count());
            }
            for size in batch {
                let per_second = astra_mcp::bench::embed_throughput(&embedder, &texts, size, one_batch).await?;
                println!(
                    "{}",
                    json!({"bench": "embed", "batch": size, "texts": texts.len(), "sorted": sort_by_length,
                    "one_batch": one_batch,
                    "texts_per_second": per_second, "machine": machine})
                );
            }
        }
        BenchCommand::Populate { store, texts, rows, seed } => {
            let settings = StoreSettings::resolve(&store)?;
            let project = cli_project(&settings);
            let lance = settings.open_store().await?;
            let texts = lines_of(&texts)?;
            let bar = progress_bar(rows as u64, "rows");
            let report = astra_mcp::bench::populate(
                &lance,
                &settings.embedder(Workload::Batch),
                &Scope { actor_id: settings.actor_id.clone(), project },
                &texts,
                rows,
                seed,
                &|done| bar.set_position(done as u64),
            )
            .await?;
            bar.finish_and_clear();
            let started = std::time::Instant::now();
            lance.ensure_indexes().await?;
            let fts_seconds = started.elapsed().as_secs_f64();
            let started = std::time::Instant::now();
            let indexed = lance.ensure_large_table_indexes(astra_mcp::store::lance::ARCHIVAL_TABLE).await?;
            let vector_index_seconds = started.elapsed().as_secs_f64();
            // then the store's upkeep as `memory optimize` runs it (a server's upkeep every 100 writes
            // compacts the same way): the fragments written above (one per write batch) compacted into
            // fragments of up to 1M rows, old versions pruned (no server has this fresh store open, so no
            // grace is needed)
            let started = std::time::Instant::now();
            lance.optimize(chrono::Duration::zero()).await?;
            println!(
                "{}",
                json!({"bench": "populate", "rows": report.rows, "embedded": report.embedded,
                "write_seconds": report.write_seconds, "fts_index_seconds": fts_seconds, "vector_index": indexed,
                "vector_index_seconds": vector_index_seconds, "optimize_seconds": started.elapsed().as_secs_f64(),
                "machine": machine})
            );
        }
        BenchCommand::Recall { store, queries, k } => {
            let settings = StoreSettings::resolve(&store)?;
            let lance = open_existing(&settings).await?;
            let queries = lines_of(&queries)?;
            let r =
                astra_mcp::bench::recall(&lance, &settings.embedder(Workload::Batch), &settings.actor_id, &queries, k)
                    .await?;
            println!(
                "{}",
                json!({"bench": "recall", "queries": r.queries, "k": r.k, "recall": r.recall, "indexed": r.indexed,
                "indexed_p50_ms": r.indexed_p50_ms, "indexed_p99_ms": r.indexed_p99_ms,
                "exact_p50_ms": r.exact_p50_ms, "exact_p99_ms": r.exact_p99_ms, "machine": machine})
            );
        }
    }
    Ok(())
}

/// A progress bar on stderr when it is a terminal; hidden otherwise (logs and CI stay clean).
fn progress_bar(total: u64, unit: &str) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total);
    let template = format!("{{bar:40}} {{pos}}/{{len}} {unit} ({{per_sec}}, eta {{eta}})");
    if let Ok(style) = indicatif::ProgressStyle::with_template(&template) {
        bar.set_style(style);
    }
    bar
}
