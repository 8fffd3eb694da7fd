//! The cost guard: token prices, and a ledger of what every request cost, checked against a per-run and
//! a per-project budget before each request (a project of `drive`, or `distill:<actor>`).

use std::io::{BufRead, Write};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{Account, LlmError};

/// Prices in USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pricing {
    pub input_per_million_usd: f64,
    pub output_per_million_usd: f64,
}

impl Pricing {
    /// USD for `input` and `output` tokens.
    pub fn cost(&self, input: u64, output: u64) -> f64 {
        (input as f64 * self.input_per_million_usd + output as f64 * self.output_per_million_usd) / 1_000_000.0
    }
}

/// The guard's money settings checked: each `(flag, USD)` must be finite and not negative (a NaN
/// budget would let every request through).
///
/// # Errors
/// The first flag that is not, with its value.
pub fn check_usd(amounts: &[(&str, f64)]) -> Result<(), String> {
    match amounts.iter().find(|(_, value)| !value.is_finite() || *value < 0.0) {
        Some((name, value)) => Err(format!("{name} must be a finite amount of USD, 0 or more; got {value}")),
        None => Ok(()),
    }
}

/// One request's line in the ledger (JSON Lines).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerEntry {
    /// RFC 3339.
    pub time: String,
    pub run_id: String,
    pub project: String,
    pub model: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub usd: f64,
    /// Set when no usable answer came back: why, and the tokens and cost are the most the request can
    /// have cost (`Client::send`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unanswered: Option<String>,
}

impl LedgerEntry {
    pub fn new(run_id: &str, project: &str, model: &str, input_tokens: u64, output_tokens: u64, usd: f64) -> Self {
        Self {
            time: chrono::Utc::now().to_rfc3339(),
            run_id: run_id.into(),
            project: project.into(),
            model: model.into(),
            input_tokens,
            output_tokens,
            usd,
            unanswered: None,
        }
    }
}

/// The ledger file: one [`LedgerEntry`] per request, appended.
#[derive(Debug, Clone)]
pub struct Ledger {
    path: PathBuf,
}

impl Ledger {
    pub fn new(path: PathBuf) -> Self {
        Self { path }
    }

    /// Every entry (none when the file does not exist yet).
    ///
    /// # Errors
    /// An unreadable file or a line that is not an entry: the guard cannot count what was spent, so it
    /// refuses rather than guess.
    pub fn entries(&self) -> Result<Vec<LedgerEntry>, String> {
        let file = match std::fs::File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(format!("cannot read the cost ledger {}: {e}", self.path.display())),
        };
        let mut entries = Vec::new();
        for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
            let line = line.map_err(|e| format!("cannot read the cost ledger {}: {e}", self.path.display()))?;
            if line.trim().is_empty() {
                continue;
            }
            let entry: LedgerEntry = serde_json::from_str(&line).map_err(|e| {
                format!(
                    "line {} of the cost ledger {} is not a ledger entry ({e}): fix or move the file",
                    n + 1,
                    self.path.display()
                )
            })?;
            if !entry.usd.is_finite() || entry.usd < 0.0 {
                return Err(format!("line {} of the cost ledger {} has an invalid cost", n + 1, self.path.display()));
            }
            entries.push(entry);
        }
        Ok(entries)
    }

    /// USD spent by `run_id` and by `project`.
    ///
    /// # Errors
    /// As [`Self::entries`].
    pub fn spent(&self, run_id: &str, project: &str) -> Result<(f64, f64), String> {
        Ok(self.entries()?.iter().fold((0.0, 0.0), |(run, proj), e| {
            (run + if e.run_id == run_id { e.usd } else { 0.0 }, proj + if e.project == project { e.usd } else { 0.0 })
        }))
    }

    /// Whether `account` may send another request.
    ///
    /// # Errors
    /// [`LlmError::Budget`] when the run or the project has spent its budget, [`LlmError::Ledger`] when
    /// the ledger cannot be read.
    pub fn check(&self, account: &Account<'_>) -> Result<(), LlmError> {
        let Account { run_id, project, run_budget_usd: run_budget, project_budget_usd: project_budget } = *account;
        let (run, proj) = self.spent(run_id, project).map_err(LlmError::Ledger)?;
        if run >= run_budget {
            return Err(LlmError::Budget(format!(
                "run `{run_id}` spent {run:.4} USD of its {run_budget:.4} USD (--run-budget-usd)"
            )));
        }
        if proj >= project_budget {
            return Err(LlmError::Budget(format!(
                "project `{project}` spent {proj:.4} USD of its {project_budget:.4} USD (--project-budget-usd; ledger {})",
                self.path.display()
            )));
        }
        Ok(())
    }

    /// Appends `entry` on a line of its own (after a newline when the file's last line lacks one).
    ///
    /// # Errors
    /// [`LlmError::Ledger`] when the file cannot be written: the runner then stops, since it could no
    /// longer count.
    pub fn record(&self, entry: &LedgerEntry) -> Result<(), LlmError> {
        use std::io::{Read, Seek, SeekFrom};
        let write = || -> std::io::Result<()> {
            if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)?;
            }
            let mut file = std::fs::OpenOptions::new().create(true).read(true).append(true).open(&self.path)?;
            let len = file.metadata()?.len();
            let mut last = [b'\n'];
            if len > 0 {
                file.seek(SeekFrom::Start(len - 1))?;
                file.read_exact(&mut last)?;
            }
            let separator = if last[0] == b'\n' { "" } else { "\n" };
            writeln!(file, "{separator}{}", serde_json::to_string(entry).expect("ledger entries serialize"))
        };
        write().map_err(|e| LlmError::Ledger(format!("cannot write the cost ledger {}: {e}", self.path.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_are_per_million_tokens() {
        let p = Pricing { input_per_million_usd: 10.0, output_per_million_usd: 50.0 };
        assert!((p.cost(1_000, 200) - 0.02).abs() < 1e-12);
    }

    fn account<'a>(run_id: &'a str, project: &'a str) -> Account<'a> {
        Account { run_id, project, run_budget_usd: 0.05, project_budget_usd: 0.10 }
    }

    fn refusal(result: Result<(), LlmError>) -> String {
        match result {
            Err(LlmError::Budget(reason)) => reason,
            other => panic!("expected a budget refusal, got {other:?}"),
        }
    }

    #[test]
    fn the_ledger_stops_a_run_and_a_project_at_their_budgets() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::new(dir.path().join("ledger.jsonl"));
        assert!(ledger.check(&account("r1", "p")).is_ok());
        ledger.record(&LedgerEntry::new("r1", "p", "m", 1000, 1000, 0.06)).unwrap();
        assert!(refusal(ledger.check(&account("r1", "p"))).contains("run `r1` spent 0.0600"));
        assert!(ledger.check(&account("r2", "p")).is_ok(), "another run of the project still has budget");
        let mut unanswered = LedgerEntry::new("r2", "p", "m", 1000, 1000, 0.05);
        unanswered.unanswered = Some("timeout".into());
        ledger.record(&unanswered).unwrap();
        assert!(refusal(ledger.check(&account("r3", "p"))).contains("project `p` spent 0.1100"), "unanswered counts");
        assert!(ledger.check(&account("r3", "q")).is_ok());
    }

    #[test]
    fn a_ledger_that_cannot_be_read_or_written_stops_the_runner() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.jsonl");
        // a truncated last line: the guard refuses to guess, and a new entry does not glue onto it
        std::fs::write(&path, "{\"time\":\"t\",\"run_id\":\"old\",\"pro").unwrap();
        let ledger = Ledger::new(path.clone());
        let open = Account { run_id: "r", project: "p", run_budget_usd: 1.0, project_budget_usd: 1.0 };
        // an unusable ledger is said as such, not as a budget reached
        match ledger.check(&open) {
            Err(error @ LlmError::Ledger(_)) => {
                let message = error.to_string();
                assert!(
                    message.contains("line 1 of the cost ledger") && !message.contains("budget reached"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        ledger.record(&LedgerEntry::new("r", "p", "m", 1, 1, 0.5)).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.lines().nth(1).unwrap().starts_with("{\"time\""), "{text}");
        let unwritable = Ledger::new(dir.path().to_path_buf()).record(&LedgerEntry::new("r", "p", "m", 1, 1, 0.5));
        assert!(matches!(unwritable, Err(LlmError::Ledger(_))), "{unwritable:?}");
    }
}
