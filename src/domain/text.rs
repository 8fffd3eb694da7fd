//! Text shown to a person: what stored text may not do to the terminal that prints it.

/// Whether `c` reorders text as shown (Unicode bidirectional embeddings, overrides, isolates and marks,
/// UAX #9): stored text must not be able to make a terminal show something else than it holds.
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}')
}

/// `text` with control characters and bidirectional controls written as escapes (`\u{1b}`), so it can
/// be printed to a terminal as one line that shows what it holds.
pub fn escape_controls(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() || is_bidi_control(c) { c.escape_unicode().to_string() } else { c.to_string() })
        .collect()
}
