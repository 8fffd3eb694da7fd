//! The embedder against reference all-MiniLM-L6-v2 embeddings (sentence-transformers, fp32):
//! `tests/fixtures/embeddings/minilm_golden.json` (32 texts, sentence-transformers 6.2.0, fp32, mean
//! pooling, L2-normalised). Each embedding must have cosine ≥ 0.998 with its reference, ≥ 0.995 for the
//! empty string (the int8 model measured 0.99896 and 0.99634).

use astra_mcp::embed::{DIMENSION, EmbedError, Embedder, ModelPaths, OnnxEmbedder, Workload, cosine};
use serde::Deserialize;

use crate::support::{cache_dir, embedder, repo};

#[derive(Deserialize)]
struct Golden {
    dimension: usize,
    items: Vec<GoldenItem>,
}

#[derive(Deserialize)]
struct GoldenItem {
    text: String,
    embedding: Vec<f32>,
}

fn golden() -> Golden {
    let path = repo().join("tests/fixtures/embeddings/minilm_golden.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

fn norm(v: &[f32]) -> f32 {
    v.iter().map(|x| x * x).sum::<f32>().sqrt()
}

#[tokio::test]
async fn embeddings_match_the_reference_model() {
    let golden = golden();
    assert_eq!(golden.dimension, DIMENSION);
    assert_eq!(golden.items.len(), 32);
    let texts: Vec<String> = golden.items.iter().map(|i| i.text.clone()).collect();
    // documents as the server batches them (length order, ONNX batches of 8, returned in input order),
    // all 32 as one ONNX batch (the benchmark's like-for-like mode), and each text alone as a query:
    // all must match the reference
    let batch = embedder().embed_documents(texts.clone()).await.unwrap();
    let one_batch = embedder().embed_one_batch(texts.clone()).await.unwrap();
    let mut worst = f32::MAX;
    for ((item, vector), whole) in golden.items.iter().zip(&batch).zip(&one_batch) {
        let single = embedder().embed_query(&item.text).await.unwrap();
        assert_eq!(vector.len(), DIMENSION);
        assert!((norm(vector) - 1.0).abs() < 1e-3, "not L2-normalized: {}", norm(vector));
        let threshold = if item.text.is_empty() { 0.995 } else { 0.998 };
        for (what, v) in [("batched", vector), ("one ONNX batch", whole), ("single", &single)] {
            let cos = cosine(v, &item.embedding) / norm(&item.embedding);
            assert!(cos >= threshold, "{what} embedding of {:?}: cosine {cos} < {threshold}", item.text);
            if !item.text.is_empty() {
                worst = worst.min(cos);
            }
        }
    }
    eprintln!("worst cosine over non-empty texts: {worst:.5}");
}

/// The batch commands (`memory ingest`, `memory import`, …) load the model with threads that spin
/// during a run ([`Workload::Batch`]); the server's never spin. The thread policy must not change a
/// vector: both embed the reference texts to the reference and to each other's vectors.
#[test]
fn the_batch_thread_policy_embeds_as_the_server_does() {
    let golden = golden();
    let texts: Vec<String> = golden.items.iter().map(|i| i.text.clone()).collect();
    let paths = ModelPaths::in_cache(&cache_dir());
    let batch = OnnxEmbedder::load(&paths, Workload::Batch).unwrap().embed_documents(&texts).unwrap();
    let server = OnnxEmbedder::load(&paths, Workload::Interactive).unwrap().embed_documents(&texts).unwrap();
    for ((item, b), s) in golden.items.iter().zip(&batch).zip(&server) {
        assert!(cosine(b, s) > 0.9999, "{:?}: batch and server vectors differ (cosine {})", item.text, cosine(b, s));
        let threshold = if item.text.is_empty() { 0.995 } else { 0.998 };
        let cos = cosine(b, &item.embedding) / norm(&item.embedding);
        assert!(cos >= threshold, "batch embedding of {:?}: cosine {cos} < {threshold}", item.text);
    }
}

#[test]
fn missing_model_files_name_the_file_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let paths = ModelPaths::in_cache(dir.path());
    let err = OnnxEmbedder::load(&paths, Workload::Batch).err().expect("loading from an empty dir must fail");
    assert!(matches!(&err, EmbedError::MissingFile { file, .. } if file == "model.onnx"), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("model.onnx") && message.contains("scripts/setup") && message.contains("ASTRA_MODEL_DIR"),
        "{message}"
    );
}

#[test]
fn a_file_with_the_wrong_hash_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let paths = ModelPaths::in_cache(dir.path());
    std::fs::create_dir_all(&paths.model_dir).unwrap();
    std::fs::write(paths.model_dir.join("model.onnx"), b"not a model").unwrap();
    let err = paths.verify().unwrap_err();
    assert!(matches!(&err, EmbedError::HashMismatch { path, .. } if path.ends_with("model.onnx")), "{err:?}");
    assert!(err.to_string().contains("scripts/setup"));
}

/// The hook's token counter is the model's WordPiece without truncation: counts as Hugging Face
/// `tokenizers` gives them for the pinned `tokenizer.json` (no special tokens), also past the model's
/// 256-token window.
#[test]
fn the_token_counter_counts_wordpiece_tokens_of_the_whole_text() {
    let counter = astra_mcp::embed::TokenCounter::load(&ModelPaths::in_cache(&cache_dir())).unwrap();
    assert_eq!(counter.count("Receipt: `python -m pytest -q` exited 0 (4 passed in 0.05s)").unwrap(), 23);
    assert_eq!(counter.count("ALLOWED_ORIGINS kept the space after each comma").unwrap(), 10);
    assert_eq!(counter.count(&"word ".repeat(300)).unwrap(), 300);
    assert_eq!(counter.count("").unwrap(), 0);
}
