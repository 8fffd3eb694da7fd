//! Where a project is, what it is called and how its tests run, for a server or hook started with no
//! per-project flags (docs/settings.md, "Workspace, project and test command"):
//!
//! - the workspace found from a directory ([`discover`]): the top level of the git work tree around it,
//!   else the directory itself when it looks like a project; never a home directory or `/`;
//! - the project label ([`project_name`]): `project` of the project file, else the git remote's
//!   repository path (`owner/repo`, the same in every clone and worktree: [`remote_label`]), else the
//!   workspace folder's name;
//! - the test command ([`test_command`]): `test_command` of the project file, else one detected from the
//!   files at the workspace root ([`detect_test_command`]).
//!
//! The project file is [`PROJECT_FILE`] at the workspace root. Git is asked through the `git` binary
//! (it knows worktrees, whose `.git` is a file, `includeIf` and `insteadOf`); without git, or outside a
//! work tree, the folder rules apply.

use std::path::{Path, PathBuf};
use std::process::Stdio;

/// The optional project file at the workspace root.
pub const PROJECT_FILE: &str = ".astra-mcp.toml";

/// npm's placeholder `scripts.test` (`npm init`): not a test command.
const NPM_NO_TEST: &str = "no test specified";

/// A project file that cannot be used. The message names the file and says what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ProjectFileError {
    /// The file's path.
    pub path: String,
    pub message: String,
}

/// [`PROJECT_FILE`]: settings that travel with the project (committed, the same for everyone).
///
/// ```toml
/// test_command = "python3 -m pytest -q"  # what run_tests runs at the workspace root
/// project = "acme/web"                    # the project label (default: from the git remote)
/// ```
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectFile {
    pub test_command: Option<String>,
    pub project: Option<String>,
}

impl ProjectFile {
    /// Reads [`PROJECT_FILE`] in `root`; `Ok(None)` when there is none.
    ///
    /// # Errors
    /// An unreadable file, invalid TOML, an unknown key, or an empty value, naming the file.
    pub fn load(root: &Path) -> Result<Option<Self>, ProjectFileError> {
        let path = root.join(PROJECT_FILE);
        let error = |message: String| ProjectFileError { path: path.display().to_string(), message };
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(error(format!("cannot be read: {e}"))),
        };
        let file: Self = toml::from_str(&text).map_err(|e| {
            error(format!(
                "is not valid: {}. It takes `test_command = \"...\"` and `project = \"...\"`, both optional",
                e.message()
            ))
        })?;
        for (key, value) in [("test_command", &file.test_command), ("project", &file.project)] {
            if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
                return Err(error(format!("`{key}` is empty: give a value or leave the key out")));
            }
        }
        Ok(Some(Self {
            test_command: file.test_command.map(|c| c.trim().to_string()),
            project: file.project.map(|p| p.trim().to_string()),
        }))
    }
}

/// The test command `run_tests` runs, and why it is that one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestCommand {
    /// A shell command line, run with `sh -c` at the workspace root.
    pub command: String,
    /// Why this command, for the user: e.g. `detected: Cargo.toml at the workspace root`.
    pub source: String,
}

/// [`TestCommand::source`] of a command given by `--test-command`.
const GIVEN_SOURCE: &str = "given by --test-command (ASTRA_TEST_COMMAND)";
/// The start of [`TestCommand::source`] of a detected command.
const DETECTED_SOURCE: &str = "detected: ";

impl TestCommand {
    /// A command given by `--test-command` / `ASTRA_TEST_COMMAND`.
    pub fn given(command: impl Into<String>) -> Self {
        Self { command: command.into(), source: GIVEN_SOURCE.into() }
    }

    /// What to tell the user to do so that another command runs, by where this one came from: fix the
    /// flag, fix the project file, or (for a detected command) install what it needs or set a
    /// `test_command` of the project's own. Settings are read when the server starts, so each ends with
    /// a restart. An imperative without a subject: `fix --test-command (ASTRA_TEST_COMMAND) and restart
    /// the server`.
    pub fn how_to_change(&self) -> String {
        if self.source == GIVEN_SOURCE {
            "fix --test-command (ASTRA_TEST_COMMAND) and restart the server".to_string()
        } else if self.source.starts_with(DETECTED_SOURCE) {
            format!(
                "install what it needs (e.g. pytest in the project's .venv or on PATH), or set \
                 `test_command = \"...\"` in {PROJECT_FILE} at the workspace root (or pass --test-command), and \
                 restart the server"
            )
        } else {
            format!("fix `test_command` in {PROJECT_FILE} at the workspace root and restart the server")
        }
    }
}

/// A workspace found from a directory, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovered {
    /// The canonical root.
    pub root: PathBuf,
    /// How it was found, for the user: e.g. `the git work tree around the working directory`.
    pub how: &'static str,
}

/// The workspace around `dir` (canonicalized first): the top level of the git work tree `dir` is in,
/// else `dir` itself when it looks like a project (it has [`PROJECT_FILE`] or a detectable test
/// command), else `None`. A home directory or `/` is never a workspace (a home directory kept in git is
/// not a project), so a server started there has none.
pub fn discover(dir: &Path) -> Option<Discovered> {
    let dir = dir.canonicalize().ok()?;
    if is_too_wide(&dir) {
        return None;
    }
    if let Some(top) = git_top_level(&dir).filter(|top| !is_too_wide(top)) {
        return Some(Discovered { root: top, how: "the git work tree around the working directory" });
    }
    let looks_like_a_project = dir.join(PROJECT_FILE).is_file() || detect_test_command(&dir).is_some();
    looks_like_a_project
        .then_some(Discovered { root: dir, how: "the working directory (it has a test setup or .astra-mcp.toml)" })
}

/// `/` or the user's home directory (canonical paths): too wide to be a workspace.
fn is_too_wide(dir: &Path) -> bool {
    dir.parent().is_none() || dirs::home_dir().and_then(|h| h.canonicalize().ok()).is_some_and(|home| home == dir)
}

/// Runs `git` in `dir` with `args`; its trimmed stdout when it succeeds and prints something. The
/// environment's `GIT_DIR` / `GIT_WORK_TREE` are dropped so that `dir` alone decides the repository.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8(output.stdout).ok()?.trim().to_string();
    (output.status.success() && !text.is_empty()).then_some(text)
}

/// The canonical top level of the git work tree `dir` is in (a linked worktree's own top level).
fn git_top_level(dir: &Path) -> Option<PathBuf> {
    PathBuf::from(git(dir, &["rev-parse", "--show-toplevel"])?).canonicalize().ok()
}

/// The URL of the remote `origin` of the repository at `dir`, else of its first remote (in git's
/// order: by name), with the remote's name.
pub fn git_remote(dir: &Path) -> Option<(String, String)> {
    let remotes = git(dir, &["remote"])?;
    let names: Vec<&str> = remotes.lines().map(str::trim).filter(|n| !n.is_empty()).collect();
    let name = names.iter().find(|n| **n == "origin").or(names.first())?.to_string();
    let url = git(dir, &["remote", "get-url", &name])?;
    Some((name, url))
}

/// The project label of a git remote URL: the repository's path on its host, lowercased, without a
/// trailing `.git` or `/`, without the host, user, password or port, so that every form of one remote
/// gives one label: `git@github.com:Owner/Repo.git`, `https://github.com/owner/repo`,
/// `ssh://git@github.com:22/owner/repo.git` and an SSH host alias (`git@work-gh:owner/repo`) are all
/// `owner/repo`; GitLab subgroups keep their path (`group/sub/repo`). A local path or `file://` remote
/// gives its last folder (`/srv/git/repo.git` → `repo`). `None` when no path is left.
pub fn remote_label(url: &str) -> Option<String> {
    let url = url.trim();
    let path = if let Some((scheme, rest)) = url.split_once("://") {
        if scheme.eq_ignore_ascii_case("file") {
            return last_folder(rest);
        }
        // [user[:password]@]host[:port]/path
        let rest = rest.split(['?', '#']).next().unwrap_or("");
        rest.split_once('/').map(|(_, path)| path)?.to_string()
    } else if let Some(path) = scp_like_path(url) {
        path.to_string()
    } else {
        return last_folder(url);
    };
    let label = normalise_path(&path);
    (!label.is_empty()).then_some(label)
}

/// The path of `[user@]host:path`, as git reads it: a colon before any slash, after more than one
/// character (`C:` is a drive).
fn scp_like_path(url: &str) -> Option<&str> {
    let colon = url.find(':')?;
    let slash = url.find('/').unwrap_or(usize::MAX);
    (colon < slash && colon > 1).then(|| &url[colon + 1..])
}

/// A repository path as a label: `~user/` and `/`s trimmed, `.git` dropped, lowercased.
fn normalise_path(path: &str) -> String {
    let path = path.trim_matches('/');
    let path = path.strip_prefix('~').unwrap_or(path);
    let lower = path.to_lowercase();
    let lower = lower.trim_end_matches('/');
    let lower = lower.strip_suffix(".git").unwrap_or(lower);
    lower.trim_matches('/').split('/').filter(|p| !p.is_empty()).collect::<Vec<_>>().join("/")
}

/// The last folder of a local path remote, without `.git`, lowercased.
fn last_folder(path: &str) -> Option<String> {
    let label = normalise_path(path);
    label.rsplit('/').next().filter(|l| !l.is_empty() && *l != "." && *l != "..").map(str::to_string)
}

/// The project label of a workspace, where it came from, and the label an existing store may still use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectName {
    pub label: String,
    /// Why this label, for the user: e.g. `the git remote \`origin\``.
    pub source: String,
    /// The workspace folder's name, when the label came from the git remote and differs from it:
    /// the label earlier versions gave this workspace, which a store that already holds memories
    /// under it (and none under [`Self::label`]) keeps using.
    pub folder_label: Option<String>,
}

/// The project label of the workspace at `root` (canonical): `project` of its project file, else the
/// label of its git remote ([`remote_label`], followed by the workspace's path inside the repository
/// when `root` is below the work tree's top level), else `root`'s folder name.
pub fn project_name(root: &Path, file: Option<&ProjectFile>) -> ProjectName {
    let folder = folder_name(root);
    if let Some(project) = file.and_then(|f| f.project.clone()) {
        return ProjectName { label: project, source: format!("`project` in {PROJECT_FILE}"), folder_label: None };
    }
    let from_remote = git_remote(root).and_then(|(name, url)| {
        let mut label = remote_label(&url)?;
        let top = git_top_level(root)?;
        let inside = root.strip_prefix(&top).ok()?;
        for part in inside.components() {
            label.push('/');
            label.push_str(&part.as_os_str().to_string_lossy());
        }
        Some((label, name))
    });
    match from_remote {
        Some((label, remote)) => ProjectName {
            folder_label: (label != folder).then_some(folder),
            label,
            source: format!("the git remote `{remote}`"),
        },
        None => ProjectName { label: folder, source: "the workspace folder's name".into(), folder_label: None },
    }
}

/// The last component of `root`, the label of a workspace without a remote.
pub fn folder_name(root: &Path) -> String {
    root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "workspace".into())
}

/// The test command of the workspace at `root`: `test_command` of its project file, else
/// [`detect_test_command`].
pub fn test_command(root: &Path, file: Option<&ProjectFile>) -> Option<TestCommand> {
    if let Some(command) = file.and_then(|f| f.test_command.clone()) {
        return Some(TestCommand { command, source: format!("from {PROJECT_FILE} at the workspace root") });
    }
    detect_test_command(root)
}

/// The test command the files at `root` imply, checked in this order (the first that fits wins):
/// pytest (`pytest.ini`, `[tool.pytest.ini_options]` in `pyproject.toml`, `[tool:pytest]` in
/// `setup.cfg`, `[pytest]` in `tox.ini`, `conftest.py`, or `test_*.py` / `*_test.py` in `tests/` or at
/// the root),
/// `cargo test` (`Cargo.toml`), `go test ./...` (`go.mod`), `npm test` (`package.json` with a
/// `scripts.test` other than npm's placeholder), `make test` (a Makefile with a `test` target).
///
/// pytest runs as the project's own virtual environment has it (`.venv/bin/python -m pytest` when
/// `.venv/bin/pytest` exists), else as `pytest` when it is on `PATH`, else as `python3 -m pytest`: a
/// server installed as a uv tool runs in its own environment, which has no pytest, so the project's
/// environment or the user's `PATH` must provide it.
pub fn detect_test_command(root: &Path) -> Option<TestCommand> {
    let detected =
        |command: String, why: String| Some(TestCommand { command, source: format!("{DETECTED_SOURCE}{why}") });
    if let Some(marker) = pytest_marker(root) {
        let (command, runner) = pytest_command(root);
        return detected(command, format!("{marker}; {runner}"));
    }
    if root.join("Cargo.toml").is_file() {
        return detected("cargo test".into(), "Cargo.toml at the workspace root".into());
    }
    if root.join("go.mod").is_file() {
        return detected("go test ./...".into(), "go.mod at the workspace root".into());
    }
    if npm_test_script(root) {
        return detected("npm test".into(), "package.json has a `scripts.test`".into());
    }
    if let Some(makefile) = make_test_target(root) {
        return detected("make test".into(), format!("{makefile} has a `test` target"));
    }
    None
}

/// What says the project uses pytest, for the user; `None` when nothing does.
fn pytest_marker(root: &Path) -> Option<String> {
    let read = |name: &str| std::fs::read_to_string(root.join(name)).ok();
    let has_section = |text: &str, section: &str| text.lines().any(|l| l.trim() == section);
    if root.join("pytest.ini").is_file() {
        return Some("pytest.ini at the workspace root".into());
    }
    if read("pyproject.toml").is_some_and(|t| has_section(t.as_str(), "[tool.pytest.ini_options]")) {
        return Some("pyproject.toml has [tool.pytest.ini_options]".into());
    }
    if read("setup.cfg").is_some_and(|t| has_section(t.as_str(), "[tool:pytest]")) {
        return Some("setup.cfg has [tool:pytest]".into());
    }
    if read("tox.ini").is_some_and(|t| has_section(t.as_str(), "[pytest]")) {
        return Some("tox.ini has [pytest]".into());
    }
    if root.join("conftest.py").is_file() {
        return Some("conftest.py at the workspace root".into());
    }
    let is_test_file = |name: &str| {
        name.ends_with(".py")
            && (name.starts_with("test_") || name.strip_suffix(".py").is_some_and(|s| s.ends_with("_test")))
    };
    let has_test_files = |dir: &Path| {
        std::fs::read_dir(dir).is_ok_and(|entries| {
            entries.filter_map(Result::ok).any(|e| {
                e.file_type().is_ok_and(|t| t.is_file()) && is_test_file(e.file_name().to_string_lossy().as_ref())
            })
        })
    };
    if has_test_files(root.join("tests").as_path()) {
        return Some("test_*.py files in tests/".into());
    }
    has_test_files(root).then(|| "test_*.py files at the workspace root".into())
}

/// How to run pytest here, and why that way.
fn pytest_command(root: &Path) -> (String, String) {
    if root.join(".venv/bin/pytest").is_file() && root.join(".venv/bin/python").exists() {
        return (".venv/bin/python -m pytest -q".into(), "pytest is installed in .venv".into());
    }
    if on_path("pytest") {
        return ("pytest -q".into(), "`pytest` is on PATH".into());
    }
    ("python3 -m pytest -q".into(), "`pytest` is not on PATH, so through `python3 -m`".into())
}

/// Whether an executable file `name` is in a directory of `PATH`.
fn on_path(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|dir| is_executable(&dir.join(name))))
}

#[cfg(unix)]
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(not(unix))]
fn is_executable(path: &Path) -> bool {
    path.is_file() || path.with_extension("exe").is_file()
}

/// `package.json` has a `scripts.test` that is not npm's placeholder.
fn npm_test_script(root: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(root.join("package.json")) else { return false };
    let Ok(json) = serde_json::from_str::<serde_json::Value>(&text) else { return false };
    json.pointer("/scripts/test")
        .and_then(|t| t.as_str())
        .is_some_and(|t| !t.trim().is_empty() && !t.contains(NPM_NO_TEST))
}

/// The Makefile (`GNUmakefile`, `makefile` or `Makefile`, make's order) that has a `test:` target.
fn make_test_target(root: &Path) -> Option<&'static str> {
    let name = ["GNUmakefile", "makefile", "Makefile"].into_iter().find(|n| root.join(n).is_file())?;
    let text = std::fs::read_to_string(root.join(name)).ok()?;
    text.lines()
        .any(|line| {
            // `test:` or `test check:`, not `test := …` (a variable)
            let Some((targets, rest)) = line.split_once(':') else { return false };
            !line.starts_with(['\t', ' ', '#'])
                && !rest.starts_with('=')
                && targets.split_whitespace().any(|t| t == "test")
        })
        .then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_of_one_remote_gives_one_label() {
        for (url, label) in [
            ("git@github.com:Owner/Repo.git", Some("owner/repo")),
            ("git@github.com:owner/repo", Some("owner/repo")),
            ("git@github.com:owner/repo.git/", Some("owner/repo")),
            ("org-123@github.com:Owner/Repo.git", Some("owner/repo")),
            ("git@work-gh:owner/repo.git", Some("owner/repo")),
            ("github.com:owner/repo", Some("owner/repo")),
            ("https://github.com/owner/repo", Some("owner/repo")),
            ("https://github.com/Owner/Repo.GIT", Some("owner/repo")),
            ("https://github.com/owner/repo/", Some("owner/repo")),
            ("https://user:ghp_secret@github.com/owner/repo.git", Some("owner/repo")),
            ("http://github.com:8080/owner/repo.git?ref=x", Some("owner/repo")),
            ("ssh://git@github.com/owner/repo.git", Some("owner/repo")),
            ("ssh://git@github.com:22/owner/repo.git", Some("owner/repo")),
            ("git://github.com/owner/repo", Some("owner/repo")),
            ("git+ssh://git@github.com/owner/repo.git", Some("owner/repo")),
            ("https://gitlab.com/group/sub/repo.git", Some("group/sub/repo")),
            ("ssh://git@host.example/~alice/repo.git", Some("alice/repo")),
            ("file:///srv/git/repo.git", Some("repo")),
            ("/srv/git/Repo.git", Some("repo")),
            ("../repo", Some("repo")),
            ("https://github.com/", None),
            ("https://github.com", None),
            ("git@github.com:", None),
            ("", None),
        ] {
            assert_eq!(remote_label(url).as_deref(), label, "{url}");
        }
    }

    #[test]
    fn no_credential_ever_reaches_a_label() {
        let label = remote_label("https://x-access-token:ghs_0123456789@github.com/acme/web.git").unwrap();
        assert_eq!(label, "acme/web");
    }

    proptest::proptest! {
        /// The scp-like, https and ssh forms of one owner/repo agree, whatever the case and suffixes.
        #[test]
        fn the_forms_of_a_remote_agree(
            owner in "[A-Za-z0-9][A-Za-z0-9_-]{0,15}",
            repo in "[A-Za-z0-9][A-Za-z0-9_.-]{0,15}",
            git in proptest::bool::ANY,
            slash in proptest::bool::ANY,
        ) {
            proptest::prop_assume!(!repo.to_lowercase().ends_with(".git") && !repo.ends_with('.'));
            let suffix = format!("{}{}", if git { ".git" } else { "" }, if slash { "/" } else { "" });
            let expected = format!("{}/{}", owner.to_lowercase(), repo.to_lowercase());
            for url in [
                format!("git@github.com:{owner}/{repo}{suffix}"),
                format!("https://github.com/{owner}/{repo}{suffix}"),
                format!("ssh://git@github.com:22/{owner}/{repo}{suffix}"),
            ] {
                proptest::prop_assert_eq!(remote_label(&url), Some(expected.clone()), "{}", url);
            }
        }
    }

    fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        dir
    }

    fn detected(files: &[(&str, &str)]) -> Option<String> {
        detect_test_command(dir_with(files).path()).map(|c| c.command)
    }

    #[test]
    fn each_detector_and_their_order() {
        let pytest = detected(&[("pytest.ini", "[pytest]\n")]).unwrap();
        assert!(pytest.ends_with("pytest -q"), "{pytest}");
        for files in [
            &[("pyproject.toml", "[project]\nname='x'\n[tool.pytest.ini_options]\naddopts='-q'\n")][..],
            &[("setup.cfg", "[metadata]\n[tool:pytest]\n")],
            &[("tox.ini", "[tox]\n[pytest]\n")],
            &[("conftest.py", "")],
            &[("tests/test_app.py", "def test_x(): pass\n")],
            &[("tests/app_test.py", "def test_x(): pass\n")],
            &[("test_stats.py", "def test_x(): pass\n"), ("stats.py", "")],
            &[("stats_test.py", "def test_x(): pass\n")],
        ] {
            assert_eq!(detected(files).as_deref(), Some(pytest.as_str()), "{files:?}");
        }
        assert_eq!(detected(&[("pyproject.toml", "[project]\nname='x'\n")]), None, "no pytest setup");
        assert_eq!(detected(&[("stats.py", ""), ("testing.py", ""), ("test_data/x.py", "")]), None, "no test file");
        assert_eq!(detected(&[("Cargo.toml", "[package]\n")]).as_deref(), Some("cargo test"));
        assert_eq!(detected(&[("go.mod", "module x\n")]).as_deref(), Some("go test ./..."));
        assert_eq!(detected(&[("package.json", r#"{"scripts": {"test": "jest"}}"#)]).as_deref(), Some("npm test"));
        let stub = r#"{"scripts": {"test": "echo \"Error: no test specified\" && exit 1"}}"#;
        assert_eq!(detected(&[("package.json", stub)]), None, "npm's placeholder is no test command");
        assert_eq!(detected(&[("package.json", r#"{"name": "x"}"#)]), None);
        assert_eq!(detected(&[("Makefile", ".PHONY: test\ntest: build\n\tgo vet\n")]).as_deref(), Some("make test"));
        assert_eq!(detected(&[("Makefile", "TEST := 1\ntest := x\nbuild:\n\ttest -f x\n")]), None);
        // the order: pytest, cargo, go, npm, make
        assert_eq!(
            detected(&[("Cargo.toml", ""), ("go.mod", ""), ("Makefile", "test:\n")]).as_deref(),
            Some("cargo test")
        );
        assert_eq!(detected(&[("conftest.py", ""), ("Cargo.toml", "")]).as_deref(), Some(pytest.as_str()));
        assert_eq!(
            detected(&[("go.mod", ""), ("package.json", r#"{"scripts":{"test":"x"}}"#)]).as_deref(),
            Some("go test ./...")
        );
        assert_eq!(
            detected(&[("package.json", r#"{"scripts":{"test":"x"}}"#), ("Makefile", "test:\n")]).as_deref(),
            Some("npm test")
        );
    }

    /// Test files at the root alone (no tests/, conftest.py or pytest config) are a pytest project, and
    /// the command says so; without pytest on PATH it runs through `python3`, which Debian has (`python`
    /// it may not).
    #[test]
    fn root_level_test_files_are_detected_as_pytest() {
        let dir = dir_with(&[("stats.py", "def mean(xs): return sum(xs) / len(xs)\n"), ("test_stats.py", "")]);
        let found = detect_test_command(dir.path()).unwrap();
        assert!(found.source.starts_with("detected: test_*.py files at the workspace root; "), "{}", found.source);
        assert!(
            found.command == "pytest -q" || found.command == "python3 -m pytest -q",
            "pytest from PATH, else through python3: {}",
            found.command
        );
        assert!(!found.command.starts_with("python "), "{}", found.command);
        assert!(discover(dir.path()).is_some(), "such a folder is a workspace");
    }

    #[test]
    fn pytest_runs_from_the_projects_venv_when_it_has_pytest() {
        let dir = dir_with(&[("conftest.py", ""), (".venv/bin/pytest", ""), (".venv/bin/python", "")]);
        let found = detect_test_command(dir.path()).unwrap();
        assert_eq!(found.command, ".venv/bin/python -m pytest -q");
        assert_eq!(found.source, "detected: conftest.py at the workspace root; pytest is installed in .venv");
    }

    #[test]
    fn the_project_file_wins_over_detection_and_refuses_unknown_keys() {
        let dir = dir_with(&[("Cargo.toml", ""), (PROJECT_FILE, "test_command = \"make check\"\n")]);
        let file = ProjectFile::load(dir.path()).unwrap();
        let chosen = test_command(dir.path(), file.as_ref()).unwrap();
        assert_eq!(
            chosen,
            TestCommand { command: "make check".into(), source: format!("from {PROJECT_FILE} at the workspace root") }
        );
        std::fs::write(dir.path().join(PROJECT_FILE), "test-command = \"make check\"\n").unwrap();
        let err = ProjectFile::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains(PROJECT_FILE) && err.contains("test-command"), "{err}");
        std::fs::write(dir.path().join(PROJECT_FILE), "project = \" \"\n").unwrap();
        let err = ProjectFile::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains("`project` is empty"), "{err}");
        std::fs::remove_file(dir.path().join(PROJECT_FILE)).unwrap();
        assert_eq!(ProjectFile::load(dir.path()).unwrap(), None);
    }

    fn git_in(dir: &Path, args: &[&str]) {
        let status = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env_remove("GIT_DIR")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    }

    #[test]
    fn a_subfolder_of_a_repository_finds_its_top_level_and_remote() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("Web-App");
        std::fs::create_dir_all(repo.join("src/deep")).unwrap();
        git_in(&repo, &["init", "-q"]);
        let found = discover(&repo.join("src/deep")).unwrap();
        assert_eq!(found.root, repo.canonicalize().unwrap());
        let name = project_name(&found.root, None);
        assert_eq!((name.label.as_str(), name.folder_label), ("Web-App", None), "no remote: the folder's name");
        git_in(&repo, &["remote", "add", "upstream", "https://github.com/other/fork.git"]);
        git_in(&repo, &["remote", "add", "origin", "git@github.com:Acme/Web-App.git"]);
        let name = project_name(&found.root, None);
        assert_eq!(name.label, "acme/web-app");
        assert_eq!(name.source, "the git remote `origin`");
        assert_eq!(name.folder_label.as_deref(), Some("Web-App"));
        let below = project_name(&repo.join("src").canonicalize().unwrap(), None);
        assert_eq!(below.label, "acme/web-app/src", "a workspace below the top level keeps its path");
        let file = ProjectFile { project: Some("web".into()), test_command: None };
        assert_eq!(project_name(&found.root, Some(&file)).label, "web");
    }

    #[test]
    fn a_plain_folder_is_a_workspace_only_when_it_looks_like_a_project() {
        let plain = dir_with(&[("notes.txt", "x")]);
        assert_eq!(discover(plain.path()), None);
        let project = dir_with(&[("go.mod", "module x\n")]);
        assert_eq!(discover(project.path()).unwrap().root, project.path().canonicalize().unwrap());
        let configured = dir_with(&[(PROJECT_FILE, "test_command = \"./check\"\n")]);
        assert!(discover(configured.path()).is_some());
        assert_eq!(discover(Path::new("/")), None);
    }
}
