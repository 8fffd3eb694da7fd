//! The cost guard of the runner: token prices, and a ledger of what every request cost, checked against
//! a per-run and a per-project budget before each request.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

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

    /// Every entry (unreadable lines are skipped with a warning).
    pub fn entries(&self) -> Vec<LedgerEntry> {
        let Ok(file) = std::fs::File::open(&self.path) else { return Vec::new() };
        std::io::BufReader::new(file)
            .lines()
            .map_while(Result::ok)
            .filter(|l| !l.trim().is_empty())
            .filter_map(|l| {
                serde_json::from_str(&l)
                    .map_err(|e| tracing::warn!(path = %self.path.display(), "ledger line skipped: {e}"))
                    .ok()
            })
            .collect()
    }

    /// USD spent by `run_id` and by `project`.
    pub fn spent(&self, run_id: &str, project: &str) -> (f64, f64) {
        self.entries().iter().fold((0.0, 0.0), |(run, proj), e| {
            (run + if e.run_id == run_id { e.usd } else { 0.0 }, proj + if e.project == project { e.usd } else { 0.0 })
        })
    }

    /// `Err` with the reason when the run or the project has spent its budget.
    pub fn check(&self, run_id: &str, project: &str, run_budget: f64, project_budget: f64) -> Result<(), String> {
        let (run, proj) = self.spent(run_id, project);
        if run >= run_budget {
            return Err(format!("run `{run_id}` spent {run:.4} USD of its {run_budget:.4} USD (--run-budget-usd)"));
        }
        if proj >= project_budget {
            return Err(format!(
                "project `{project}` spent {proj:.4} USD of its {project_budget:.4} USD (--project-budget-usd; ledger {})",
                self.path.display()
            ));
        }
        Ok(())
    }

    /// Appends `entry` (a failure is logged: the request has been paid for either way).
    pub fn record(&self, entry: &LedgerEntry) {
        let write = || -> std::io::Result<()> {
            if let Some(dir) = self.path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&self.path)?;
            writeln!(file, "{}", serde_json::to_string(entry).expect("ledger entries serialize"))
        };
        if let Err(e) = write() {
            tracing::error!(path = %self.path.display(), "cannot write the cost ledger: {e}");
        }
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

    #[test]
    fn the_ledger_stops_a_run_and_a_project_at_their_budgets() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = Ledger::new(dir.path().join("ledger.jsonl"));
        assert!(ledger.check("r1", "p", 0.05, 0.10).is_ok());
        ledger.record(&LedgerEntry::new("r1", "p", "m", 1000, 1000, 0.06));
        assert!(ledger.check("r1", "p", 0.05, 0.10).unwrap_err().contains("run `r1` spent 0.0600"));
        assert!(ledger.check("r2", "p", 0.05, 0.10).is_ok(), "another run of the project still has budget");
        ledger.record(&LedgerEntry::new("r2", "p", "m", 1000, 1000, 0.05));
        assert!(ledger.check("r3", "p", 0.05, 0.10).unwrap_err().contains("project `p` spent 0.1100"));
        assert!(ledger.check("r3", "q", 0.05, 0.10).is_ok());
    }
}
