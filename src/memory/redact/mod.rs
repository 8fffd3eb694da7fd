//! Secret redaction, applied to every text before it is stored or embedded (docs/storage.md): API keys,
//! tokens, private-key blocks and passwords become `[REDACTED:<kind>]`.
//!
//! Two rule sets run in turn. First our own, below: shapes that keep their context (`DB_PASSWORD=…`,
//! `scheme://user:…@host`, `--password …`, `Authorization: …`) and token shapes the second set lacks
//! (Discord webhooks, Azure SAS signatures). Then gitleaks' default rules ([`gitleaks`]), a maintained
//! set of ~220 provider token shapes, vendored as data with its version; its findings are marked with
//! the rule's id (`[REDACTED:gitlab-cicd-job-token]`).

pub mod gitleaks;

use std::borrow::Cow;
use std::sync::LazyLock;

use regex::Regex;

/// (kind, pattern, replacement) — the replacement keeps any non-secret prefix captured as `$p`.
/// Order matters: whole blocks and URLs first, then token shapes, then `name = value` assignments.
static RULES: LazyLock<Vec<(&'static str, Regex, &'static str)>> = LazyLock::new(|| {
    let rule =
        |kind, pattern: &str, replacement| (kind, Regex::new(pattern).expect("valid redaction regex"), replacement);
    // a name that says "secret", with optional prefix/suffix: DB_PASSWORD, SECRET_KEY, api-key, authToken
    // (a suffix must start with `_` or `-`, so `tokenizer` or `secretary` is not a secret name)
    const SECRET_NAME: &str = r"[A-Za-z0-9_.-]*(?:api[_-]?key|secret|password|passwd|pwd|token|credentials?|private[_-]?key|account[_-]?key|access[_-]?key|signature)(?:[_-][A-Za-z0-9_-]*)?";
    vec![
        rule(
            "private-key",
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)",
            "[REDACTED:private-key]",
        ),
        // scheme://user:password@host -> keep user and host (the password may contain '/')
        // (the user may be empty, `redis://:pw@host`; the password may contain `/` or `@`)
        rule("url-password", r"(?P<p>[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]*:)\S+@", "$p[REDACTED:password]@"),
        rule(
            "authorization-header",
            r"(?P<p>(?i:authorization|proxy-authorization)\s*[:=]\s*(?:(?i:basic|bearer|token|digest)\s+)?)[^\s,;]{8,}",
            "$p[REDACTED:credentials]",
        ),
        rule("bearer-token", r"(?P<p>(?i:bearer)\s+)[A-Za-z0-9\-._~+/]{12,}=*", "$p[REDACTED:token]"),
        rule("jwt", r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}", "[REDACTED:jwt]"),
        rule("openai-key", r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{20,}", "[REDACTED:api-key]"),
        rule("stripe-key", r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{10,}", "[REDACTED:api-key]"),
        rule("github-token", r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})", "[REDACTED:token]"),
        rule("npm-token", r"\bnpm_[A-Za-z0-9]{30,}", "[REDACTED:token]"),
        rule("huggingface-token", r"\bhf_[A-Za-z0-9]{30,}", "[REDACTED:token]"),
        rule("aws-access-key", r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b", "[REDACTED:aws-key]"),
        rule("slack-token", r"\bxox[abprs]-[A-Za-z0-9-]{10,}", "[REDACTED:token]"),
        rule("google-api-key", r"\bAIza[0-9A-Za-z_\-]{35}\b", "[REDACTED:api-key]"),
        rule("gitlab-token", r"\bglpat-[A-Za-z0-9_\-]{20,}", "[REDACTED:token]"),
        rule("sendgrid-key", r"\bSG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}", "[REDACTED:api-key]"),
        rule("twilio-key", r"\b(?:SK|AC)[0-9a-f]{32}\b", "[REDACTED:api-key]"),
        rule("pypi-token", r"\bpypi-AgE[A-Za-z0-9_\-]{30,}", "[REDACTED:token]"),
        rule("digitalocean-token", r"\bdo[opr]_v1_[a-f0-9]{64}\b", "[REDACTED:token]"),
        rule(
            "discord-webhook",
            r"https://(?:(?:ptb|canary)\.)?discord(?:app)?\.com/api/webhooks/[0-9]{5,20}/[A-Za-z0-9_\-]{40,}",
            "[REDACTED:webhook]",
        ),
        // an Azure shared access signature's `sig=` (a SAS URL or connection string)
        rule("azure-sas-signature", r"(?P<p>[?&;]sig=)[A-Za-z0-9%+/=]{20,}", "$p[REDACTED:signature]"),
        rule(
            "slack-webhook",
            r"https://hooks\.slack\.com/(?:services|workflows)/[A-Za-z0-9_/\-]{20,}",
            "[REDACTED:webhook]",
        ),
        // --password VALUE / --token=VALUE on a command line
        rule(
            "secret-flag",
            r#"(?P<p>(?i:--?(?:password|passwd|token|secret|api[_-]?key))[= ]+)(?:"[^"\n]{4,}"|'[^'\n]{4,}'|[^\s"'-][^\s]{5,})"#,
            "$p[REDACTED:secret]",
        ),
        // setenv("API_KEY", "value") and similar calls
        rule(
            "secret-call-argument",
            &format!(r#"(?P<p>\(\s*["'](?i:{SECRET_NAME})["']\s*,\s*)(?:"[^"\n]{{4,}}"|'[^'\n]{{4,}}')"#),
            "$p[REDACTED:secret]",
        ),
        // NAME = value, NAME: "value", "name": "value" (JSON), env["NAME"] = "value", where NAME says secret
        rule(
            "assigned-secret",
            &format!(
                r#"(?P<p>(?i:\b{SECRET_NAME})["']?\]?\s*[:=]\s*)(?:"[^"\n]{{4,}}"|'[^'\n]{{4,}}'|[^\s"',;]{{6,}})"#
            ),
            "$p[REDACTED:secret]",
        ),
    ]
});

pub use crate::domain::text::{escape_controls, is_bidi_control, neutralise_controls};

/// What every stored passage, fix and core block goes through: control characters and bidirectional
/// controls neutralised ([`neutralise_controls`]), then secrets redacted ([`redact`]).
pub fn for_storage(text: &str) -> String {
    redact(&neutralise_controls(text)).into_owned()
}

/// Passes of both rule sets at most: a pass can expose what a rule's word boundary hid in the one
/// before (a token right after a replaced one), so passes repeat until one changes nothing.
const MAX_PASSES: usize = 8;

/// `text` with every recognised secret replaced; borrowed unchanged when there is none. Redacting the
/// result again changes nothing.
pub fn redact(text: &str) -> Cow<'_, str> {
    let mut out = Cow::Borrowed(text);
    for pass in 1..=MAX_PASSES {
        let changed = match redact_once(&out) {
            Cow::Owned(next) if next != *out => Some(next),
            _ => None,
        };
        match changed {
            Some(next) => out = Cow::Owned(next),
            None => break,
        }
        if pass == MAX_PASSES {
            tracing::warn!(chars = out.chars().count(), "redaction still changed the text after {MAX_PASSES} passes");
        }
    }
    out
}

/// One pass of our rules, then gitleaks'.
fn redact_once(text: &str) -> Cow<'_, str> {
    let mut out = Cow::Borrowed(text);
    for (_, regex, replacement) in RULES.iter() {
        if regex.is_match(&out) {
            // a value already redacted (by an earlier rule, or an earlier pass) stays as it is, so that
            // redacting twice changes nothing
            let replaced = regex.replace_all(&out, |caps: &regex::Captures<'_>| {
                let whole = caps.get(0).expect("group 0 is the match");
                let kept = caps.name("p").map_or(0, |p| p.end() - whole.start());
                // a match that starts inside a marker (`[REDACTED:github-token]: …` read as a name) is
                // no secret either
                let before = &out[..whole.start()];
                let inside_marker = before.rfind("[REDACTED:").is_some_and(|open| !before[open..].contains(']'));
                if inside_marker || whole.as_str()[kept..].starts_with("[REDACTED:") {
                    whole.as_str().to_string()
                } else {
                    let mut with = String::new();
                    caps.expand(replacement, &mut with);
                    with
                }
            });
            out = Cow::Owned(replaced.into_owned());
        }
    }
    let more = match gitleaks::redact(&out) {
        Cow::Owned(more) => Some(more),
        Cow::Borrowed(_) => None,
    };
    more.map_or(out, Cow::Owned)
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn redacts_common_secret_shapes() {
        let cases = [
            ("key sk-proj-abcdefghijklmnopqrstuvwxyz012345 here", "key [REDACTED:api-key] here"),
            ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.abc.def", "Authorization: Bearer [REDACTED:credentials]"),
            ("curl -H 'X: 1' then Bearer abcdefghijklmnop1234", "curl -H 'X: 1' then Bearer [REDACTED:token]"),
            (
                "postgres://app:hunter2secret@db.internal:5432/x",
                "postgres://app:[REDACTED:password]@db.internal:5432/x",
            ),
            ("token ghp_0123456789abcdefghijklmnopqrstuvwxyzAB", "token [REDACTED:token]"),
            ("AKIAABCDEFGHIJKLMNOP is the key id", "[REDACTED:aws-key] is the key id"),
            ("DB_PASSWORD=correcthorsebattery", "DB_PASSWORD=[REDACTED:secret]"),
            ("SECRET_KEY=django-insecure-abc123xyz", "SECRET_KEY=[REDACTED:secret]"),
            (
                "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                "AWS_SECRET_ACCESS_KEY=[REDACTED:secret]",
            ),
            (r#"{"password": "hunter2hunter2"}"#, r#"{"password": [REDACTED:secret]}"#),
            (r#"password = "correct horse battery staple""#, "password = [REDACTED:secret]"),
            ("mysql --password hunter2hunter2 -u app", "mysql --password [REDACTED:secret] -u app"),
            ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "Authorization: Basic [REDACTED:credentials]"),
            ("key sk_live_4eC39HqLyjWDarjtT1zdp7dc", "key [REDACTED:api-key]"),
            (
                "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
                "jwt [REDACTED:jwt]",
            ),
            ("npm_abcdefghijklmnopqrstuvwxyz0123456789", "[REDACTED:token]"),
            ("hf_abcdefghijklmnopqrstuvwxyz0123456789", "[REDACTED:token]"),
            ("postgres://app:pa/ss0rd@db/x", "postgres://app:[REDACTED:password]@db/x"),
            ("redis://:redisleak1234@localhost:6379", "redis://:[REDACTED:password]@localhost:6379"),
            ("https://user:p@ssleak@host/x", "https://user:[REDACTED:password]@host/x"),
            ("mysql --password 'correct horse leaky' -u x", "mysql --password [REDACTED:secret] -u x"),
            (r#"os.environ["DB_PASSWORD"] = "environleak99""#, r#"os.environ["DB_PASSWORD"] = [REDACTED:secret]"#),
            (r#"monkeypatch.setenv("API_KEY", "setenvleak99")"#, r#"monkeypatch.setenv("API_KEY", [REDACTED:secret])"#),
            (
                "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----\nafter",
                "[REDACTED:private-key]\nafter",
            ),
            ("token glpat-xXxXxXxXxXxXxXxXxXxX1234 ok", "token [REDACTED:token] ok"),
            (
                "mail SG.abcdefghijklmnopqrstuv.ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdefg ok",
                "mail [REDACTED:api-key] ok",
            ),
            ("twilio SK0123456789abcdef0123456789abcdef ok", "twilio [REDACTED:api-key] ok"),
            ("upload pypi-AgEIcHlwaS5vcmcCJGFiY2RlZmdoLWlqa2wtbW5vcC1xcnN0 ok", "upload [REDACTED:token] ok"),
            ("do dop_v1_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef ok", "do [REDACTED:token] ok"),
            (
                "post to https://hooks.slack.com/services/T0000/B0000/XXXXXXXXXXXXXXXXXXXXXXXX now",
                "post to [REDACTED:webhook] now",
            ),
            (
                "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MA==;EndpointSuffix=core",
                "DefaultEndpointsProtocol=https;AccountName=acme;AccountKey=[REDACTED:secret];EndpointSuffix=core",
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(redact(input), expected, "input: {input}");
        }
    }

    #[test]
    fn redacts_token_shapes_people_paste_that_the_own_rules_lacked() {
        let cases = [
            // from gitleaks' rules
            ("ci job glcbt-64_abcdefghijABCDEFGHIJ leaked", "ci job [REDACTED:gitlab-cicd-job-token] leaked"),
            (
                r#"telegram_bot = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw8""#,
                r#"telegram_bot = "[REDACTED:telegram-bot-api-token]""#,
            ),
            (r#"client_auth = "a9f3c2e1b7d4e5f6""#, r#"client_auth = "[REDACTED:generic-api-key]""#),
            // our own, which gitleaks lacks
            (
                "post https://discord.com/api/webhooks/123456789012345678/abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123 now",
                "post [REDACTED:webhook] now",
            ),
            (
                "https://acct.blob.core.windows.net/c/b.txt?sv=2022-11-02&sp=r&sig=AbCdEfGhIjKlMnOpQrStUvWxYz0123456789%2B%2F%3D",
                "https://acct.blob.core.windows.net/c/b.txt?sv=2022-11-02&sp=r&sig=[REDACTED:signature]",
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(redact(input), expected, "input: {input}");
        }
    }

    #[test]
    fn leaves_ordinary_text_alone() {
        for text in [
            "AssertionError: assert [' b.example'] == ['b.example'] in https://app.example.com/path",
            "tokenizer=bert-base-uncased and secretary=alice",
            "KeyError: 'cache_ttl_seconds' in config loader",
            "FAILED tests/test_auth.py::test_token_refresh - AssertionError: expected 200, got 401",
            "commit 4f0fbb8c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a fixed the retry",
        ] {
            assert!(matches!(redact(text), std::borrow::Cow::Borrowed(_)), "{text} -> {}", redact(text));
        }
    }
}
