//! Recognising a shell command that runs a project's tests, and reading the failures out of what it
//! printed (with `memory::testrun`'s parsers, after secrets are redacted).

use std::sync::LazyLock;

use regex::Regex;

use crate::memory::redact::redact;
use crate::memory::testrun::{self, MAX_MESSAGE_CHARS};

/// Symptom lines taken from output whose failing tests have no parser (go test, jest, …).
const MAX_FALLBACK_LINES: usize = 8;
/// The query a failing run is searched with, in characters (the search tool's limit).
const MAX_QUERY_CHARS: usize = crate::tools::MAX_QUERY_CHARS;

/// Whether `command` (a shell command line) runs tests: it contains the configured test command, or
/// calls a known runner: `pytest` / `py.test` / `python -m pytest|unittest`, `cargo test|nextest`, `go
/// test`, `npm|pnpm|yarn|bun [run] test`, `jest`, `vitest`, `mvn|gradle … test` (also the `mvnw` /
/// `gradlew` wrappers).
pub fn is_test_command(command: &str, configured: Option<&str>) -> bool {
    if configured.is_some_and(|c| !c.is_empty() && command.contains(c)) {
        return true;
    }
    // quoted text is an argument (a commit message, an echo), never the runner
    let unquoted = QUOTED.replace_all(command, " ");
    unquoted.split(['\n', ';', '&', '|', '(', ')', '`']).any(|segment| {
        let words: Vec<&str> = segment.split_whitespace().map(|w| w.rsplit('/').next().unwrap_or(w)).collect();
        // the runner is the first word that is not an environment assignment, a flag, a number or a
        // launcher (`uv run pytest`, `python -m pytest`, `npx jest`, `timeout 60 go test`)
        let Some(at) = words.iter().position(|w| {
            !(w.starts_with('-') || w.parse::<f64>().is_ok() || is_assignment(w) || LAUNCHERS.contains(w))
        }) else {
            return false;
        };
        let rest = &words[at + 1..];
        let next = |i: usize| rest.get(i).copied().unwrap_or("");
        match words[at] {
            "pytest" | "py.test" | "unittest" | "jest" | "vitest" => true,
            "cargo" => {
                let sub = if next(0).starts_with('+') { next(1) } else { next(0) };
                matches!(sub, "test" | "nextest")
            }
            "go" => next(0) == "test",
            "npm" | "pnpm" | "yarn" | "bun" => {
                matches!(next(0), "test" | "t") || (next(0) == "run" && next(1).starts_with("test"))
            }
            "mvn" | "mvnw" | "gradle" | "gradlew" => rest.iter().any(|a| *a == "test" || a.ends_with(":test")),
            _ => false,
        }
    })
}

/// Words that start another program: the runner comes after them.
const LAUNCHERS: &[&str] = &[
    "sudo", "env", "time", "timeout", "nice", "exec", "npx", "pnpx", "bunx", "uv", "uvx", "poetry", "pipenv", "hatch",
    "pdm", "rye", "run", "python", "python3", "dotenv", "xvfb-run", "command",
];

static QUOTED: LazyLock<Regex> = LazyLock::new(|| Regex::new(r#"'[^']*'|"[^"]*""#).expect("valid regex"));

fn is_assignment(word: &str) -> bool {
    word.split_once('=')
        .is_some_and(|(name, _)| !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
}

static SYMPTOM_LINE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)(?:error|assert|fail|panic|exception|expected)").expect("valid regex"));

/// The failures a test run's output shows, as one search query: each failing test's name and first
/// assertion line (as `run_tests` reports them), or, when no runner's format names them, the first
/// lines that read like errors. `None` when the output shows no failure. `exited_non_zero` says the
/// client saw the command fail. Secrets are redacted before anything is read.
pub fn failure_query(output: &str, exited_non_zero: bool) -> Option<String> {
    let output = redact(output);
    let reading = testrun::read_output(&output);
    let mut lines: Vec<String> = reading
        .failing
        .iter()
        .map(|t| match &t.message {
            Some(m) => format!("{}: {m}", t.name),
            None => t.name.clone(),
        })
        .collect();
    if lines.is_empty() {
        if !(reading.failures_reported || exited_non_zero) {
            return None;
        }
        lines = reading
            .text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("Exit code") && SYMPTOM_LINE.is_match(l))
            .map(|l| l.chars().take(MAX_MESSAGE_CHARS).collect())
            .take(MAX_FALLBACK_LINES)
            .collect();
    }
    let query: String = lines.join("\n").chars().take(MAX_QUERY_CHARS).collect();
    (!query.trim().is_empty()).then_some(query)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_runners_and_the_configured_command_are_test_runs() {
        for command in [
            "pytest -q",
            "python3 -m pytest tests/test_cors.py -x",
            "cd app && /home/u/.venv/bin/pytest",
            "python -m unittest discover",
            "cargo test --release --locked",
            "cargo +nightly test",
            "cargo nextest run",
            "go test ./...",
            "npm test",
            "pnpm run test:unit",
            "yarn test --watch=false",
            "npx jest src",
            "npx vitest run",
            "mvn -q test",
            "./gradlew :app:test",
            "CI=1 npm t",
        ] {
            assert!(is_test_command(command, None), "{command}");
        }
        for command in
            ["ls -la", "cargo build", "git commit -m 'fix pytest config'", "npm install", "echo pytest", "cat go.mod"]
        {
            assert!(!is_test_command(command, None), "{command}");
        }
        assert!(is_test_command("make check-all", Some("make check-all")));
        assert!(!is_test_command("make build", Some("make check-all")));
    }

    #[test]
    fn a_failing_pytest_run_gives_its_failing_tests_and_a_passing_run_nothing() {
        let failing = "F.\n=== short test summary info ===\nFAILED tests/test_cors.py::test_second_origin - \
AssertionError: assert 'https://a.example' == 'https://b.example'\n1 failed, 1 passed in 0.05s\n";
        assert_eq!(
            failure_query(failing, true).as_deref(),
            Some(
                "tests/test_cors.py::test_second_origin: AssertionError: assert 'https://a.example' == 'https://b.example'"
            )
        );
        assert_eq!(failure_query("..\n2 passed in 0.03s\n", false), None);
        // go test has no parser: its error lines are the symptoms
        let go = "--- FAIL: TestParse (0.00s)\n    parse_test.go:12: expected 3, got 4\nFAIL\nexit status 1\n";
        let query = failure_query(go, true).unwrap();
        assert!(query.contains("--- FAIL: TestParse") && query.contains("expected 3, got 4"), "{query}");
    }

    #[test]
    fn secrets_in_the_output_are_redacted_before_they_become_the_query() {
        let out = "FAILED tests/test_api.py::test_auth - AssertionError: token sk-proj-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA \
rejected\n1 failed in 0.1s\n";
        let query = failure_query(out, true).unwrap();
        assert!(!query.contains("sk-proj-AAAA") && query.contains("[REDACTED"), "{query}");
    }
}
