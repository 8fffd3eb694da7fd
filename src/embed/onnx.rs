//! The fastembed/ONNX Runtime implementation of [`Embedder`]: all-MiniLM-L6-v2 (int8) from local files,
//! ONNX Runtime loaded dynamically from a pinned library (docs/development.md). The only module that imports
//! fastembed or ort.

use std::sync::Mutex;

use fastembed::{InitOptionsUserDefined, Pooling, TextEmbedding, TokenizerFiles, UserDefinedEmbeddingModel};

use super::{DIMENSION, EmbedError, Embedder, MAX_TOKENS, ModelPaths, Workload};

/// Texts per ONNX Runtime batch in [`Embedder::embed_documents`], which runs a call's texts in length
/// order. On 2 cores (docs/internals/embedding.md, "Embedding") length-sorted batches of 8 embed 1.4 × as many texts
/// per second as batches of 64 (38 against 27 texts/s): a batch pads to its longest text, and the
/// attention of a larger batch fits the caches worse. Batches of 2–8 were within the spread of each other.
pub const ONNX_BATCH: usize = 8;

/// all-MiniLM-L6-v2 through fastembed. `TextEmbedding::embed` needs `&mut`, so calls are serialised.
pub struct OnnxEmbedder {
    model: Mutex<TextEmbedding>,
}

impl OnnxEmbedder {
    /// Verifies the pinned files, loads ONNX Runtime from `paths.ort_dylib` and the model from
    /// `paths.model_dir`, with ONNX Runtime's threads set for `workload`. Takes about a second; run it
    /// off the async runtime.
    ///
    /// # Errors
    /// [`EmbedError::MissingFile`] / [`EmbedError::HashMismatch`] for files, [`EmbedError::Load`] when ONNX
    /// Runtime or the model does not initialise.
    pub fn load(paths: &ModelPaths, workload: Workload) -> Result<Self, EmbedError> {
        paths.verify()?;
        let read = |name: &str| {
            std::fs::read(paths.model_dir.join(name)).map_err(|e| EmbedError::Load(format!("reading {name}: {e}")))
        };
        let environment = environment(paths)?;
        let model = UserDefinedEmbeddingModel::new(
            read("model.onnx")?,
            TokenizerFiles {
                tokenizer_file: read("tokenizer.json")?,
                config_file: read("config.json")?,
                special_tokens_map_file: read("special_tokens_map.json")?,
                tokenizer_config_file: read("tokenizer_config.json")?,
            },
        )
        .with_pooling(Pooling::Mean);
        let options = InitOptionsUserDefined::new().with_environment(environment).with_max_length(MAX_TOKENS);
        let options = match workload {
            // parked between parallel sections and after the run: the cores stay free for the store's
            // queries that run beside a query's embedding
            Workload::Interactive => options
                .with_session_config("session.intra_op.allow_spinning", "0")
                .with_session_config("session.inter_op.allow_spinning", "0"),
            Workload::OneShot => options
                .with_session_config("session.intra_op.allow_spinning", "0")
                .with_session_config("session.inter_op.allow_spinning", "0")
                .with_session_config("optimization.disable_specified_optimizers", "ConstantFolding"),
            // spinning between the parallel sections of a run, parked as soon as it returns
            Workload::Batch => options.with_session_config("session.force_spinning_stop", "1"),
        };
        let model = TextEmbedding::try_new_from_user_defined(model, options)
            .map_err(|e| EmbedError::Load(format!("model.onnx: {e}")))?;
        Ok(Self { model: Mutex::new(model) })
    }
}

/// The process's ONNX Runtime environment (ONNX Runtime allows one per process): built by the first
/// successful load from its `ort_dylib`, shared by every later one (whose `ort_dylib` is then not read).
fn environment(paths: &ModelPaths) -> Result<ort::environment::Environment, EmbedError> {
    static ENVIRONMENT: Mutex<Option<ort::environment::Environment>> = Mutex::new(None);
    let mut slot = ENVIRONMENT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(environment) = slot.as_ref() {
        return Ok(environment.clone());
    }
    let environment = ort::init_from(&paths.ort_dylib)
        .map_err(|e| {
            EmbedError::Load(format!(
                "ONNX Runtime at {} did not load ({e}); run `scripts/setup` or set ORT_DYLIB_PATH",
                paths.ort_dylib.display()
            ))
        })?
        .with_name("astra-mcp")
        .build()
        .map_err(|e| EmbedError::Load(format!("ONNX Runtime environment: {e}")))?;
    *slot = Some(environment.clone());
    Ok(environment)
}

impl OnnxEmbedder {
    /// `texts` in ONNX batches of `batch`, in the given order; checks the shape of the output.
    fn run(&self, texts: &[&str], batch: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut model = self.model.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let vectors = model.embed(texts, Some(batch.max(1))).map_err(|e| EmbedError::Inference(e.to_string()))?;
        if vectors.len() != texts.len() || vectors.iter().any(|v| v.len() != DIMENSION) {
            return Err(EmbedError::Inference(format!(
                "expected {} vectors of {DIMENSION} floats, got {}",
                texts.len(),
                vectors.len()
            )));
        }
        Ok(vectors)
    }
}

impl Embedder for OnnxEmbedder {
    fn embed_documents(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        // in length order (bytes: a proxy for word pieces), so each ONNX batch pads little
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| texts[i].len());
        let sorted: Vec<&str> = order.iter().map(|&i| texts[i].as_str()).collect();
        let mut vectors = vec![Vec::new(); texts.len()];
        for (vector, i) in self.run(&sorted, ONNX_BATCH)?.into_iter().zip(order) {
            vectors[i] = vector;
        }
        Ok(vectors)
    }

    fn embed_one_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        self.run(&texts, texts.len())
    }
}
