//! gitleaks' default rule set, applied as gitleaks applies it.
//!
//! The rules are data: `gitleaks/gitleaks.toml` is gitleaks' `config/gitleaks.toml` (MIT,
//! `gitleaks/LICENSE`) as released (`gitleaks/VERSION`: tag and commit), replaced whole by
//! `scripts/update-redaction-rules`, never edited by hand. A rule's findings in a text are what
//! `detectRule` (gitleaks detect/detect.go, v8.30) finds in a file's content:
//! - the rule runs only when one of its `keywords` occurs in the text, ignoring case;
//! - each match of its `regex`, trimmed of newlines, gives the secret: its `secretGroup`, else its first
//!   non-empty capture group, else the whole match;
//! - a secret whose Shannon entropy (bits per byte) is at most the rule's `entropy` is not one;
//! - nor is one that the global `[allowlist]` or one of the rule's `allowlists` allows: a regex matching
//!   the secret (or the match, or its line, per `regexTarget`) or a stopword contained in the secret;
//!   `condition = "AND"` needs every check of the allowlist to pass.
//!
//! Rules and allowlist checks that look at file paths or commits never fire here: a stored text has
//! neither. Patterns are Go RE2 syntax; they are compiled with Unicode classes off, as RE2's `\w`, `\d`,
//! `\s` and `\b` are ASCII, and a `{` that opens no repetition is taken literally, as RE2 does. Each
//! pattern is compiled the first time a text holds one of its keywords (all of them take ~0.3 s).

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::{LazyLock, OnceLock};

use regex::bytes::{Regex, RegexBuilder};
use serde::Deserialize;

/// The release the rules come from: `<tag> <commit>`.
pub const VERSION: &str = include_str!("gitleaks/VERSION");

static RULES: LazyLock<RuleSet> = LazyLock::new(|| {
    RuleSet::parse(include_str!("gitleaks/gitleaks.toml")).expect("the vendored gitleaks rules parse")
});

/// `text` with each secret a gitleaks rule finds replaced by `[REDACTED:<rule id>]`; borrowed unchanged
/// when there is none. Text already redacted is left as it is.
pub fn redact(text: &str) -> Cow<'_, str> {
    RULES.redact(text)
}

/// How many rules can fire on a text (those that do not need a file path).
pub fn rule_count() -> usize {
    RULES.rules.len()
}

// Unknown keys are refused, so that a rule set whose format moved (gitleaks plans `[[allowlists]]` at
// the top) fails the tests of `scripts/update-redaction-rules` instead of losing its allowlists.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ConfigFile {
    #[allow(dead_code)]
    title: Option<String>,
    #[allow(dead_code)]
    min_version: Option<String>,
    allowlist: Option<AllowlistFile>,
    #[serde(default)]
    rules: Vec<RuleFile>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RuleFile {
    id: String,
    #[allow(dead_code)]
    description: Option<String>,
    regex: Option<String>,
    path: Option<String>,
    #[serde(default)]
    secret_group: usize,
    entropy: Option<f64>,
    #[serde(default)]
    keywords: Vec<String>,
    #[serde(default)]
    allowlists: Vec<AllowlistFile>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AllowlistFile {
    #[allow(dead_code)]
    description: Option<String>,
    condition: Option<String>,
    regex_target: Option<String>,
    #[serde(default)]
    regexes: Vec<String>,
    #[serde(default)]
    stopwords: Vec<String>,
    #[serde(default)]
    paths: Vec<String>,
    #[serde(default)]
    commits: Vec<String>,
}

struct RuleSet {
    rules: Vec<Rule>,
    global: Allowlist,
}

struct Rule {
    id: String,
    regex: Lazy,
    secret_group: usize,
    entropy: Option<f64>,
    /// Lowercase.
    keywords: Vec<String>,
    allowlists: Vec<Allowlist>,
}

#[derive(Clone, Copy, PartialEq)]
enum Target {
    Secret,
    Match,
    Line,
}

struct Allowlist {
    /// `condition = "AND"`: every check must pass; otherwise any.
    all: bool,
    target: Target,
    regexes: Vec<Lazy>,
    /// Lowercase.
    stopwords: Vec<String>,
    /// It also checks paths or commits, which a stored text never matches.
    checks_paths: bool,
}

/// A pattern compiled on first use.
struct Lazy {
    pattern: String,
    regex: OnceLock<Regex>,
}

impl Lazy {
    fn new(pattern: &str) -> Self {
        Self { pattern: go_literal_braces(pattern), regex: OnceLock::new() }
    }

    fn get(&self) -> &Regex {
        self.regex.get_or_init(|| compile(&self.pattern).expect("every vendored pattern compiles (unit test)"))
    }
}

fn compile(pattern: &str) -> Result<Regex, regex::Error> {
    RegexBuilder::new(pattern).unicode(false).size_limit(64 << 20).build()
}

impl RuleSet {
    fn parse(toml_text: &str) -> Result<Self, String> {
        let file: ConfigFile = toml::from_str(toml_text).map_err(|e| e.to_string())?;
        let rules = file
            .rules
            .into_iter()
            // a rule that needs a path never fires on a text without one
            .filter(|r| r.path.is_none())
            .filter_map(|r| {
                let regex = r.regex.as_deref()?;
                Some(Rule {
                    regex: Lazy::new(regex),
                    secret_group: r.secret_group,
                    entropy: r.entropy.filter(|e| *e > 0.0),
                    keywords: r.keywords.iter().map(|k| k.to_lowercase()).collect(),
                    allowlists: r.allowlists.into_iter().map(Allowlist::from).collect(),
                    id: r.id,
                })
            })
            .collect();
        Ok(Self { rules, global: file.allowlist.map(Allowlist::from).unwrap_or_else(Allowlist::none) })
    }

    /// Every pattern compiles, so [`Lazy::get`] cannot fail at run time, where patterns compile on
    /// first use.
    #[cfg(test)]
    fn check(&self) -> Result<(), String> {
        let lazies = self.rules.iter().flat_map(|r| {
            std::iter::once(&r.regex).chain(r.allowlists.iter().chain([&self.global]).flat_map(|a| &a.regexes))
        });
        for lazy in lazies {
            compile(&lazy.pattern).map_err(|e| format!("{}: {e}", lazy.pattern))?;
        }
        Ok(())
    }

    fn redact<'t>(&self, text: &'t str) -> Cow<'t, str> {
        let lower = text.to_lowercase();
        let mut out = Cow::Borrowed(text);
        for rule in &self.rules {
            if !rule.keywords.is_empty() && !rule.keywords.iter().any(|k| lower.contains(k.as_str())) {
                continue;
            }
            let secrets = rule.secrets(&out, &self.global);
            if !secrets.is_empty() {
                out = Cow::Owned(replace(&out, &secrets, &format!("[REDACTED:{}]", rule.id)));
            }
        }
        out
    }
}

impl Rule {
    /// Byte ranges of the secrets this rule finds in `text`, in order, not overlapping.
    fn secrets(&self, text: &str, global: &Allowlist) -> Vec<Range<usize>> {
        let bytes = text.as_bytes();
        let mut found: Vec<Range<usize>> = Vec::new();
        for caps in self.regex.get().captures_iter(bytes) {
            let whole = caps.get(0).expect("group 0 is the match").range();
            let matched = trim_newlines(bytes, whole);
            let group = if self.secret_group > 0 {
                caps.get(self.secret_group).map(|g| g.range())
            } else {
                (1..caps.len()).filter_map(|i| caps.get(i)).find(|g| !g.is_empty()).map(|g| g.range())
            };
            let secret = char_boundaries(text, group.unwrap_or_else(|| matched.clone()));
            let matched = char_boundaries(text, matched);
            let secret_text = &text[secret.clone()];
            if secret_text.is_empty() || secret_text.contains("REDACTED") {
                continue;
            }
            if self.entropy.is_some_and(|limit| shannon_entropy(secret_text) <= limit) {
                continue;
            }
            let line = line_around(text, matched.clone());
            let allowed = std::iter::once(global)
                .chain(&self.allowlists)
                .any(|a| a.allows(secret_text, &text[matched.clone()], line));
            if !allowed && found.last().is_none_or(|last| last.end <= secret.start) {
                found.push(secret);
            }
        }
        found
    }
}

impl Allowlist {
    fn none() -> Self {
        Self { all: false, target: Target::Secret, regexes: Vec::new(), stopwords: Vec::new(), checks_paths: false }
    }

    fn allows(&self, secret: &str, matched: &str, line: &str) -> bool {
        let target = match self.target {
            Target::Secret => secret,
            Target::Match => matched,
            Target::Line => line,
        };
        let regex = self.regexes.iter().any(|r| r.get().is_match(target.as_bytes()));
        let stopword = !self.stopwords.is_empty() && {
            let secret = secret.to_lowercase();
            self.stopwords.iter().any(|w| secret.contains(w.as_str()))
        };
        if self.all {
            let mut checks = Vec::new();
            if self.checks_paths {
                checks.push(false);
            }
            if !self.regexes.is_empty() {
                checks.push(regex);
            }
            if !self.stopwords.is_empty() {
                checks.push(stopword);
            }
            !checks.is_empty() && checks.iter().all(|c| *c)
        } else {
            regex || stopword
        }
    }
}

impl From<AllowlistFile> for Allowlist {
    fn from(a: AllowlistFile) -> Self {
        Self {
            all: a.condition.as_deref().is_some_and(|c| c.eq_ignore_ascii_case("and")),
            target: match a.regex_target.as_deref() {
                Some("match") => Target::Match,
                Some("line") => Target::Line,
                _ => Target::Secret,
            },
            regexes: a.regexes.iter().map(|r| Lazy::new(r)).collect(),
            stopwords: a.stopwords.iter().map(|w| w.to_lowercase()).collect(),
            checks_paths: !a.paths.is_empty() || !a.commits.is_empty(),
        }
    }
}

/// gitleaks' `shannonEntropy`: over the characters, divided by the length in bytes.
fn shannon_entropy(s: &str) -> f64 {
    if s.is_empty() {
        return 0.0;
    }
    let mut counts: HashMap<char, usize> = HashMap::new();
    for c in s.chars() {
        *counts.entry(c).or_default() += 1;
    }
    let inverse = 1.0 / s.len() as f64;
    counts.values().map(|n| *n as f64 * inverse).map(|p| -p * p.log2()).sum()
}

fn trim_newlines(bytes: &[u8], mut range: Range<usize>) -> Range<usize> {
    while range.start < range.end && bytes[range.start] == b'\n' {
        range.start += 1;
    }
    while range.end > range.start && bytes[range.end - 1] == b'\n' {
        range.end -= 1;
    }
    range
}

/// `range` widened to whole characters (an ASCII-mode pattern may end inside one).
fn char_boundaries(text: &str, mut range: Range<usize>) -> Range<usize> {
    while !text.is_char_boundary(range.start) {
        range.start -= 1;
    }
    while !text.is_char_boundary(range.end) {
        range.end += 1;
    }
    range
}

/// The lines of `text` that `range` touches.
fn line_around(text: &str, range: Range<usize>) -> &str {
    let start = text[..range.start].rfind('\n').map_or(0, |i| i + 1);
    let end = text[range.end..].find('\n').map_or(text.len(), |i| range.end + i);
    &text[start..end]
}

fn replace(text: &str, ranges: &[Range<usize>], with: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for range in ranges {
        out.push_str(&text[at..range.start]);
        out.push_str(with);
        at = range.end;
    }
    out.push_str(&text[at..]);
    out
}

/// RE2 reads a `{` that does not open a repetition (`{n}`, `{n,}`, `{n,m}`) as a literal; the regex
/// crate refuses it, so it is escaped.
fn go_literal_braces(pattern: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut chars = pattern.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' => {
                out.push(c);
                if let Some((_, next)) = chars.next() {
                    out.push(next);
                }
            }
            '{' if !opens_repetition(&pattern[i + 1..]) => out.push_str(r"\{"),
            _ => out.push(c),
        }
    }
    out
}

fn opens_repetition(after_brace: &str) -> bool {
    let Some(end) = after_brace.find('}') else { return false };
    let inner = &after_brace[..end];
    let mut parts = inner.splitn(2, ',');
    let min = parts.next().unwrap_or_default();
    let max = parts.next();
    !min.is_empty()
        && min.bytes().all(|b| b.is_ascii_digit())
        && max.is_none_or(|m| m.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_vendored_rule_parses_and_compiles() {
        let set = RuleSet::parse(include_str!("gitleaks/gitleaks.toml")).unwrap();
        set.check().unwrap();
        assert!(set.rules.len() >= 200, "{} rules", set.rules.len());
        assert!(set.rules.iter().any(|r| r.id == "generic-api-key"));
        assert!(VERSION.starts_with('v'), "{VERSION}");
    }

    #[test]
    fn go_braces_are_literal_unless_they_repeat() {
        assert_eq!(go_literal_braces(r"^\$(?:\d+|{\d+})$"), r"^\$(?:\d+|\{\d+})$");
        assert_eq!(go_literal_braces(r"a{2,}b{1,3}c{4}"), r"a{2,}b{1,3}c{4}");
        assert_eq!(go_literal_braces(r"\{\{x}}"), r"\{\{x}}");
        assert_eq!(go_literal_braces(r"{{[^}]+}}"), r"\{\{[^}]+}}");
    }

    #[test]
    fn entropy_is_gitleaks_bits_per_byte() {
        assert_eq!(shannon_entropy("aaaa"), 0.0);
        assert!((shannon_entropy("abcd") - 2.0).abs() < 1e-12);
        assert!((shannon_entropy("aabb") - 1.0).abs() < 1e-12);
    }

    #[test]
    fn a_rule_finds_its_secret_group_and_honours_entropy_and_allowlists() {
        let set = RuleSet::parse(
            r#"
            [allowlist]
            stopwords = ["example"]
            [[rules]]
            id = "demo-token"
            regex = '''(?i)demo[_-]?token\s*=\s*([a-z0-9]{12,})'''
            entropy = 3.0
            keywords = ["demo"]
            [[rules.allowlists]]
            regexTarget = "line"
            regexes = ['''# not a secret''']
            [[rules]]
            id = "needs-a-path"
            path = '''\.env$'''
            regex = '''x'''
            "#,
        )
        .unwrap();
        assert_eq!(set.rules.len(), 1, "the path rule never fires on text");
        assert_eq!(set.redact("DEMO_TOKEN = q8w7e6r5t4y3u2"), "DEMO_TOKEN = [REDACTED:demo-token]");
        for kept in [
            "demo_token = aaaaaaaaaaaaaaaa",              // entropy 0
            "demo_token = q8w7e6r5example1",              // global stopword
            "demo_token = q8w7e6r5t4y3u2 # not a secret", // rule allowlist on the line
            "token = q8w7e6r5t4y3u2",                     // no keyword
        ] {
            assert!(matches!(set.redact(kept), Cow::Borrowed(_)), "{kept} -> {}", set.redact(kept));
        }
    }
}
