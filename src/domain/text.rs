//! Text shown to a person: what stored text may not do to the terminal that prints it.

/// Whether `c` reorders text as shown (Unicode bidirectional embeddings, overrides, isolates and marks,
/// UAX #9 §2: the explicit formatting characters and the implicit marks LRM, RLM, ALM): stored text must
/// not be able to make a terminal show something else than it holds.
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

/// `text` with control characters and bidirectional controls written as escapes (`\u{1b}`), so it can
/// be printed to a terminal as one line that shows what it holds.
pub fn escape_controls(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() || is_bidi_control(c) { c.escape_unicode().to_string() } else { c.to_string() })
        .collect()
}

/// `text` as it may be stored: control characters other than newline and tab, and bidirectional
/// controls, written as escapes (`\u{1b}`), so that no stored text can drive the terminal that prints it
/// or make a reader see other words than the model reads; `\r\n` becomes `\n`. Borrowed when unchanged.
pub fn neutralise_controls(text: &str) -> std::borrow::Cow<'_, str> {
    let flagged = |c: char| (c.is_control() && c != '\n' && c != '\t') || is_bidi_control(c);
    if !text.chars().any(flagged) {
        return std::borrow::Cow::Borrowed(text);
    }
    let text = text.replace("\r\n", "\n");
    std::borrow::Cow::Owned(
        text.chars().map(|c| if flagged(c) { c.escape_unicode().to_string() } else { c.to_string() }).collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neutralising_escapes_terminal_and_bidi_controls_but_keeps_lines_and_tabs() {
        let text = "ok\tline\r\nred \u{1b}[31mtext\u{7} admin\u{202E}nimda\u{2066}x\n";
        assert_eq!(neutralise_controls(text), "ok\tline\nred \\u{1b}[31mtext\\u{7} admin\\u{202e}nimda\\u{2066}x\n");
        assert!(matches!(neutralise_controls("plain\ttext\nhere"), std::borrow::Cow::Borrowed(_)));
    }
}
