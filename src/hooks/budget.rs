//! The token budget of what one hook adds to an agent's context: items are taken in priority order
//! while they fit, the rest are left out, and the cut is marked with a line saying how many.
//!
//! Tokens are counted with the embedding model's tokenizer ([`crate::embed::TokenCounter`]:
//! all-MiniLM-L6-v2's WordPiece, BERT uncased vocabulary), a real tokenizer run over the exact text. It
//! is an estimate of what the agent's model counts: WordPiece splits every punctuation character and
//! every CJK character into a token of its own, which makes code, paths and receipts count high, while
//! plain English words can take fewer pieces than in a model's byte-level BPE.

use crate::embed::EmbedError;

/// One unit of injected text: a section header, or one memory.
#[derive(Debug, Clone)]
pub struct Piece {
    pub text: String,
    /// A memory (counted in the cut marker), not a header.
    pub memory: bool,
}

impl Piece {
    pub fn header(text: impl Into<String>) -> Self {
        Self { text: text.into(), memory: false }
    }
    pub fn memory(text: impl Into<String>) -> Self {
        Self { text: text.into(), memory: true }
    }
}

/// What fit: the text, its tokens, and how many memories were left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packed {
    pub text: String,
    pub tokens: usize,
    pub memories: usize,
    pub left_out: usize,
}

/// The line that marks a cut.
pub fn cut_marker(left_out: usize, budget: usize) -> String {
    format!(
        "[astra-mcp: {left_out} more {} left out to stay within the {budget}-token budget; search memory for the rest]",
        if left_out == 1 { "memory" } else { "memories" }
    )
}

/// Packs `pieces` (in priority order, joined by blank lines) into at most `budget` tokens. A header
/// goes in only together with the memory that follows it; the first memory that does not fit ends the
/// packing, and the memories from there on are counted in the cut marker, whose tokens were reserved.
/// `None` when no memory fits and nothing would be said but the cut, or there is no memory at all.
///
/// `count` gives the tokens of a text ([`crate::embed::TokenCounter::count`]).
///
/// # Errors
/// `count` failed.
pub fn pack(
    count: impl Fn(&str) -> Result<usize, EmbedError>,
    intro: &str,
    pieces: Vec<Piece>,
    budget: usize,
) -> Result<Option<Packed>, EmbedError> {
    let total = pieces.iter().filter(|p| p.memory).count();
    if total == 0 {
        return Ok(None);
    }
    let mut texts: Vec<String> = pieces.iter().map(|p| p.text.clone()).collect();
    texts.push(intro.to_string());
    // the longest marker this packing can write: its count is reserved whatever is cut
    texts.push(cut_marker(total, budget));
    let counts = texts.iter().map(|t| count(t)).collect::<Result<Vec<_>, _>>()?;
    let (intro_tokens, marker_tokens) = (counts[pieces.len()], counts[pieces.len() + 1]);
    // blank lines between pieces are whitespace: no WordPiece token
    let room = budget.saturating_sub(marker_tokens);
    let mut used = intro_tokens;
    let mut taken = 0;
    let mut pending_header = 0;
    for (i, piece) in pieces.iter().enumerate() {
        if !piece.memory {
            pending_header += counts[i];
            continue;
        }
        if used + pending_header + counts[i] > room {
            break;
        }
        used += pending_header + counts[i];
        pending_header = 0;
        taken = i + 1;
    }
    let mut kept: Vec<&Piece> = pieces[..taken].iter().collect();
    loop {
        let memories = kept.iter().filter(|p| p.memory).count();
        if memories == 0 {
            return Ok(None);
        }
        let left_out = total - memories;
        let marker = cut_marker(left_out, budget);
        let mut parts: Vec<&str> = vec![intro];
        parts.extend(kept.iter().map(|p| p.text.as_str()));
        if left_out > 0 {
            parts.push(&marker);
        }
        let text = parts.join("\n\n");
        // the whole text counted once more: what is printed is what was counted
        let tokens = count(&text)?;
        if tokens <= budget {
            return Ok(Some(Packed { text, tokens, memories, left_out }));
        }
        // never reached when counts add up over whitespace; kept as the guarantee
        while kept.pop().is_some_and(|p| !p.memory) {}
        while kept.last().is_some_and(|p| !p.memory) {
            kept.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One token per byte.
    fn bytes(text: &str) -> Result<usize, EmbedError> {
        Ok(text.len())
    }

    fn pieces() -> Vec<Piece> {
        vec![
            Piece::memory("a".repeat(100)),
            Piece::header("Section:"),
            Piece::memory("b".repeat(100)),
            Piece::memory("c".repeat(100)),
        ]
    }

    #[test]
    fn what_fits_is_kept_in_order_and_the_cut_is_marked_within_the_budget() {
        let all = pack(bytes, "intro", pieces(), 1_000).unwrap().unwrap();
        assert_eq!((all.memories, all.left_out), (3, 0));
        assert!(all.text.starts_with("intro\n\naaa") && all.text.contains("Section:\n\nbbb"), "{}", all.text);
        assert!(!all.text.contains("left out"));
        for budget in [240, 300, 360] {
            let cut = pack(bytes, "intro", pieces(), budget).unwrap().unwrap();
            assert!(cut.tokens <= budget && cut.text.len() <= budget, "{budget}: {}", cut.text.len());
            assert!(cut.text.ends_with(&cut_marker(cut.left_out, budget)), "{}", cut.text);
            assert_eq!(cut.memories + cut.left_out, 3);
        }
        // the header never goes in without the memory under it
        let one = pack(bytes, "intro", pieces(), 240).unwrap().unwrap();
        assert_eq!(one.memories, 1);
        assert!(!one.text.contains("Section:"), "{}", one.text);
        // nothing fits but the cut: nothing is said
        assert_eq!(pack(bytes, "intro", pieces(), 120).unwrap(), None);
        assert_eq!(pack(bytes, "intro", vec![Piece::header("h")], 1_000).unwrap(), None);
    }
}
