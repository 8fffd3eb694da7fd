//! The workspace root: its content digest (the workspace gate of docs/tools.md, "The gates"), per-file hashes for
//! receipts and staleness, the git HEAD, and confinement of tool-supplied paths.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

/// Directory names left out of the digest: what test runners and build tools write as a side effect,
/// so that running the tests twice does not move it (plus VCS metadata). `target` is left out only where
/// it is Cargo's (next to a `Cargo.toml`), `.cache` only inside `node_modules`.
const SIDE_EFFECT_DIRS: &[&str] =
    &[".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis", ".tox"];
/// File suffixes left out of the digest (Python bytecode).
const SIDE_EFFECT_SUFFIXES: &[&str] = &[".pyc", ".pyo"];

/// Why a tool-supplied path was refused. Each message says what a valid path looks like.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("file path is empty: give paths relative to the workspace root, e.g. `src/app.py`")]
    Empty,
    #[error("`{0}` is absolute: give paths relative to the workspace root, e.g. `src/app.py`")]
    Absolute(String),
    #[error("`{0}` contains `..`: paths must stay inside the workspace root")]
    ParentTraversal(String),
    #[error("`{0}` does not exist in the workspace: list only files the fix changed, relative to the workspace root")]
    NotFound(String),
    #[error(
        "`{0}` resolves outside the workspace (through a symlink): only files inside the workspace can be recorded"
    )]
    Escapes(String),
    #[error("`{0}` is not a regular file: list the files the fix changed (not directories, pipes or devices)")]
    NotAFile(String),
}

/// Changed files named in a message before the rest are counted ([`describe_changes`]).
const CHANGES_NAMED: usize = 5;

/// The workspace digest and the workspace-relative paths it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// See [`Workspace::digest`].
    pub digest: String,
    /// Each covered path with what the digest took of it: the SHA-256 (hex) of a file's content, or
    /// `symlink:<target>`.
    pub files: BTreeMap<String, String>,
}

impl Snapshot {
    /// The paths added, removed or changed in `later` against this snapshot, sorted.
    pub fn changed_files(&self, later: &Snapshot) -> Vec<String> {
        changed_files(&self.files, &later.files)
    }
}

/// The paths added, removed or changed between two [`Snapshot::files`] maps, sorted.
pub fn changed_files(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> Vec<String> {
    let mut changed: BTreeSet<&String> =
        after.iter().filter(|(path, hash)| before.get(*path) != Some(*hash)).map(|(path, _)| path).collect();
    changed.extend(before.keys().filter(|path| !after.contains_key(*path)));
    changed.into_iter().cloned().collect()
}

/// The changed files of a workspace-gate message, with what to do when a test writes them itself:
/// `` Changed: `a.log`, `src/x.py` and 3 more. If a test writes a file itself (a log, a cache), add it to
/// .gitignore so that it does not void the pass.`` Empty when no path is known.
pub fn describe_changes(changed: &[String]) -> String {
    if changed.is_empty() {
        return String::new();
    }
    let named: Vec<String> = changed.iter().take(CHANGES_NAMED).map(|p| format!("`{p}`")).collect();
    let more = match changed.len().saturating_sub(CHANGES_NAMED) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    format!(
        "Changed: {}{more}. If a test writes a file itself (a log, a cache), add it to .gitignore so that it does \
         not void the pass.",
        named.join(", ")
    )
}

/// A workspace root, canonicalized at open.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// Opens `root`, which must be an existing directory.
    ///
    /// # Errors
    /// An I/O error naming the path when it does not exist or is not a directory.
    pub fn open(root: &Path) -> std::io::Result<Self> {
        let root = root.canonicalize().map_err(|e| {
            std::io::Error::new(e.kind(), format!("workspace {} is not accessible: {e}", root.display()))
        })?;
        if !root.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotADirectory,
                format!("workspace {} is not a directory", root.display()),
            ));
        }
        Ok(Self { root })
    }

    /// The canonical root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The root folder's name: the default project label.
    pub fn folder_name(&self) -> String {
        self.root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "workspace".into())
    }

    /// SHA-256 (hex) over every regular file and symlink of the workspace (relative path and content, in path order),
    /// respecting `.gitignore` / `.ignore` files and leaving out [`SIDE_EFFECT_DIRS`] and
    /// [`SIDE_EFFECT_SUFFIXES`]. Symlinks are hashed by their target path, not followed.
    ///
    /// # Errors
    /// I/O errors reading the tree.
    pub fn digest(&self) -> std::io::Result<String> {
        Ok(self.snapshot()?.digest)
    }

    /// The digest and the set of files it covers, from one walk of the tree.
    ///
    /// # Errors
    /// I/O errors reading the tree.
    pub fn snapshot(&self) -> std::io::Result<Snapshot> {
        let mut hasher = Sha256::new();
        let mut files = BTreeMap::new();
        for (rel, is_link) in self.covered_files()? {
            let path = self.root.join(&rel);
            hasher.update(rel.as_bytes());
            hasher.update([0]);
            let taken = if is_link {
                format!("symlink:{}", std::fs::read_link(&path)?.to_string_lossy())
            } else {
                hash_file(&path)?
            };
            hasher.update(taken.as_bytes());
            hasher.update([b'\n']);
            files.insert(rel, taken);
        }
        Ok(Snapshot { digest: hex::encode(hasher.finalize()), files })
    }

    /// The workspace-relative paths the digest covers, sorted, each with "is a symlink".
    ///
    /// # Errors
    /// I/O errors walking the tree.
    pub fn covered_files(&self) -> std::io::Result<Vec<(String, bool)>> {
        let mut entries = Vec::new();
        let walker = ignore::WalkBuilder::new(&self.root)
            .hidden(false)
            .git_ignore(true)
            .git_exclude(true)
            .git_global(false)
            .require_git(false)
            .parents(false)
            .follow_links(false)
            .filter_entry(|entry| {
                let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
                !(is_dir && is_side_effect_dir(&entry.file_name().to_string_lossy(), entry.path()))
            })
            .build();
        for entry in walker {
            let entry = entry.map_err(std::io::Error::other)?;
            let Some(file_type) = entry.file_type() else { continue };
            // FIFOs, sockets and devices have no content to hash (and reading a FIFO blocks)
            if !(file_type.is_file() || file_type.is_symlink()) {
                continue;
            }
            let name = entry.file_name().to_string_lossy();
            if SIDE_EFFECT_SUFFIXES.iter().any(|s| name.ends_with(s)) {
                continue;
            }
            let rel = entry.path().strip_prefix(&self.root).unwrap_or(entry.path());
            entries.push((rel.to_string_lossy().into_owned(), file_type.is_symlink()));
        }
        entries.sort();
        Ok(entries)
    }

    /// Checks a tool-supplied path: relative, no `..`, existing, a regular file, and (after resolving
    /// symlinks) inside the root. Returns the normalised relative path (`/`-separated).
    ///
    /// # Errors
    /// The [`PathError`] that says which rule failed.
    pub fn check_relative_file(&self, raw: &str) -> Result<String, PathError> {
        let trimmed = raw.trim();
        if trimmed.is_empty() {
            return Err(PathError::Empty);
        }
        let path = Path::new(trimmed);
        let mut parts = Vec::new();
        for component in path.components() {
            match component {
                Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
                Component::CurDir => {}
                Component::ParentDir => return Err(PathError::ParentTraversal(raw.to_string())),
                Component::RootDir | Component::Prefix(_) => return Err(PathError::Absolute(raw.to_string())),
            }
        }
        if parts.is_empty() {
            return Err(PathError::Empty);
        }
        let rel = parts.join("/");
        let joined = self.root.join(&rel);
        let resolved = joined.canonicalize().map_err(|_| {
            if joined.symlink_metadata().is_ok() {
                PathError::Escapes(raw.to_string()) // a dangling symlink
            } else {
                PathError::NotFound(raw.to_string())
            }
        })?;
        if !resolved.starts_with(&self.root) {
            return Err(PathError::Escapes(raw.to_string()));
        }
        if !resolved.is_file() {
            return Err(PathError::NotAFile(raw.to_string()));
        }
        Ok(rel)
    }

    /// SHA-256 (hex) of each given workspace-relative file; a file that cannot be read maps to `"missing"`.
    pub fn file_hashes(&self, rel_paths: &[String]) -> BTreeMap<String, String> {
        rel_paths
            .iter()
            .map(|rel| {
                let hash = hash_file(&self.root.join(rel)).unwrap_or_else(|_| "missing".to_string());
                (rel.clone(), hash)
            })
            .collect()
    }

    /// `git rev-parse HEAD` in the root, when it is inside a git work tree and git is installed.
    pub async fn git_head(&self) -> Option<String> {
        let output = tokio::process::Command::new("git")
            .args(["rev-parse", "--verify", "-q", "HEAD"])
            .current_dir(&self.root)
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .output()
            .await
            .ok()?;
        let head = String::from_utf8(output.stdout).ok()?.trim().to_string();
        (output.status.success() && !head.is_empty()).then_some(head)
    }
}

/// SHA-256 (hex) of a file's content, streamed (constant memory, whatever the file's size).
fn hash_file(path: &Path) -> std::io::Result<String> {
    let mut hasher = Sha256::new();
    std::io::copy(&mut std::fs::File::open(path)?, &mut hasher)?;
    Ok(hex::encode(hasher.finalize()))
}

fn is_side_effect_dir(name: &str, path: &Path) -> bool {
    let parent = path.parent();
    SIDE_EFFECT_DIRS.contains(&name)
        || (name == "target" && parent.is_some_and(|p| p.join("Cargo.toml").is_file()))
        || (name == ".cache" && parent.and_then(Path::file_name).is_some_and(|n| n == "node_modules"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/app.py"), "x = 1\n").unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        (dir, ws)
    }

    #[test]
    fn digest_moves_with_content_but_not_with_test_side_effects() {
        let (dir, ws) = workspace();
        std::fs::write(dir.path().join("Cargo.toml"), "[package]").unwrap(); // makes target/ Cargo's
        let before = ws.digest().unwrap();
        for side_effect in
            ["__pycache__/app.cpython-311.pyc", ".pytest_cache/v/cache/nodeids", "src/x.pyc", "target/debug/x"]
        {
            let p = dir.path().join(side_effect);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "junk").unwrap();
        }
        assert_eq!(ws.digest().unwrap(), before, "side effects of a test run must not move the digest");
        std::fs::write(dir.path().join("src/app.py"), "x = 2\n").unwrap();
        assert_ne!(ws.digest().unwrap(), before, "an edit must move the digest");
    }

    #[test]
    fn changed_files_are_named_up_to_five_and_the_rest_counted() {
        let (dir, ws) = workspace();
        std::fs::write(dir.path().join("gone.txt"), "x").unwrap();
        let before = ws.snapshot().unwrap();
        std::fs::write(dir.path().join("src/app.py"), "x = 2\n").unwrap();
        std::fs::remove_file(dir.path().join("gone.txt")).unwrap();
        std::fs::write(dir.path().join("new.log"), "x").unwrap();
        let after = ws.snapshot().unwrap();
        assert_eq!(before.changed_files(&after), ["gone.txt", "new.log", "src/app.py"]);
        assert_eq!(after.changed_files(&after), Vec::<String>::new());
        assert_eq!(describe_changes(&[]), "");
        let many: Vec<String> = (1..=7).map(|i| format!("f{i}")).collect();
        assert!(
            describe_changes(&many).starts_with(
                "Changed: `f1`, `f2`, `f3`, `f4`, `f5` and 2 more. If a test writes a file itself (a log, a cache), \
                 add it to .gitignore"
            ),
            "{}",
            describe_changes(&many)
        );
    }

    #[test]
    fn digest_respects_gitignore() {
        let (dir, ws) = workspace();
        std::fs::write(dir.path().join(".gitignore"), "logs/\n").unwrap();
        let before = ws.digest().unwrap();
        std::fs::create_dir_all(dir.path().join("logs")).unwrap();
        std::fs::write(dir.path().join("logs/run.log"), "noise").unwrap();
        assert_eq!(ws.digest().unwrap(), before);
    }

    #[test]
    fn digest_respects_dot_ignore_and_git_info_exclude() {
        let (dir, ws) = workspace();
        std::fs::write(dir.path().join(".ignore"), "scratch/\n").unwrap();
        std::fs::create_dir_all(dir.path().join(".git/info")).unwrap();
        std::fs::write(dir.path().join(".git/info/exclude"), "*.local\n").unwrap();
        let before = ws.digest().unwrap();
        std::fs::create_dir_all(dir.path().join("scratch")).unwrap();
        std::fs::write(dir.path().join("scratch/notes.txt"), "noise").unwrap();
        std::fs::write(dir.path().join("settings.local"), "noise").unwrap();
        assert_eq!(ws.digest().unwrap(), before, "files that .ignore or .git/info/exclude leave out");
        let covered: Vec<String> = ws.covered_files().unwrap().into_iter().map(|(path, _)| path).collect();
        assert!(!covered.iter().any(|p| p.starts_with("scratch/") || p.ends_with(".local")), "{covered:?}");
        std::fs::write(dir.path().join("settings.toml"), "kept").unwrap();
        assert_ne!(ws.digest().unwrap(), before, "a file neither leaves out still counts");
    }

    #[test]
    fn only_cargo_target_dirs_are_left_out() {
        let (dir, ws) = workspace();
        std::fs::create_dir_all(dir.path().join("src/target")).unwrap();
        std::fs::write(dir.path().join("src/target/mod.py"), "a").unwrap();
        let before = ws.digest().unwrap();
        std::fs::write(dir.path().join("src/target/mod.py"), "b").unwrap();
        assert_ne!(ws.digest().unwrap(), before, "a source folder named target is covered");
        std::fs::write(dir.path().join("Cargo.toml"), "[package]").unwrap();
        std::fs::create_dir_all(dir.path().join("target/release")).unwrap();
        let before = ws.digest().unwrap();
        std::fs::write(dir.path().join("target/release/x"), "build output").unwrap();
        assert_eq!(ws.digest().unwrap(), before, "Cargo's target dir is a side effect");
        let covered: Vec<String> = ws.covered_files().unwrap().into_iter().map(|(p, _)| p).collect();
        assert_eq!(covered, ["Cargo.toml", "src/app.py", "src/target/mod.py"]);
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_in_the_workspace_is_skipped_not_read() {
        let (dir, ws) = workspace();
        let before = ws.digest().unwrap();
        let status = std::process::Command::new("mkfifo").arg(dir.path().join("pipe")).status().unwrap();
        assert!(status.success());
        assert_eq!(ws.digest().unwrap(), before, "the digest must not block on, or depend on, a FIFO");
        assert_eq!(ws.check_relative_file("pipe"), Err(PathError::NotAFile("pipe".into())));
    }

    #[cfg(unix)]
    #[test]
    fn hostile_paths_are_refused() {
        let (dir, ws) = workspace();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.txt"), dir.path().join("link.txt")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("linkdir")).unwrap();
        assert_eq!(ws.check_relative_file("src/app.py"), Ok("src/app.py".into()));
        assert_eq!(ws.check_relative_file("./src//app.py"), Ok("src/app.py".into()));
        assert_eq!(ws.check_relative_file(""), Err(PathError::Empty));
        assert_eq!(ws.check_relative_file("/etc/passwd"), Err(PathError::Absolute("/etc/passwd".into())));
        assert_eq!(
            ws.check_relative_file("src/../../etc/passwd"),
            Err(PathError::ParentTraversal("src/../../etc/passwd".into()))
        );
        assert_eq!(ws.check_relative_file("nope.py"), Err(PathError::NotFound("nope.py".into())));
        assert_eq!(ws.check_relative_file("link.txt"), Err(PathError::Escapes("link.txt".into())));
        assert_eq!(ws.check_relative_file("linkdir/secret.txt"), Err(PathError::Escapes("linkdir/secret.txt".into())));
        assert_eq!(ws.check_relative_file("src"), Err(PathError::NotAFile("src".into())));
        assert_eq!(std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(), "s");
    }
}
