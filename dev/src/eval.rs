//! `astra-mcp-dev eval`: the retrieval evaluations (LoCoMo conversations, the bundled fixes set) on a
//! temporary or given store, and the code check of fixes on generated git repositories; prints the
//! report and optionally writes it as JSON.

use std::io::IsTerminal;
use std::sync::Arc;

use anyhow::Context;

use crate::cli::{EvalArgs, EvalCommand};
use astra_mcp::app::LanceStore;
use astra_mcp::app::OpenOptions;
use astra_mcp::embed::{LazyEmbedder, ModelPaths, Workload};
use astra_mcp::eval::locomo;
use astra_mcp::memory::{ConversationMemory, Fusion};

pub async fn run(command: EvalCommand, open: OpenOptions) -> anyhow::Result<()> {
    match command {
        EvalCommand::Locomo { dir, db, common, own_text_weight } => {
            let conversations = locomo::load(&dir)?;
            let temp;
            let db = match db {
                Some(db) => db,
                None => {
                    temp = tempfile::tempdir().context("creating a temporary store")?;
                    temp.path().join("db").to_string_lossy().into_owned()
                }
            };
            let embedder = eval_embedder(&common).await?;
            let defaults = common.fusion(Fusion::conversation());
            let fusion = Fusion { exact_weight: own_text_weight.unwrap_or(defaults.exact_weight), ..defaults };
            let store = LanceStore::open_with(&db, open).await?;
            store.ensure_indexes().await?; // a store reused from an earlier run may lack a newer index
            let memory = ConversationMemory::new(Arc::new(store), embedder, fusion);
            let tty = std::io::stderr().is_terminal();
            let report = locomo::run(&memory, &conversations, |what, done, total| {
                if tty || done == total {
                    eprintln!("astra-mcp-dev: {what} {done}/{total} conversations");
                }
            })
            .await?;
            print!("{}", locomo::render(&report));
            println!(
                "fusion: vector_weight={} keyword_weight={} own_text_weight={}; store {db}",
                fusion.vector_weight, fusion.keyword_weight, fusion.exact_weight
            );
            write_json(common.json.as_deref(), &report)
        }
        EvalCommand::Fixes { common, keyword_exponent, identifier_weight, misses } => {
            let embedder = eval_embedder(&common).await?;
            let defaults = common.fusion(Fusion::fixes());
            let fusion = Fusion {
                keyword_exponent: keyword_exponent.unwrap_or(defaults.keyword_exponent),
                exact_weight: identifier_weight.unwrap_or(defaults.exact_weight),
                ..defaults
            };
            let temp = tempfile::tempdir().context("creating a temporary store")?;
            let store = LanceStore::open_with(&temp.path().join("db").to_string_lossy(), open).await?;
            let set = astra_mcp::eval::fixes::EvalSet::bundled();
            let report =
                astra_mcp::eval::fixes::run(Arc::new(store), embedder, &set, &astra_mcp::eval::fixes::compared(fusion))
                    .await?;
            print!("{}", astra_mcp::eval::fixes::render(&report));
            println!(
                "fusion: vector_weight={} keyword_weight={} keyword_exponent={} identifier_weight={}",
                fusion.vector_weight, fusion.keyword_weight, fusion.keyword_exponent, fusion.exact_weight
            );
            print!("{}", astra_mcp::eval::fixes::render_usage_replay(&report));
            if misses {
                print!("{}", astra_mcp::eval::fixes::render_misses(&report));
            }
            write_json(common.json.as_deref(), &report)
        }
        EvalCommand::Staleness { per_move, seed, json } => {
            let report = tokio::task::spawn_blocking(move || astra_mcp::eval::staleness::run(per_move, seed)).await??;
            print!("{}", astra_mcp::eval::staleness::render(&report));
            write_json(json.as_deref(), &report)
        }
    }
}

impl EvalArgs {
    /// `defaults` with the vector and keyword weights given on the command line.
    fn fusion(&self, defaults: Fusion) -> Fusion {
        Fusion {
            vector_weight: self.vector_weight.unwrap_or(defaults.vector_weight),
            keyword_weight: self.keyword_weight.unwrap_or(defaults.keyword_weight),
            ..defaults
        }
    }
}

/// The embedder of the evaluations, loaded, with the server's interactive settings (so timings are
/// the server's).
async fn eval_embedder(args: &EvalArgs) -> anyhow::Result<LazyEmbedder> {
    let paths = ModelPaths::resolve(args.model_dir.clone(), args.ort_dylib.clone());
    let embedder = LazyEmbedder::onnx(paths, Workload::Interactive);
    embedder.get().await?;
    Ok(embedder)
}

/// Writes `report` as pretty JSON to `path`, when given.
fn write_json(path: Option<&std::path::Path>, report: &impl serde::Serialize) -> anyhow::Result<()> {
    if let Some(path) = path {
        std::fs::write(path, serde_json::to_string_pretty(report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
