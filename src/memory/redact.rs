//! Secret redaction, applied to every text before it is stored or embedded (design.md §4): API keys,
//! bearer tokens, private-key blocks, and passwords inside URLs become `[REDACTED:<kind>]`.

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::Regex;

/// (kind, pattern, replacement) — the replacement keeps any non-secret prefix captured as `$p`.
static RULES: LazyLock<Vec<(&'static str, Regex, &'static str)>> = LazyLock::new(|| {
    let rule = |kind, pattern: &str, replacement| (kind, Regex::new(pattern).expect("valid redaction regex"), replacement);
    vec![
        rule(
            "private-key",
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)",
            "[REDACTED:private-key]",
        ),
        // scheme://user:password@host -> keep user and host
        rule("url-password", r"(?P<p>[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]+:)[^\s@/]+@", "$p[REDACTED:password]@"),
        rule("bearer-token", r"(?P<p>(?i:bearer)\s+)[A-Za-z0-9\-._~+/]{12,}=*", "$p[REDACTED:token]"),
        rule("openai-key", r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{20,}", "[REDACTED:api-key]"),
        rule("github-token", r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})", "[REDACTED:token]"),
        rule("aws-access-key", r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b", "[REDACTED:aws-key]"),
        rule("slack-token", r"\bxox[abprs]-[A-Za-z0-9-]{10,}", "[REDACTED:token]"),
        rule("google-api-key", r"\bAIza[0-9A-Za-z_\-]{35}\b", "[REDACTED:api-key]"),
        // key = value assignments whose name says secret
        rule(
            "assigned-secret",
            r#"(?P<p>(?i:\b[A-Za-z0-9_]*(?:api[_-]?key|secret|password|passwd|token)\b)\s*[:=]\s*["']?)[^\s"',;]{8,}"#,
            "$p[REDACTED:secret]",
        ),
    ]
});

/// `text` with every recognised secret replaced; borrowed unchanged when there is none.
pub fn redact(text: &str) -> Cow<'_, str> {
    let mut out = Cow::Borrowed(text);
    for (_, regex, replacement) in RULES.iter() {
        if regex.is_match(&out) {
            out = Cow::Owned(regex.replace_all(&out, *replacement).into_owned());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn redacts_common_secret_shapes() {
        let cases = [
            ("key sk-proj-abcdefghijklmnopqrstuvwxyz012345 here", "key [REDACTED:api-key] here"),
            ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.abc.def", "Authorization: Bearer [REDACTED:token]"),
            ("postgres://app:hunter2secret@db.internal:5432/x", "postgres://app:[REDACTED:password]@db.internal:5432/x"),
            ("token ghp_0123456789abcdefghijklmnopqrstuvwxyzAB", "token [REDACTED:token]"),
            ("AKIAABCDEFGHIJKLMNOP is the key id", "[REDACTED:aws-key] is the key id"),
            ("DB_PASSWORD=correcthorsebattery", "DB_PASSWORD=[REDACTED:secret]"),
            (
                "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----\nafter",
                "[REDACTED:private-key]\nafter",
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(redact(input), expected, "input: {input}");
        }
    }

    #[test]
    fn leaves_ordinary_text_alone() {
        let text = "AssertionError: assert [' b.example'] == ['b.example'] in https://app.example.com/path";
        assert!(matches!(redact(text), std::borrow::Cow::Borrowed(_)));
    }
}
