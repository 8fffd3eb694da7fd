//! Revalidation of a fix against the code (docs/tools.md, "Is the fix still in the code?"): at store
//! time, the lines the fix added and removed in each of its files ([`capture`]); at read time, whether
//! they are still there ([`classify`]): *in place*, *changed around*, *reverted* or *unknown*.
//!
//! A fix's lines are its files' lines that the version before the fix did not have (added) and the
//! lines of that version that the fix dropped (removed), compared as sets of lines without their
//! whitespace, so a fix moved within its file, re-indented or re-spaced by a formatter is still found,
//! and a line that only holds punctuation or a short word (`}`, `end`, `else:`) does not count. The
//! version before the fix is git's: the file at the commit the session's first failing `run_tests` ran
//! on (so a fix committed before it is stored, even under later commits, is still told from what came
//! before), else at `HEAD`. A file that is the same there and now records nothing; outside git nothing is
//! recorded, and a read falls back on the files' hashes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::domain::FileChange;

/// Lines recorded per file and direction (added, removed), at most: the first ones in file order.
pub const MAX_LINES_PER_FILE: usize = 40;

/// Characters of a recorded line, at most (a longer line is compared by its first ones).
pub const MAX_LINE_CHARS: usize = 200;

/// A line counts when its trimmed text holds at least this many letters or digits.
const MIN_LINE_ALNUM: usize = 3;

/// Whether a stored fix is still in the code of its project (serialized `in_place`, `changed_around`,
/// `reverted`, `unknown`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CodeState {
    /// The lines the fix added are all there, none it removed came back, and its files are as they
    /// were when it was stored.
    InPlace,
    /// Its files changed since, and its lines are still there (or most of them).
    ChangedAround,
    /// Most of the lines it added are gone (or the lines it removed are back): it may have been undone,
    /// and a failure it fixed may return.
    Reverted,
    /// Not known here: a fix of another project or checkout, without a receipt, or whose files are gone.
    Unknown,
}

impl CodeState {
    /// The state as the text results write it: `in place`, `changed around`, `reverted`, `unknown`.
    pub fn words(self) -> &'static str {
        match self {
            CodeState::InPlace => "in place",
            CodeState::ChangedAround => "changed around",
            CodeState::Reverted => "reverted",
            CodeState::Unknown => "unknown",
        }
    }

    /// The `stale` mark of the results from before the code state: files changed (`Some(true)`), not
    /// changed (`Some(false)`), not known (`None`).
    pub fn stale(self) -> Option<bool> {
        match self {
            CodeState::InPlace => Some(false),
            CodeState::ChangedAround | CodeState::Reverted => Some(true),
            CodeState::Unknown => None,
        }
    }
}

/// A fix's [`CodeState`] and why, in one short line (`2 of 3 lines it added are gone from src/app.py`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CodeCheck {
    pub state: CodeState,
    /// Why, in a few words.
    pub why: String,
    /// Every file of the fix is gone from the workspace (an [`CodeState::Unknown`] check): with
    /// [`CodeState::Reverted`], what lets an unused fix expire (docs/tools.md, "Expiry").
    #[serde(skip)]
    #[schemars(skip)]
    pub files_gone: bool,
}

impl CodeCheck {
    /// An [`CodeState::Unknown`] check with its reason.
    pub fn unknown(why: impl Into<String>) -> Self {
        Self { state: CodeState::Unknown, why: why.into(), files_gone: false }
    }

    /// A check of state `state` with its reason.
    fn of(state: CodeState, why: impl Into<String>) -> Self {
        Self { state, why: why.into(), files_gone: false }
    }

    /// Whether the fix's lines are gone from the code: reverted, or every file of it gone.
    pub fn gone_from_code(&self) -> bool {
        self.state == CodeState::Reverted || self.files_gone
    }
}

/// A line as recorded: trimmed, at most [`MAX_LINE_CHARS`] characters; `None` for a line with fewer
/// than three letters or digits.
fn counted(line: &str) -> Option<String> {
    let line = line.trim();
    let alnum = line.chars().filter(|c| c.is_alphanumeric()).take(MIN_LINE_ALNUM).count();
    (alnum >= MIN_LINE_ALNUM).then(|| line.chars().take(MAX_LINE_CHARS).collect())
}

/// The key a recorded line is compared by: its characters without whitespace.
fn key(line: &str) -> String {
    line.chars().filter(|c| !c.is_whitespace()).collect()
}

/// The keys of every counted line of `text`.
fn keys(text: &str) -> BTreeSet<String> {
    text.lines().filter_map(counted).map(|l| key(&l)).collect()
}

/// The lines of `after` that `before` does not hold, and those of `before` that `after` does not, each in
/// file order, once, at most [`MAX_LINES_PER_FILE`].
pub fn file_change(before: &str, after: &str) -> FileChange {
    let (old, new) = (keys(before), keys(after));
    let only = |text: &str, other: &BTreeSet<String>| {
        let mut seen = BTreeSet::new();
        text.lines()
            .filter_map(counted)
            .filter(|l| {
                let k = key(l);
                !other.contains(&k) && seen.insert(k)
            })
            .take(MAX_LINES_PER_FILE)
            .collect()
    };
    FileChange { added: only(after, &old), removed: only(before, &new) }
}

/// `git show <rev>:<path>` in `root`: the file's text at that revision, `None` when it has none there.
fn git_show(root: &Path, rev: &str, rel: &str) -> Option<String> {
    let out = git(root, &["show", &format!("{rev}:{rel}")])?;
    String::from_utf8(out).ok()
}

fn git(root: &Path, args: &[&str]) -> Option<Vec<u8>> {
    let output = std::process::Command::new("git")
        .args(args)
        .current_dir(root)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    output.status.success().then_some(output.stdout)
}

/// What the fix in the work tree at `root` changed in each of `rel_paths` (workspace-relative): each
/// file now against its copy at `base` (a commit; `HEAD` when `None` or not a commit of this repository),
/// an empty file where it had none. A file that did not change is left out, and so is everything
/// outside a git work tree or without a commit. Runs `git` once or twice per file: call off the async
/// runtime.
pub fn capture(root: &Path, rel_paths: &[String], base: Option<&str>) -> BTreeMap<String, FileChange> {
    let mut changes = BTreeMap::new();
    let is_commit = |rev: &str| git(root, &["rev-parse", "--verify", "-q", &format!("{rev}^{{commit}}")]).is_some();
    let rev = match base {
        Some(rev) if is_commit(rev) => rev,
        _ if is_commit("HEAD") => "HEAD",
        _ => return changes,
    };
    for rel in rel_paths {
        let now = std::fs::read_to_string(root.join(rel)).unwrap_or_default();
        // not in that commit: a file the fix created
        let before = git_show(root, rev, rel).unwrap_or_default();
        let change = file_change(&before, &now);
        if !change.added.is_empty() || !change.removed.is_empty() {
            changes.insert(rel.clone(), change);
        }
    }
    changes
}

/// The [`CodeState`] of a fix from what it changed (`recorded`, from [`capture`]), the hashes of its
/// files when it was stored (`stored`) and now (`current`, `"missing"` for a file that is gone), and the
/// current text of each recorded file (`read`, `None` when it cannot be read).
///
/// Each recorded file is judged alone: it is *reverted* when fewer than half of the lines the fix added
/// to it are there, or at least half of the lines it removed are back (the failure may be back with
/// them), and one reverted file makes the fix *reverted*. Else the fix is *in place* when every added
/// line is there, no removed line is back and its files are unchanged, and *changed around* otherwise
/// (a file of it that is gone among others included). Without recorded lines (outside git, or stored
/// before they were recorded) only the hashes speak: unchanged is *in place*, changed is *changed
/// around*. When every file of the fix is gone (renamed or deleted) it is *unknown*.
pub fn classify(
    recorded: &BTreeMap<String, FileChange>,
    stored: &BTreeMap<String, String>,
    current: &BTreeMap<String, String>,
    read: impl Fn(&str) -> Option<String>,
) -> CodeCheck {
    let gone: Vec<&str> = current.iter().filter(|(_, hash)| *hash == "missing").map(|(p, _)| p.as_str()).collect();
    if !gone.is_empty() && gone.len() == current.len() {
        let verb = if gone.len() == 1 { "is" } else { "are" };
        return CodeCheck {
            files_gone: true,
            ..CodeCheck::unknown(format!("{} {verb} gone (renamed or deleted?)", names(&gone)))
        };
    }
    let changed: Vec<&str> =
        current.iter().filter(|(path, hash)| stored.get(*path) != Some(*hash)).map(|(p, _)| p.as_str()).collect();
    let (mut reverted, mut partly) = (Vec::new(), Vec::new());
    for (path, change) in recorded {
        // a file as it was stored holds the fix's lines as recorded (both were taken at store time):
        // only a changed file is read
        if gone.contains(&path.as_str()) || !changed.contains(&path.as_str()) {
            continue;
        }
        let Some(text) = read(path) else {
            return CodeCheck::unknown(format!("{path} cannot be read"));
        };
        let keys = keys(&text);
        let (added, removed) = (change.added.len(), change.removed.len());
        let present = change.added.iter().filter(|l| keys.contains(&key(l))).count();
        let back = change.removed.iter().filter(|l| keys.contains(&key(l))).count();
        let lost = format!("{} of {added} lines it added to {path} are gone", added - present);
        let returned = format!("{back} of {removed} lines it removed from {path} are back");
        if added > 0 && present * 2 < added {
            reverted.push(lost);
        } else if removed > 0 && back * 2 >= removed {
            reverted.push(returned);
        } else if present < added {
            partly.push(lost);
        } else if back > 0 {
            partly.push(returned);
        }
    }
    if let Some(first) = reverted.first() {
        let more = match reverted.len() - 1 {
            0 => String::new(),
            n => format!(" (and in {n} more files)"),
        };
        return CodeCheck::of(CodeState::Reverted, format!("{first}{more}"));
    }
    if changed.is_empty() {
        let why = if recorded.is_empty() {
            "its files are as they were"
        } else {
            "its lines are there and its files as they were"
        };
        return CodeCheck::of(CodeState::InPlace, why);
    }
    let why = if let Some(first) = partly.first() {
        first.clone()
    } else if !gone.is_empty() {
        format!("{} is gone; its other files are there", names(&gone))
    } else if recorded.is_empty() {
        format!("{} changed since; what the fix changed was not recorded", names(&changed))
    } else {
        format!("{} changed elsewhere; its lines are there", names(&changed))
    };
    CodeCheck::of(CodeState::ChangedAround, why)
}

/// Up to three paths, then how many more: `a.py, b.py, c.py and 2 more`.
fn names(paths: &[&str]) -> String {
    let mut text = paths.iter().take(3).copied().collect::<Vec<_>>().join(", ");
    if paths.len() > 3 {
        text.push_str(&format!(" and {} more", paths.len() - 3));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "def total(xs):\n    s = 0\n    for x in xs:\n        s += x\n    return s\n";
    const FIXED: &str = "def total(xs):\n    s = 0\n    for x in xs:\n        if x is None:\n            continue\n        s += x\n    return s\n";

    fn hashes(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(p, h)| (p.to_string(), h.to_string())).collect()
    }

    fn check(after_store: &str, now: &str) -> CodeCheck {
        let recorded = BTreeMap::from([("app.py".to_string(), file_change(BEFORE, after_store))]);
        let same = if now == after_store { "h1" } else { "h2" };
        classify(&recorded, &hashes(&[("app.py", "h1")]), &hashes(&[("app.py", same)]), |_| Some(now.to_string()))
    }

    #[test]
    fn a_change_is_the_lines_each_side_lacks_trimmed_once_without_punctuation_lines() {
        let change = file_change(BEFORE, FIXED);
        assert_eq!(change.added, vec!["if x is None:", "continue"]);
        assert!(change.removed.is_empty());
        let change = file_change("a = compute(1)\n}\n", "  a = compute(2)\n}\n\n  a = compute(2)\n");
        assert_eq!(
            (change.added, change.removed),
            (vec!["a = compute(2)".to_string()], vec!["a = compute(1)".to_string()])
        );
        let long = "x".repeat(500);
        assert_eq!(file_change("", &long).added[0].len(), MAX_LINE_CHARS);
        let many: String = (0..100).map(|i| format!("line_{i}\n")).collect();
        assert_eq!(file_change("", &many).added.len(), MAX_LINES_PER_FILE);
    }

    #[test]
    fn each_state_from_lines_and_hashes() {
        assert_eq!(check(FIXED, FIXED).state, CodeState::InPlace);
        // re-indented, re-spaced, with more code around it
        let around = format!(
            "import os\n\n{}\ndef other():\n    return os.sep\n",
            FIXED.replace("    ", "\t").replace("x is None", "x  is  None")
        );
        let c = check(FIXED, &around);
        assert_eq!(c.state, CodeState::ChangedAround, "{c:?}");
        assert_eq!(c.why, "app.py changed elsewhere; its lines are there");
        let c = check(FIXED, BEFORE);
        assert_eq!(c.state, CodeState::Reverted, "{c:?}");
        assert_eq!(c.why, "2 of 2 lines it added to app.py are gone");
        // a fix that only removed a line: it is reverted when the line is back
        let dropped = BEFORE.replace("    return s\n", "");
        let removed_only = BTreeMap::from([("app.py".to_string(), file_change(BEFORE, &dropped))]);
        let c = classify(&removed_only, &hashes(&[("app.py", "h1")]), &hashes(&[("app.py", "h2")]), |_| {
            Some(BEFORE.into())
        });
        assert_eq!((c.state, c.why.as_str()), (CodeState::Reverted, "1 of 1 lines it removed from app.py are back"));
    }

    #[test]
    fn each_file_is_judged_alone_and_a_gone_file_leaves_the_others_to_speak() {
        let two = BTreeMap::from([
            ("a.py".to_string(), file_change("x = compute(1)\n", "x = compute(2)\nlog_value(x)\n")),
            ("u.py".to_string(), file_change("def u():\n    return None\n", "def u():\n    return default_u()\n")),
        ]);
        let stored = hashes(&[("a.py", "h1"), ("u.py", "h1")]);
        let now = |a: &'static str, u: &'static str| {
            move |path: &str| Some(if path == "a.py" { a.to_string() } else { u.to_string() })
        };
        // u.py alone reverted: the fix is reverted, and the count is u.py's
        let c = classify(
            &two,
            &stored,
            &hashes(&[("a.py", "h1"), ("u.py", "h2")]),
            now("x = compute(2)\nlog_value(x)\n", "def u():\n    return None\n"),
        );
        assert_eq!((c.state, c.why.as_str()), (CodeState::Reverted, "1 of 1 lines it added to u.py are gone"));
        // the line the fix replaced is back beside the fix: reverted too (the failure may be back)
        let c = classify(
            &two,
            &stored,
            &hashes(&[("a.py", "h2"), ("u.py", "h1")]),
            now("x = compute(2)\nlog_value(x)\nx = compute(1)\n", "def u():\n    return default_u()\n"),
        );
        assert_eq!((c.state, c.why.as_str()), (CodeState::Reverted, "1 of 1 lines it removed from a.py are back"));
        // u.py gone, a.py as fixed: changed around, saying which file went
        let gone = hashes(&[("a.py", "h1"), ("u.py", "missing")]);
        let c = classify(&two, &stored, &gone, now("x = compute(2)\nlog_value(x)\n", ""));
        assert_eq!((c.state, c.why.as_str()), (CodeState::ChangedAround, "u.py is gone; its other files are there"));
        // u.py gone, a.py reverted: reverted
        let gone_and_changed = hashes(&[("a.py", "h2"), ("u.py", "missing")]);
        let c = classify(&two, &stored, &gone_and_changed, now("x = compute(1)\n", ""));
        assert_eq!(c.state, CodeState::Reverted, "{c:?}");
    }

    /// A file whose hash is as stored holds the lines as recorded: it is not read.
    #[test]
    fn an_unchanged_file_is_not_read() {
        let recorded = BTreeMap::from([("app.py".to_string(), file_change(BEFORE, FIXED))]);
        let stored = hashes(&[("app.py", "h1")]);
        let c = classify(&recorded, &stored, &stored, |_| panic!("an unchanged file was read"));
        assert_eq!((c.state, c.why.as_str()), (CodeState::InPlace, "its lines are there and its files as they were"));
    }

    #[test]
    fn without_recorded_lines_the_hashes_speak_and_a_gone_file_is_unknown() {
        let none = BTreeMap::new();
        let stored = hashes(&[("a.py", "h1")]);
        assert_eq!(classify(&none, &stored, &stored, |_| None).state, CodeState::InPlace);
        let c = classify(&none, &stored, &hashes(&[("a.py", "h2")]), |_| None);
        assert_eq!(c.state, CodeState::ChangedAround);
        let c = classify(&none, &stored, &hashes(&[("a.py", "missing")]), |_| None);
        assert_eq!((c.state, c.why.as_str()), (CodeState::Unknown, "a.py is gone (renamed or deleted?)"));
        assert!(c.files_gone && c.gone_from_code());
        assert!(!CodeCheck::unknown("a fix of another project").gone_from_code());
        assert_eq!(CodeState::Reverted.stale(), Some(true));
        assert_eq!(CodeState::Unknown.stale(), None);
    }
}
