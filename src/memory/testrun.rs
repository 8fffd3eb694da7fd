//! Running the project's test command and reading its output: exit code, duration, the runner's summary
//! line, and the failing tests with their first assertion line (pytest and cargo test are parsed; any
//! other runner gets its last output line as the summary). Also the deterministic `confirmed_outcome`
//! string (docs/tools.md, "The gates"). How many runs may go at once ([`RunLimits`], docs/limits.md).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{LazyLock, Mutex, OnceLock};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use regex::Regex;
use sha2::{Digest, Sha256};

/// At most this many failing tests are reported.
pub const MAX_FAILING: usize = 20;
/// Failure messages are cut to this many characters.
pub const MAX_MESSAGE_CHARS: usize = 300;
/// The output tail kept for the model, in characters.
pub const OUTPUT_TAIL_CHARS: usize = 2_000;

/// A failing test as the runner reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailingTest {
    /// The runner's id, e.g. `tests/test_cors.py::test_second_origin`.
    pub name: String,
    /// The first assertion / error line, when the runner printed one.
    pub message: Option<String>,
}

/// The result of one test run.
#[derive(Debug, Clone)]
pub struct TestRun {
    pub command: String,
    /// `None` when the run timed out or was killed by a signal.
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    /// Wall time, in milliseconds.
    pub duration_ms: u64,
    pub finished_at: DateTime<Utc>,
    /// The runner's summary line, e.g. `3 failed, 1 passed in 0.05s`.
    pub summary: String,
    pub failing: Vec<FailingTest>,
    /// The last [`OUTPUT_TAIL_CHARS`] characters of stdout+stderr.
    pub output_tail: String,
    /// The output reports failures: in the summary line (`3 failed`, `2 errors`), a unittest
    /// `FAILED (failures=N)` line, or a jest-style `Tests: N failed` line.
    pub failures_reported: bool,
}

impl TestRun {
    /// True only for a run that exited 0, named no failing test, and reported no failures (a runner
    /// that prints `3 failed` or `FAILED (failures=1)` and still exits 0 did not pass).
    pub fn passed(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out && self.failing.is_empty() && !self.failures_reported
    }

    /// Why the test command could not run at all, when it could not: the shell did not find it (exit
    /// code 127) or could not execute it (126), Python has no module of the name it was given (`python -m
    /// pytest` where pytest is not installed, exit code 1), or pytest refused its command line (exit code 4:
    /// an unknown option, a path that does not exist) or collected no test (5). `None` for a run that ran
    /// tests, whether they passed or failed. Such a run says nothing about the code (docs/tools.md, "Test
    /// runs").
    pub fn could_not_run(&self) -> Option<String> {
        if self.timed_out || !self.failing.is_empty() {
            return None;
        }
        let pytest = runner_name(&self.command) == "pytest";
        match self.exit_code? {
            127 => Some("the shell did not find the command (exit code 127)".to_string()),
            126 => Some("the shell found the command but could not execute it (exit code 126: not executable, or permission denied)".to_string()),
            1 => MISSING_MODULE.captures(&self.output_tail).map(|c| {
                format!(
                    "`{}` has no module `{}` (exit code 1; install it there, or name a Python that has it)",
                    &c[1], &c[2]
                )
            }),
            4 if pytest => Some("pytest refused its command line (exit code 4: a usage error, such as an unknown option or a path that does not exist)".to_string()),
            5 if pytest => Some("pytest collected no test (exit code 5)".to_string()),
            _ => None,
        }
    }

    /// The symptom lines a fix row embeds: each failing test's name and message.
    pub fn symptom_lines(&self) -> Vec<String> {
        self.failing
            .iter()
            .map(|t| match &t.message {
                Some(m) => format!("{}: {m}", t.name),
                None => t.name.clone(),
            })
            .collect()
    }
}

/// How many test runs this process lets go at once (`--max-test-runs`, `--max-test-runs-per-workspace`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    /// In all.
    pub total: usize,
    /// In one workspace (runs in one directory share its files and caches).
    pub per_workspace: usize,
}

/// Default of [`RunLimits::total`].
pub const DEFAULT_MAX_TEST_RUNS: u64 = 4;
/// Default of [`RunLimits::per_workspace`].
pub const DEFAULT_MAX_TEST_RUNS_PER_WORKSPACE: u64 = 2;

impl Default for RunLimits {
    fn default() -> Self {
        Self { total: DEFAULT_MAX_TEST_RUNS as usize, per_workspace: DEFAULT_MAX_TEST_RUNS_PER_WORKSPACE as usize }
    }
}

static LIMITS: OnceLock<RunLimits> = OnceLock::new();

/// Sets this process's [`RunLimits`]; the first call wins, and without one the defaults hold.
pub fn set_run_limits(limits: RunLimits) {
    let _ = LIMITS.set(limits);
}

/// The runs going on now: in all, and per workspace root.
static RUNNING: LazyLock<Mutex<(usize, HashMap<PathBuf, usize>)>> = LazyLock::new(Mutex::default);

/// One of the runs allowed at once; its place is given back when dropped.
#[derive(Debug)]
pub struct RunSlot {
    workspace: PathBuf,
}

impl Drop for RunSlot {
    fn drop(&mut self) {
        let mut running = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
        running.0 = running.0.saturating_sub(1);
        if let Some(n) = running.1.get_mut(&self.workspace) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                running.1.remove(&self.workspace);
            }
        }
    }
}

/// Takes a place for a run in `workspace`, or says which limit is reached (the caller refuses the run:
/// queuing it would keep an agent waiting with no word of why).
///
/// # Errors
/// The message for the caller: how many runs go on, the limit and its flag, what to do.
pub fn run_slot(workspace: &Path) -> Result<RunSlot, String> {
    let limits = LIMITS.get().copied().unwrap_or_default();
    let mut running = RUNNING.lock().unwrap_or_else(|p| p.into_inner());
    let here = running.1.get(workspace).copied().unwrap_or(0);
    if here >= limits.per_workspace {
        return Err(format!(
            "{here} test runs are already going on in this workspace, its limit (--max-test-runs-per-workspace \
{}): call run_tests again once they have finished",
            limits.per_workspace
        ));
    }
    if running.0 >= limits.total {
        return Err(format!(
            "{} test runs are already going on in this server, its limit (--max-test-runs {}): call run_tests \
again once one has finished",
            running.0, limits.total
        ));
    }
    running.0 += 1;
    *running.1.entry(workspace.to_path_buf()).or_insert(0) += 1;
    Ok(RunSlot { workspace: workspace.to_path_buf() })
}

/// Output kept per stream (stdout, stderr): the last this many bytes.
pub const MAX_OUTPUT_BYTES: usize = 1 << 20;
/// After the shell exits and its process group is killed, how long to wait for the output pipes to close.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// The answer to a `run_tests` whose command could not run (`why`: [`TestRun::could_not_run`]): it names
/// the command, where it came from (`chosen`: `--test-command`, `.astra-mcp.toml` or detection) and what
/// the user changes there, says that no test ran, and ends with the last lines of the output. Secrets in
/// the command and the output are redacted.
pub fn not_run_message(run: &TestRun, why: &str, chosen: &crate::memory::project::TestCommand) -> String {
    use crate::memory::redact::redact;
    let lines: Vec<&str> = run.output_tail.lines().filter(|l| !l.trim().is_empty()).collect();
    let last = lines[lines.len().saturating_sub(NOT_RUN_TAIL_LINES)..].join("\n");
    let mut text = format!(
        "run_tests could not run the test command `{}`: {why}. No test ran, so this says nothing about the code: \
         do not change code because of it. Where the command came from: {}. Tell the user to {}.",
        redact(&run.command),
        redact(&chosen.source),
        chosen.how_to_change()
    );
    if !last.is_empty() {
        text.push_str(&format!("\nOutput (tail):\n{}", redact(&last)));
    }
    text
}

/// Lines of output quoted by [`not_run_message`].
const NOT_RUN_TAIL_LINES: usize = 10;

/// Runs `command` with the platform's shell ([`shell`]) in `cwd`, in its own process group, with no stdin.
///
/// The run ends when the shell exits or `timeout` passes; then the whole process group is killed (test
/// processes left in the background are part of the run), and so it is when the returned future is
/// dropped (a cancelled request, a server shutting down). Only the last [`MAX_OUTPUT_BYTES`] of each
/// stream are kept, also on timeout. The child gets `COLUMNS=200` (so pytest does not cut its summary
/// lines) and `PYTHONDONTWRITEBYTECODE=1`.
///
/// # Errors
/// Only when the shell cannot be started or waited for; a failing or timed-out run is an `Ok` [`TestRun`].
pub async fn run(command: &str, cwd: &Path, timeout: Duration) -> std::io::Result<TestRun> {
    let started = Instant::now();
    let mut shell = shell(command);
    shell
        .current_dir(cwd)
        .env("COLUMNS", "200")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        // the runner's Responses API key is not the project's business (a test could print it)
        .env_remove(crate::env_vars::OPENAI_API_KEY)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    #[cfg(unix)]
    shell.process_group(0);
    #[cfg(windows)]
    shell.creation_flags(CREATE_NEW_PROCESS_GROUP);
    let mut child = shell.spawn()?;
    let mut group = ProcessGroup::new(child.id());
    let mut stdout = Tail::collect(child.stdout.take());
    let mut stderr = Tail::collect(child.stderr.take());
    let waited = tokio::time::timeout(timeout, child.wait()).await;
    let duration_ms = started.elapsed().as_millis() as u64;
    let finished_at = Utc::now();
    group.kill();
    let (exit_code, timed_out) = match waited {
        Ok(status) => (status?.code(), false),
        Err(_) => (None, true),
    };
    let _ = tokio::time::timeout(DRAIN_GRACE, futures::future::join(stdout.done(), stderr.done())).await;
    let mut text = stdout.text();
    let err = stderr.text();
    if !err.is_empty() {
        text.push('\n');
        text.push_str(&err);
    }
    let reading = read_output(&text);
    let summary = if timed_out {
        format!("timed out after {} s", timeout.as_secs())
    } else {
        reading.summary.unwrap_or_else(|| match exit_code {
            Some(code) => format!("exit code {code}"),
            None => "killed by a signal".to_string(),
        })
    };
    Ok(TestRun {
        command: command.to_string(),
        exit_code,
        timed_out,
        duration_ms,
        finished_at,
        failures_reported: REPORTED_FAILURES.is_match(&summary) || reading.failures_reported,
        summary,
        failing: reading.failing,
        output_tail: tail(&compact_padding(&reading.text), OUTPUT_TAIL_CHARS),
    })
}

/// What a test runner's output says, read as [`run`] reads it (also for output another program ran,
/// e.g. an agent client's shell tool).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputReading {
    /// The output without ANSI escapes.
    pub text: String,
    /// [`summary_line`] of the output.
    pub summary: Option<String>,
    /// [`failing_tests`] of the output.
    pub failing: Vec<FailingTest>,
    /// The summary line or another line reports failures (`3 failed`, `FAILED (failures=1)`,
    /// `Tests: 2 failed`).
    pub failures_reported: bool,
}

/// Reads a test runner's output: ANSI escapes removed, then its summary line, failing tests, and
/// whether it reports failures.
pub fn read_output(output: &str) -> OutputReading {
    let text = ANSI_ESCAPE.replace_all(output, "").into_owned();
    let summary = summary_line(&text);
    let failures_reported =
        summary.as_deref().is_some_and(|s| REPORTED_FAILURES.is_match(s)) || FAILURE_LINE.is_match(&text);
    OutputReading { failing: failing_tests(&text), summary, failures_reported, text }
}

/// The process groups of the test runs going on in this process.
static GROUPS: LazyLock<Mutex<HashSet<i32>>> = LazyLock::new(Mutex::default);

/// The process group of a test run; killed (SIGKILL) at most once, at the latest when dropped.
struct ProcessGroup(Option<i32>);

impl ProcessGroup {
    fn new(pid: Option<u32>) -> Self {
        let pgid = pid.and_then(|pid| i32::try_from(pid).ok());
        if let Some(pgid) = pgid {
            GROUPS.lock().unwrap_or_else(|p| p.into_inner()).insert(pgid);
        }
        Self(pgid)
    }

    fn kill(&mut self) {
        if let Some(pgid) = self.0.take() {
            GROUPS.lock().unwrap_or_else(|p| p.into_inner()).remove(&pgid);
            kill_group(pgid);
        }
    }
}

#[cfg(unix)]
fn kill_group(pgid: i32) {
    // SAFETY: kill(2) with a negative pid signals that process group; it touches no memory.
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}

/// Windows has no process group to signal: `taskkill /F /T` ends the shell and the processes it started
/// (started, not waited for: this runs on the async runtime). Processes whose parent already exited are
/// no longer found through it, unlike a Unix process group's.
#[cfg(windows)]
fn kill_group(pid: i32) {
    let _ = std::process::Command::new("taskkill")
        .args(["/F", "/T", "/PID", &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}

/// `CREATE_NEW_PROCESS_GROUP` (Windows process creation flags): the console's Ctrl-C sent to the server
/// does not reach the test run, which is ended with [`kill_group`] instead.
#[cfg(windows)]
const CREATE_NEW_PROCESS_GROUP: u32 = 0x0000_0200;

/// A [`tokio::process::Command`] that runs `command` through the platform's shell: `sh -c` on Unix,
/// `cmd /C` on Windows (the command line passed as written, not re-quoted). The test commands users
/// configure are shell command lines (`cd app && pytest -q`), so they keep their meaning on each platform
/// only as far as the two shells agree.
pub fn shell(command: &str) -> tokio::process::Command {
    #[cfg(unix)]
    {
        let mut shell = tokio::process::Command::new("sh");
        shell.arg("-c").arg(command);
        shell
    }
    #[cfg(windows)]
    {
        let mut shell = tokio::process::Command::new("cmd");
        shell.arg("/C").raw_arg(command);
        shell
    }
}

/// Kills (SIGKILL) the process group of every test run still going: for an exit that cannot wait for
/// the runs' own cleanup (a second signal), so that no test run outlives the server.
pub fn kill_running_groups() {
    let groups: Vec<i32> = GROUPS.lock().unwrap_or_else(|p| p.into_inner()).drain().collect();
    for pgid in groups {
        kill_group(pgid);
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The last [`MAX_OUTPUT_BYTES`] of a child's output stream, filled by a background task.
struct Tail {
    bytes: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Tail {
    fn collect(stream: Option<impl tokio::io::AsyncRead + Unpin + Send + 'static>) -> Self {
        let bytes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = bytes.clone();
        let task = stream.map(|mut stream| {
            tokio::spawn(async move {
                use tokio::io::AsyncReadExt;
                let mut chunk = vec![0u8; 64 * 1024];
                while let Ok(n) = stream.read(&mut chunk).await {
                    if n == 0 {
                        break;
                    }
                    let mut buf = sink.lock().unwrap_or_else(|p| p.into_inner());
                    buf.extend_from_slice(&chunk[..n]);
                    if buf.len() > 2 * MAX_OUTPUT_BYTES {
                        let cut = buf.len() - MAX_OUTPUT_BYTES;
                        buf.drain(..cut);
                    }
                }
            })
        });
        Self { bytes, task }
    }

    /// Waits until the stream is closed.
    async fn done(&mut self) {
        if let Some(task) = &mut self.task {
            let _ = task.await;
            self.task = None;
        }
    }

    fn text(&self) -> String {
        let buf = self.bytes.lock().unwrap_or_else(|p| p.into_inner());
        let start = buf.len().saturating_sub(MAX_OUTPUT_BYTES);
        String::from_utf8_lossy(&buf[start..]).into_owned()
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

static ANSI_ESCAPE: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\x1b\[[0-9;?]*[ -/]*[@-~]").expect("valid regex"));
static FAILURE_LINE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)^\s*(?:FAILED \((?:failures|errors)=[1-9]|Tests?:\s+[1-9][0-9]* failed\b)").expect("valid regex")
});
static REPORTED_FAILURES: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b[1-9][0-9]* (?:failed|errors?)\b").expect("valid regex"));

static MISSING_MODULE: LazyLock<Regex> = LazyLock::new(|| {
    // `python -m pytest` without pytest: `/usr/bin/python3: No module named pytest` (an import error inside
    // the tests reads `ModuleNotFoundError: No module named 'x'` and is a test failure)
    Regex::new(r"(?m)^(\S*python[\w.-]*): No module named '?([\w.]+)'?\s*$").expect("valid regex")
});
/// The spaces pytest pads a progress line with before its `[ 50%]` at the end of the line.
static PROGRESS_PADDING: LazyLock<Regex> = LazyLock::new(|| Regex::new(r" {2,}(\[ *\d+%\])$").expect("valid regex"));
/// A separator run longer than 10 characters: one of `=`, `-`, `_`, `*`, `#`, `~` repeated (`=====`),
/// or repeated with a space between (pytest's `_ _ _ _` between traceback entries).
static SEPARATOR_RUN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"={11,}|-{11,}|_{11,}|\*{11,}|#{11,}|~{11,}|=(?: =){5,}|-(?: -){5,}|_(?: _){5,}|\*(?: \*){5,}|#(?: #){5,}|~(?: ~){5,}",
    )
    .expect("valid regex")
});
/// Characters a separator run is cut to.
const SEPARATOR_KEPT: usize = 5;
static PYTEST_SUMMARY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^=*\s*((?:\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed|deselected|warnings?|rerun)(?:, )?)+ in [\d.]+s(?: \([^)]*\))?)\s*=*$")
        .expect("valid regex")
});
static CARGO_SUMMARY: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^test result: (.*)$").expect("valid regex"));
static PYTEST_FAILED: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^(?:FAILED|ERROR) ([^\s(]\S*)(?: - (.*))?$").expect("valid regex"));
static CARGO_FAILED: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^test (\S+) \.\.\. FAILED$").expect("valid regex"));
static TIMING: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?:;\s*finished)?\s+in\s+\d+(?:\.\d+)?m?s\b(?:\s*\([^)]*\))?").expect("valid regex"));

/// The runner's summary line: pytest's `N passed in Xs`, cargo's `test result: …` (the last one), or
/// else the last non-empty line of output. `None` for empty output.
pub fn summary_line(output: &str) -> Option<String> {
    let lines: Vec<&str> = output.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    for line in lines.iter().rev() {
        if let Some(c) = PYTEST_SUMMARY.captures(line) {
            return Some(c[1].to_string());
        }
    }
    for line in lines.iter().rev() {
        if let Some(c) = CARGO_SUMMARY.captures(line) {
            return Some(format!("test result: {}", &c[1]));
        }
    }
    lines.last().map(|l| cut(l, MAX_MESSAGE_CHARS))
}

/// Failing tests named in the output (pytest's short summary, cargo's `... FAILED` lines), at most
/// [`MAX_FAILING`], each with its first assertion line when one was printed.
pub fn failing_tests(output: &str) -> Vec<FailingTest> {
    let mut out: Vec<FailingTest> = Vec::new();
    let lines: Vec<&str> = output.lines().collect();
    for line in &lines {
        let line = line.trim_end();
        if let Some(c) = PYTEST_FAILED.captures(line) {
            let name = c[1].to_string();
            let message = c.get(2).map(|m| cut(m.as_str(), MAX_MESSAGE_CHARS));
            if !out.iter().any(|t| t.name == name) {
                out.push(FailingTest { name, message });
            }
        } else if let Some(c) = CARGO_FAILED.captures(line) {
            let name = c[1].to_string();
            if !out.iter().any(|t| t.name == name) {
                out.push(FailingTest { message: cargo_panic_message(&lines, &name), name });
            }
        }
        if out.len() == MAX_FAILING {
            break;
        }
    }
    out
}

/// The line after `thread '<name>' panicked at …:` in cargo test output.
fn cargo_panic_message(lines: &[&str], name: &str) -> Option<String> {
    let marker = format!("thread '{name}' panicked at");
    let at = lines.iter().position(|l| l.contains(&marker))?;
    lines.get(at + 1).map(|l| cut(l.trim(), MAX_MESSAGE_CHARS)).filter(|l| !l.is_empty())
}

/// The runner's name for the outcome string: `pytest`, `cargo test`, `go test`, `npm test`, … else the
/// command's first word, or `tests` for a compound shell command.
pub fn runner_name(command: &str) -> String {
    // leading `NAME=value` environment assignments are not the runner
    let words: Vec<&str> = command.split_whitespace().skip_while(|w| is_assignment(w)).collect();
    let base = |w: &str| w.rsplit('/').next().unwrap_or(w).to_string();
    if words.iter().any(|w| base(w) == "pytest" || base(w).starts_with("py.test")) {
        return "pytest".into();
    }
    for (i, w) in words.iter().enumerate() {
        let b = base(w);
        if matches!(b.as_str(), "cargo" | "go" | "npm" | "pnpm" | "yarn" | "make" | "mvn" | "gradle")
            && let Some(next) = words.get(i + 1)
        {
            return format!("{b} {}", next.trim_end_matches([';', '&', '|']));
        }
    }
    // a compound shell command has no single runner to name
    let compound = [";", "&&", "||", "|", "$(", "`"].iter().any(|op| command.contains(op));
    match words.first() {
        Some(first) if !compound && !SHELL_KEYWORDS.contains(first) => base(first),
        _ => "tests".into(),
    }
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=')
        .is_some_and(|(name, _)| !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
}

const SHELL_KEYWORDS: &[&str] = &["if", "for", "while", "until", "case", "{", "(", "!"];

/// Output with the padding test runners print to fill a terminal's width removed, so the tail shown to
/// the model holds text rather than spaces: white space at line ends, the spaces before pytest's progress
/// (`F.F      [100%]`), and separator runs longer than 10 characters ([`SEPARATOR_RUN`]: pytest's
/// `==== FAILURES ====` and `_ _ _ _` lines, 200 columns wide with `COLUMNS=200`), cut to
/// [`SEPARATOR_KEPT`]. Other spaces inside a line are kept, so that pytest's `^^^^` markers stay under
/// the code they point at, and so is indentation.
pub fn compact_padding(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.lines().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let line = PROGRESS_PADDING.replace(line.trim_end(), " $1");
        let line = SEPARATOR_RUN
            .replace_all(&line, |c: &regex::Captures| c[0].chars().take(SEPARATOR_KEPT).collect::<String>());
        out.push_str(&line);
    }
    if text.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// A summary without timings, so the same result on the same files always gives the same string:
/// `4 passed in 0.17s` -> `4 passed`.
pub fn normalized_summary(summary: &str) -> String {
    TIMING.replace_all(summary, "").trim().to_string()
}

/// Short hash (8 hex) of the test command and the workspace digest.
pub fn receipt_id(command: &str, workspace_digest: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(command.as_bytes());
    hasher.update([0]);
    hasher.update(workspace_digest.as_bytes());
    hex::encode(hasher.finalize())[..8].to_string()
}

/// The id of a failing run (`run-1a2b3c4d`): 8 hex digits of SHA-256 over the command, the workspace
/// digest before the run and when it ended, so two failing runs of one session never share one.
pub fn failed_run_id(command: &str, workspace_digest: &str, finished_at: &chrono::DateTime<chrono::Utc>) -> String {
    let mut hasher = Sha256::new();
    for part in [command, workspace_digest, &finished_at.to_rfc3339()] {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    }
    format!("run-{}", &hex::encode(hasher.finalize())[..8])
}

/// The `confirmed_outcome` of a passing run (docs/tools.md, "The gates"), deterministic for the same command and
/// workspace state: `pytest passed with exit code 0 (4 passed) [receipt 3f9a1c2e]`. A command that
/// printed nothing has its exit code as its summary, which is not said twice: `true passed with exit code
/// 0 [receipt 3f9a1c2e]`. Secrets in the command or summary are redacted (it is stored and shown to other
/// sessions).
pub fn confirmed_outcome(run: &TestRun, workspace_digest: &str) -> String {
    use crate::memory::redact::redact;
    let summary = normalized_summary(&run.summary);
    let summary = match summary.as_str() {
        "" | "exit code 0" => String::new(),
        said => format!(" ({})", redact(said)),
    };
    format!(
        "{} passed with exit code 0{summary} [receipt {}]",
        redact(&runner_name(&run.command)),
        receipt_id(&run.command, workspace_digest)
    )
}

/// The summary after a run's headline, `: <summary>`, or nothing when the summary is only the exit code
/// the headline already gives (a command that printed nothing).
pub fn summary_suffix(run: &TestRun) -> String {
    match run.exit_code {
        Some(code) if run.summary == format!("exit code {code}") => String::new(),
        _ => format!(": {}", run.summary),
    }
}

fn cut(s: &str, max_chars: usize) -> String {
    if s.chars().count() <= max_chars {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(max_chars).collect();
        out.push('…');
        out
    }
}

fn tail(s: &str, max_chars: usize) -> String {
    let count = s.chars().count();
    if count <= max_chars { s.to_string() } else { s.chars().skip(count - max_chars).collect() }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PYTEST: &str = "\
FF.F                                                                     [100%]
=================================== FAILURES ===================================
E       AssertionError: assert ['a', ' b'] == ['a', 'b']
=========================== short test summary info ============================
FAILED tests/test_cors.py::test_parse - AssertionError: assert ['a', ' b'] == ['a', 'b']
FAILED tests/test_cors.py::test_second_origin
3 failed, 1 passed in 0.06s
";

    #[test]
    fn parses_pytest_output() {
        assert_eq!(summary_line(PYTEST).as_deref(), Some("3 failed, 1 passed in 0.06s"));
        assert_eq!(
            failing_tests(PYTEST),
            vec![
                FailingTest {
                    name: "tests/test_cors.py::test_parse".into(),
                    message: Some("AssertionError: assert ['a', ' b'] == ['a', 'b']".into())
                },
                FailingTest { name: "tests/test_cors.py::test_second_origin".into(), message: None },
            ]
        );
        assert_eq!(
            summary_line("===== 4 passed, 1 warning in 0.17s =====").as_deref(),
            Some("4 passed, 1 warning in 0.17s")
        );
    }

    #[test]
    fn parses_cargo_test_output() {
        let out = "running 2 tests\ntest a::b ... ok\ntest a::c ... FAILED\n\nfailures:\n\n---- a::c stdout ----\n\nthread 'a::c' panicked at src/lib.rs:3:5:\nassertion `left == right` failed\n\ntest result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n";
        assert_eq!(
            summary_line(out).as_deref(),
            Some("test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s")
        );
        assert_eq!(
            failing_tests(out),
            vec![FailingTest { name: "a::c".into(), message: Some("assertion `left == right` failed".into()) }]
        );
    }

    #[test]
    fn outcome_is_deterministic_and_timing_free() {
        assert_eq!(normalized_summary("4 passed in 0.17s"), "4 passed");
        assert_eq!(normalized_summary("4 passed, 1 warning in 12.01s (0:00:12)"), "4 passed, 1 warning");
        assert_eq!(
            normalized_summary("test result: ok. 4 passed; 0 failed; finished in 0.00s"),
            "test result: ok. 4 passed; 0 failed"
        );
        assert_eq!(runner_name("/opt/venv/bin/python -m pytest -q"), "pytest");
        assert_eq!(runner_name("cargo test --release"), "cargo test");
        assert_eq!(runner_name("./run-tests.sh"), "run-tests.sh");
        assert_eq!(runner_name("if true; then echo ok; fi"), "tests");
        assert_eq!(runner_name("cd app && make check; echo done"), "make check");
        assert_eq!(runner_name("SECRET_KEY=abc DEBUG=1 ./t.sh"), "t.sh");
        let run = |summary: &str| TestRun {
            command: "python -m pytest -q".into(),
            exit_code: Some(0),
            timed_out: false,
            duration_ms: 10,
            finished_at: Utc::now(),
            summary: summary.into(),
            failing: vec![],
            output_tail: String::new(),
            failures_reported: false,
        };
        let a = confirmed_outcome(&run("4 passed in 0.17s"), "digest-1");
        assert_eq!(a, confirmed_outcome(&run("4 passed in 0.31s"), "digest-1"));
        assert_ne!(a, confirmed_outcome(&run("4 passed in 0.17s"), "digest-2"));
        assert!(a.starts_with("pytest passed with exit code 0 (4 passed) [receipt "), "{a}");
        assert_eq!(a.len(), "pytest passed with exit code 0 (4 passed) [receipt 3f9a1c2e]".len());
        // a command that printed nothing (`--test-command true`): the exit code is said once
        let silent = TestRun { command: "true".into(), ..run("exit code 0") };
        let outcome = confirmed_outcome(&silent, "digest-1");
        assert!(outcome.starts_with("true passed with exit code 0 [receipt "), "{outcome}");
        assert_eq!(summary_suffix(&silent), "");
        assert_eq!(summary_suffix(&run("4 passed in 0.17s")), ": 4 passed in 0.17s");
    }

    // the test commands below are POSIX shell (`sh -c`)
    #[cfg(unix)]
    #[tokio::test]
    async fn run_reports_exit_code_and_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let ok = run("echo '2 passed in 0.01s'", dir.path(), Duration::from_secs(10)).await.unwrap();
        assert!(ok.passed());
        assert_eq!(ok.summary, "2 passed in 0.01s");
        let failed = run("echo boom; exit 3", dir.path(), Duration::from_secs(10)).await.unwrap();
        assert_eq!(failed.exit_code, Some(3));
        assert_eq!(failed.summary, "boom");
        let slow = run("echo started; sleep 30", dir.path(), Duration::from_millis(300)).await.unwrap();
        assert!(slow.timed_out && !slow.passed());
        assert!(slow.duration_ms < 5_000, "the timeout must stop the run, took {} ms", slow.duration_ms);
        assert_eq!(slow.output_tail.trim(), "started", "output before a timeout is kept");
        for lying in [
            "echo '3 failed, 1 passed in 0.1s'",
            "echo 'Tests: 3 failed, 1 passed'; echo done",
            "echo 'FAILED (failures=1)'; echo done",
            "echo 'FAILED tests/x.py::t - AssertionError'; echo '1 passed in 0.1s'",
        ] {
            let r = run(lying, dir.path(), Duration::from_secs(10)).await.unwrap();
            assert!(!r.passed(), "exit 0 with reported failures is not a pass: {lying}");
        }
        assert!(failing_tests("FAILED (failures=1)").is_empty(), "unittest's tally is not a test name");
        let colored =
            run("printf '\\033[32m2 passed in 0.01s\\033[0m\\n'", dir.path(), Duration::from_secs(10)).await.unwrap();
        assert_eq!(colored.summary, "2 passed in 0.01s", "ANSI colour codes are stripped");
    }

    /// A command that could not run is told apart from tests that failed: exit 127 and 126, a Python
    /// without the runner's module, pytest's usage error and empty collection. An import error inside
    /// the tests, and exit 4 of another runner, are test failures as before.
    #[cfg(unix)]
    #[tokio::test]
    async fn a_command_that_could_not_run_is_told_apart_from_failing_tests() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("plain.sh"), "echo hi\n").unwrap();
        let script = |name: &str, body: &str| {
            use std::os::unix::fs::PermissionsExt;
            let path = dir.path().join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        script("pytest", "echo 'ERROR: file or directory not found: tests/nope.py' >&2; exit 4");
        script("pytest5", "echo 'no tests ran in 0.01s'; exit 5");
        script("other", "exit 4");
        let not_run = |command: &'static str| {
            let dir = dir.path().to_path_buf();
            async move { run(command, &dir, Duration::from_secs(10)).await.unwrap().could_not_run() }
        };
        assert!(not_run("pytset -q").await.unwrap().contains("exit code 127"));
        assert!(not_run("./plain.sh").await.unwrap().contains("exit code 126"));
        let missing = not_run("echo '/opt/venv/bin/python3.12: No module named pytest' >&2; exit 1").await.unwrap();
        assert!(missing.contains("`/opt/venv/bin/python3.12` has no module `pytest`"), "{missing}");
        assert!(not_run("./pytest -q").await.unwrap().contains("pytest refused its command line (exit code 4"));
        let none = not_run("PATH=.:$PATH pytest5 -q");
        assert_eq!(none.await, None, "`pytest5` is not pytest");
        assert_eq!(not_run("./other").await, None, "exit 4 of another runner is a failure");
        let import_error = "echo \"E   ModuleNotFoundError: No module named 'yaml'\"; \
                            echo \"ModuleNotFoundError: No module named 'yaml'\"; echo '1 error in 0.05s'; exit 1";
        assert_eq!(not_run(import_error).await, None, "an import error in the tests is a test failure");
        assert_eq!(not_run("echo '1 failed in 0.01s'; exit 1").await, None);
        let run = run("pytset -q", dir.path(), Duration::from_secs(10)).await.unwrap();
        let why = run.could_not_run().unwrap();
        let message = not_run_message(&run, &why, &crate::memory::project::TestCommand::given("pytset -q"));
        assert!(message.starts_with("run_tests could not run the test command `pytset -q`: the shell did not find"));
        assert!(message.contains("pytset: not found"), "{message}");
        assert!(
            message.contains(
                "Where the command came from: given by --test-command (ASTRA_TEST_COMMAND). Tell the user to fix \
                 --test-command (ASTRA_TEST_COMMAND) and restart the server."
            ),
            "{message}"
        );
        // the source named is the real one: the project file, or detection
        let from_file = crate::memory::project::TestCommand {
            command: "pytset -q".into(),
            source: "from .astra-mcp.toml at the workspace root".into(),
        };
        let message = not_run_message(&run, &why, &from_file);
        assert!(
            message.contains(
                "Where the command came from: from .astra-mcp.toml at the workspace root. Tell the user to fix \
                 `test_command` in .astra-mcp.toml at the workspace root and restart the server."
            ),
            "{message}"
        );
        assert!(!message.contains("ASTRA_TEST_COMMAND"), "{message}");
        let detected = crate::memory::project::TestCommand {
            command: "python3 -m pytest -q".into(),
            source: "detected: conftest.py at the workspace root; `pytest` is not on PATH, so through `python3 -m`"
                .into(),
        };
        let message = not_run_message(&run, &why, &detected);
        let said = "Where the command came from: detected: conftest.py at the workspace root";
        assert!(message.contains(said), "{message}");
        assert!(message.contains("Tell the user to install what it needs"), "{message}");
        assert!(message.contains("or set `test_command = \"...\"` in .astra-mcp.toml"), "{message}");
    }

    /// The padding runners print to fill 200 columns is not kept in the output tail; indentation is.
    #[cfg(unix)]
    #[tokio::test]
    async fn the_output_tail_holds_no_padding() {
        let padded = format!(
            "{eq} FAILURES {eq}\ntests/test_a.py F.{pad}[100%]   \n    assert x == 1\n",
            eq = "=".repeat(95),
            pad = " ".repeat(180)
        );
        assert_eq!(compact_padding(&padded), "===== FAILURES =====\ntests/test_a.py F. [100%]\n    assert x == 1\n");
        // pytest's spaced separator is cut too; the spaces that align its markers are kept
        let traceback = format!(
            "{spaced}\n\n    def mean(xs):\n>       return sum(xs) / len(xs)\n                     ^^^^^^^\n\
             E       ZeroDivisionError: division by zero\ntests/test_b.py ..      [ 50%]\n",
            spaced = ["_"; 100].join(" ")
        );
        assert_eq!(
            compact_padding(&traceback),
            "_ _ _\n\n    def mean(xs):\n>       return sum(xs) / len(xs)\n                     ^^^^^^^\n\
             E       ZeroDivisionError: division by zero\ntests/test_b.py .. [ 50%]\n"
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("out.txt"), &padded).unwrap();
        let r = run("cat out.txt; exit 1", dir.path(), Duration::from_secs(10)).await.unwrap();
        assert!(r.output_tail.lines().all(|l| l.chars().count() <= 40), "{:?}", r.output_tail);
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn background_children_do_not_hold_the_run_open_and_are_killed() {
        let dir = tempfile::tempdir().unwrap();
        let started = std::time::Instant::now();
        let run = run("sleep 30 & echo $! > bg.pid; echo '1 passed in 0.01s'", dir.path(), Duration::from_secs(20))
            .await
            .unwrap();
        assert!(run.passed(), "{run:?}");
        assert!(started.elapsed() < Duration::from_secs(10), "a background child kept the run open");
        let pid: i32 = std::fs::read_to_string(dir.path().join("bg.pid")).unwrap().trim().parse().unwrap();
        std::thread::sleep(Duration::from_millis(200));
        // SAFETY: signal 0 only checks whether the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0 && !is_zombie(pid);
        assert!(!alive, "the background child {pid} outlived the test run");
    }

    #[cfg(target_os = "linux")]
    fn is_zombie(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map(|s| s.contains(") Z ")).unwrap_or(true)
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn output_is_bounded() {
        use tokio::io::AsyncReadExt;
        let mut tail = Tail::collect(Some(tokio::io::repeat(b'x').take(5 * MAX_OUTPUT_BYTES as u64)));
        tail.done().await;
        assert!(tail.bytes.lock().unwrap().len() <= 2 * MAX_OUTPUT_BYTES, "the buffer stays bounded");
        assert_eq!(tail.text().len(), MAX_OUTPUT_BYTES, "the last MAX_OUTPUT_BYTES are kept");
        let dir = tempfile::tempdir().unwrap();
        let run = run(
            "head -c 5000000 /dev/zero | tr '\\0' 'x'; echo; echo '1 failed in 1.00s'; exit 1",
            dir.path(),
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        assert_eq!(run.summary, "1 failed in 1.00s", "the summary at the end survives truncation");
    }
}
