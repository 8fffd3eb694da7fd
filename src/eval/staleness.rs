//! `astra-mcp-dev eval staleness`: does the code check of a fix ([`crate::memory::revalidate`]) say what
//! became of it?
//!
//! Each case is a small git repository, generated from a seed: a module of functions, a bug fix in one
//! of them (a changed comparison, an added guard, a changed constant), stored as `store_fix_memory`
//! records it ([`revalidate::capture`] against the commit the failing run saw, and the files' hashes;
//! the fix committed first in every other case), and then one way the code moves on, each with the
//! state it should get:
//!
//! | move | what happens after the fix is stored | expected |
//! | --- | --- | --- |
//! | `untouched` | nothing | in place |
//! | `committed` | the fix is committed | in place |
//! | `unrelated` | another file is changed and committed | in place |
//! | `edited_around` | another function of the same file changes, a new one is added | changed around |
//! | `moved` | the fixed function moves to the end of the file, re-indented | changed around |
//! | `reformatted` | a formatter re-spaces the whole file (`a * b` to `a*b`, `x = 0` to `x=0`) | changed around |
//! | `reverted` | the file is checked out as it was before the fix | reverted |
//! | `reverted_by_commit` | `git revert` of the fix's commit | reverted |
//! | `reverted_amid_edits` | the fix's lines are put back as they were, other functions change | reverted |
//! | `deleted` | the file is removed | unknown |
//!
//! The report gives each state's precision and recall and the confusion matrix.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, bail};
use serde::Serialize;

use crate::memory::revalidate::{self, CodeState};

/// The moves of the evaluation and the state each should get (module docs).
pub const MOVES: [(&str, CodeState); 10] = [
    ("untouched", CodeState::InPlace),
    ("committed", CodeState::InPlace),
    ("unrelated", CodeState::InPlace),
    ("edited_around", CodeState::ChangedAround),
    ("moved", CodeState::ChangedAround),
    ("reformatted", CodeState::ChangedAround),
    ("reverted", CodeState::Reverted),
    ("reverted_by_commit", CodeState::Reverted),
    ("reverted_amid_edits", CodeState::Reverted),
    ("deleted", CodeState::Unknown),
];

const STATES: [CodeState; 4] = [CodeState::InPlace, CodeState::ChangedAround, CodeState::Reverted, CodeState::Unknown];

const NOUNS: [&str; 16] = [
    "order", "invoice", "session", "token", "upload", "report", "account", "cart", "payment", "ticket", "batch",
    "record", "profile", "message", "quota", "schedule",
];
const VERBS: [&str; 8] = ["load", "check", "count", "format", "merge", "parse", "apply", "render"];

/// One case's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    pub movement: String,
    pub committed_before_store: bool,
    pub expected: CodeState,
    pub got: CodeState,
    pub why: String,
}

/// Precision and recall of one state.
#[derive(Debug, Clone, Serialize)]
pub struct StateScore {
    pub state: CodeState,
    pub expected: usize,
    pub predicted: usize,
    pub correct: usize,
    pub precision: f64,
    pub recall: f64,
}

/// The evaluation's report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub seed: u64,
    pub cases: usize,
    pub scores: Vec<StateScore>,
    /// `confusion[expected][got]`: how many cases, by state words.
    pub confusion: BTreeMap<String, BTreeMap<String, usize>>,
    pub results: Vec<CaseResult>,
}

/// A generated module: `functions[i]` is the text of function i; the fix changes function `target`.
struct Module {
    functions: Vec<String>,
    target: usize,
    fixed: String,
}

fn module(rng: &mut fastrand::Rng) -> Module {
    let count = rng.usize(4..9);
    let mut names = Vec::new();
    while names.len() < count {
        let name = format!("{}_{}", VERBS[rng.usize(..VERBS.len())], NOUNS[rng.usize(..NOUNS.len())]);
        if !names.contains(&name) {
            names.push(name);
        }
    }
    let functions: Vec<String> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let limit = rng.u32(2..500);
            format!(
                "def {name}(items, limit={limit}):\n    total = 0\n    for item in items:\n        if item.size > limit:\n            \
                 raise ValueError(\"{name}: item too large\")\n        total += item.size * {}\n    return total\n",
                i + 2
            )
        })
        .collect();
    let target = rng.usize(..count);
    let original = &functions[target];
    let fixed = match rng.usize(..3) {
        // an off-by-one comparison
        0 => original.replace("if item.size > limit:", "if item.size >= limit:"),
        // an added guard
        1 => original
            .replace("    for item in items:\n", "    if items is None:\n        return 0\n    for item in items:\n"),
        // a changed constant and a skipped case
        _ => original.replace(
            &format!("total += item.size * {}", target + 2),
            &format!("if item.size == 0:\n            continue\n        total += item.size * {}", target + 12),
        ),
    };
    Module { functions, target, fixed }
}

fn text(functions: &[String]) -> String {
    functions.join("\n\n")
}

fn git(root: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = std::process::Command::new("git")
        .args(["-c", "user.name=Eval", "-c", "user.email=eval@example.com", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(root)
        .output()
        .context("running git (the staleness evaluation needs git on PATH)")?;
    if !out.status.success() {
        bail!("git {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// The file's hash as the server records it (`"missing"` for a file that is gone).
fn hash(root: &Path, rel: &str) -> String {
    crate::memory::workspace::Workspace::open(root)
        .map(|ws| ws.file_hashes(&[rel.to_string()]).remove(rel).unwrap_or_default())
        .unwrap_or_default()
}

/// One case in a fresh repository under `dir`.
fn case(
    dir: &Path,
    rng: &mut fastrand::Rng,
    movement: &str,
    commit_first: bool,
) -> anyhow::Result<(CodeState, String)> {
    const FILE: &str = "app/billing.py";
    let root = dir;
    std::fs::create_dir_all(root.join("app"))?;
    let m = module(rng);
    std::fs::write(root.join(FILE), text(&m.functions))?;
    std::fs::write(root.join("README.md"), "billing helpers\n")?;
    git(root, &["init", "-q"])?;
    git(root, &["add", "-A"])?;
    git(root, &["commit", "-q", "-m", "billing helpers"])?;
    // the commit the session's failing run saw, before the fix
    let failing_head = std::process::Command::new("git").args(["rev-parse", "HEAD"]).current_dir(root).output()?;
    let failing_head = String::from_utf8(failing_head.stdout)?.trim().to_string();
    let mut fixed = m.functions.clone();
    fixed[m.target] = m.fixed.clone();
    std::fs::write(root.join(FILE), text(&fixed))?;
    if commit_first {
        git(root, &["commit", "-q", "-am", "fix"])?;
    }
    // what store_fix_memory records
    let paths = vec![FILE.to_string()];
    let changes = revalidate::capture(root, &paths, Some(&failing_head));
    let stored = BTreeMap::from([(FILE.to_string(), hash(root, FILE))]);

    let other = (m.target + 1) % m.functions.len();
    match movement {
        "untouched" => {}
        "committed" => {
            if !commit_first {
                git(root, &["commit", "-q", "-am", "fix"])?;
            }
        }
        "unrelated" => {
            std::fs::write(root.join("README.md"), "billing helpers, with notes\n")?;
            git(root, &["commit", "-q", "-am", "notes"])?;
        }
        "edited_around" => {
            let mut edited = fixed.clone();
            edited[other] = edited[other].replace("total = 0", "total = 0  # running sum");
            edited.push("def audit(entries):\n    return [entry for entry in entries if entry.flagged]\n".into());
            std::fs::write(root.join(FILE), text(&edited))?;
        }
        "moved" => {
            let mut moved = fixed.clone();
            let target = moved.remove(m.target);
            moved.push(format!(
                "class Billing:\n{}",
                target.lines().map(|l| format!("    {l}")).collect::<Vec<_>>().join("\n")
            ));
            std::fs::write(root.join(FILE), text(&moved))?;
        }
        "reformatted" => {
            let spaced = text(&fixed).replace(" = ", "=").replace(" * ", "*").replace(" += ", "+=").replace(", ", ",");
            std::fs::write(root.join(FILE), spaced)?;
        }
        "reverted" => {
            let base = if commit_first { "HEAD~1" } else { "HEAD" };
            git(root, &["checkout", "-q", base, "--", FILE])?;
        }
        "reverted_by_commit" => {
            if !commit_first {
                git(root, &["commit", "-q", "-am", "fix"])?;
            }
            git(root, &["revert", "--no-edit", "HEAD"])?;
        }
        "reverted_amid_edits" => {
            let mut edited = m.functions.clone();
            edited[other] = edited[other].replace("return total", "return round(total, 2)");
            edited.push("def summary(rows):\n    return {\"rows\": len(rows)}\n".into());
            std::fs::write(root.join(FILE), text(&edited))?;
        }
        "deleted" => std::fs::remove_file(root.join(FILE))?,
        other => bail!("unknown move {other}"),
    }
    let current = BTreeMap::from([(FILE.to_string(), hash(root, FILE))]);
    let check = revalidate::classify(&changes, &stored, &current, |rel| std::fs::read_to_string(root.join(rel)).ok());
    Ok((check.state, check.why))
}

/// Runs `per_move` cases of every move (half with the fix committed before it is stored), from `seed`.
///
/// # Errors
/// When git is missing or a repository cannot be made in a temporary directory.
pub fn run(per_move: usize, seed: u64) -> anyhow::Result<Report> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut results = Vec::new();
    for (movement, expected) in MOVES {
        for i in 0..per_move {
            let dir = tempfile::tempdir().context("creating a temporary repository")?;
            let commit_first = i % 2 == 1;
            let (got, why) =
                case(dir.path(), &mut rng, movement, commit_first).with_context(|| format!("case {movement} #{i}"))?;
            results.push(CaseResult {
                movement: movement.into(),
                committed_before_store: commit_first,
                expected,
                got,
                why,
            });
        }
    }
    let scores = STATES
        .iter()
        .map(|&state| {
            let expected = results.iter().filter(|r| r.expected == state).count();
            let predicted = results.iter().filter(|r| r.got == state).count();
            let correct = results.iter().filter(|r| r.got == state && r.expected == state).count();
            let ratio = |a: usize, b: usize| if b == 0 { 1.0 } else { a as f64 / b as f64 };
            StateScore {
                state,
                expected,
                predicted,
                correct,
                precision: ratio(correct, predicted),
                recall: ratio(correct, expected),
            }
        })
        .collect();
    let mut confusion: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for r in &results {
        *confusion.entry(r.expected.words().into()).or_default().entry(r.got.words().into()).or_default() += 1;
    }
    Ok(Report { seed, cases: results.len(), scores, confusion, results })
}

/// The report as text: one line per state, then each case the check got wrong.
pub fn render(report: &Report) -> String {
    let mut out = format!("staleness evaluation: {} cases, seed {}\n", report.cases, report.seed);
    out.push_str("state           expected  predicted  precision  recall\n");
    for s in &report.scores {
        out.push_str(&format!(
            "{:<15} {:>8}  {:>9}  {:>9.3}  {:>6.3}\n",
            s.state.words(),
            s.expected,
            s.predicted,
            s.precision,
            s.recall
        ));
    }
    for r in report.results.iter().filter(|r| r.got != r.expected) {
        out.push_str(&format!(
            "miss: {} (committed before store: {}): expected {}, got {} ({})\n",
            r.movement,
            r.committed_before_store,
            r.expected.words(),
            r.got.words(),
            r.why
        ));
    }
    out
}
