//! `astra-mcp-dev bench`: embedder throughput, bulk loading of a large store, recall of the vector index;
//! one JSON object per measurement on stdout.

use anyhow::Context;
use serde_json::json;

use crate::cli::BenchCommand;
use astra_mcp::app;
use astra_mcp::app::OpenOptions;
use astra_mcp::config::StoreSettings;
use astra_mcp::domain::Scope;
use astra_mcp::embed::Workload;

use astra_mcp::app::open_existing;
use astra_mcp::app::process::progress_bar;

pub async fn run(command: BenchCommand, open: OpenOptions) -> anyhow::Result<()> {
    let machine = json!({"cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)});
    match command {
        BenchCommand::Embed { store, texts, batch, sort_by_length, one_batch } => {
            let settings = StoreSettings::resolve(&store, open)?;
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
            let settings = StoreSettings::resolve(&store, open)?;
            let lance = app::open_store(&settings).await?;
            let project = app::project_label(&settings, &lance, std::env::current_dir().ok().as_deref()).await?.label;
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
            let indexed = lance.ensure_large_table_indexes(astra_mcp::app::lance::TableId::Archival).await?;
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
            let settings = StoreSettings::resolve(&store, open)?;
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

/// Lines of a text file, blank ones skipped.
fn lines_of(path: &std::path::Path) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let lines: Vec<String> = text.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_string).collect();
    anyhow::ensure!(!lines.is_empty(), "{} has no text lines", path.display());
    Ok(lines)
}
