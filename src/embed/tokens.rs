//! Token counts by the embedding model's own tokenizer, without loading the model: what a hook needs
//! to keep what it injects within a budget of tokens, in a process that may never embed anything.

use super::{EmbedError, ModelPaths};

/// all-MiniLM-L6-v2's WordPiece tokenizer (BERT uncased vocabulary, `tokenizer.json` of the pinned
/// model) with neither truncation nor padding, so a count covers the whole text. Loading it reads and
/// hash-checks that one file (about 0.5 MB), none of ONNX Runtime.
pub struct TokenCounter {
    tokenizer: tokenizers::Tokenizer,
}

impl TokenCounter {
    /// # Errors
    /// `tokenizer.json` missing or not the pinned file ([`ModelPaths::read_pinned`]), or not a tokenizer.
    pub fn load(paths: &ModelPaths) -> Result<Self, EmbedError> {
        let bytes = paths.read_pinned("tokenizer.json")?;
        let mut tokenizer =
            tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| EmbedError::Load(format!("tokenizer.json: {e}")))?;
        tokenizer.with_truncation(None).map_err(|e| EmbedError::Load(format!("tokenizer.json: {e}")))?;
        tokenizer.with_padding(None);
        Ok(Self { tokenizer })
    }

    /// Tokens in `text`, special tokens (`[CLS]`, `[SEP]`) not counted.
    ///
    /// # Errors
    /// The tokenizer failed on the text ([`EmbedError::Inference`]).
    pub fn count(&self, text: &str) -> Result<usize, EmbedError> {
        self.tokenizer
            .encode_fast(text, false)
            .map(|encoding| encoding.len())
            .map_err(|e| EmbedError::Inference(format!("tokenizing: {e}")))
    }
}
