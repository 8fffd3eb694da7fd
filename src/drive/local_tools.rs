//! The runner's local coding tools, confined to the workspace (docs/drive.md): `list_files`,
//! `read_file` and `apply_edit`. Paths are relative to the workspace root; `..`, absolute paths and
//! symlinks that lead outside are refused (the same rules as `store_fix_memory`'s paths).
//! `run_tests` is the registry's own tool.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::memory::workspace::Workspace;
use crate::tools::{JsonObject, schema};

/// Largest file `read_file` returns, in bytes.
pub const MAX_READ_BYTES: usize = 256 * 1024;
/// Most entries `list_files` returns.
pub const MAX_LISTED: usize = 500;

/// `list_files`: the workspace's files (honouring `.gitignore`), optionally under one directory.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListFilesParams {
    /// A directory relative to the workspace root, or null for the whole workspace.
    pub path: Option<String>,
}

/// `read_file`: one file's text.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileParams {
    /// A file relative to the workspace root.
    pub path: String,
}

/// `apply_edit`: replace one exact occurrence of `old_text` with `new_text`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApplyEditParams {
    /// A file relative to the workspace root.
    pub path: String,
    /// Text that occurs exactly once in the file (copy it from read_file, whitespace included).
    pub old_text: String,
    /// Its replacement.
    pub new_text: String,
}

/// A local tool's definition: name, description, strict input schema.
pub struct LocalTool {
    pub name: &'static str,
    pub description: &'static str,
    pub input_schema: JsonObject,
}

/// The local tools, in the order the model sees them.
pub fn local_tools() -> Vec<LocalTool> {
    vec![
        LocalTool {
            name: "list_files",
            description: "List the workspace's files (paths relative to its root; ignored files left out). \
`path`: a directory to list, or null for all.",
            input_schema: schema::input_schema::<ListFilesParams>(),
        },
        LocalTool {
            name: "read_file",
            description: "Read one workspace file (UTF-8 text, up to 256 KiB).",
            input_schema: schema::input_schema::<ReadFileParams>(),
        },
        LocalTool {
            name: "apply_edit",
            description: "Edit one workspace file: replace the one exact occurrence of old_text with new_text. \
Any edit voids the last passing run_tests: run the tests again before store_fix_memory.",
            input_schema: schema::input_schema::<ApplyEditParams>(),
        },
    ]
}

/// What a local tool returns: text for the model, and whether it is an error the model should act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalOutput {
    pub text: String,
    pub is_error: bool,
    /// The call changed a file (so the confirmed outcome is void).
    pub edited: bool,
}

impl LocalOutput {
    fn ok(text: String) -> Self {
        Self { text, is_error: false, edited: false }
    }

    fn error(text: String) -> Self {
        Self { text, is_error: true, edited: false }
    }
}

/// Runs local tool `name`, or `None` when it is not one.
pub fn call(workspace: &Workspace, name: &str, arguments: &Value) -> Option<LocalOutput> {
    let parse_error = |e: serde_json::Error| {
        LocalOutput::error(format!("invalid arguments for {name}: {e}. Check the tool's schema and call it again."))
    };
    Some(match name {
        "list_files" => match serde_json::from_value::<ListFilesParams>(arguments.clone()) {
            Ok(p) => list_files(workspace, p.path.as_deref()),
            Err(e) => parse_error(e),
        },
        "read_file" => match serde_json::from_value::<ReadFileParams>(arguments.clone()) {
            Ok(p) => read_file(workspace, &p.path),
            Err(e) => parse_error(e),
        },
        "apply_edit" => match serde_json::from_value::<ApplyEditParams>(arguments.clone()) {
            Ok(p) => apply_edit(workspace, &p),
            Err(e) => parse_error(e),
        },
        _ => return None,
    })
}

fn list_files(workspace: &Workspace, dir: Option<&str>) -> LocalOutput {
    let prefix = match dir.map(str::trim).filter(|d| !d.is_empty() && *d != ".") {
        None => String::new(),
        Some(d) if d.split('/').any(|part| part == "..") || d.starts_with('/') => {
            return LocalOutput::error(format!("list_files: `{d}` must be relative to the workspace, without `..`"));
        }
        Some(d) => format!("{}/", d.trim_end_matches('/')),
    };
    let files = match workspace.covered_files() {
        Ok(files) => files,
        Err(e) => return LocalOutput::error(format!("list_files: cannot walk the workspace: {e}")),
    };
    let listed: Vec<&str> = files.iter().map(|(p, _)| p.as_str()).filter(|p| p.starts_with(&prefix)).collect();
    if listed.is_empty() {
        return LocalOutput::error(format!("list_files: no files under `{}`", dir.unwrap_or(".")));
    }
    let shown = listed.iter().take(MAX_LISTED).copied().collect::<Vec<_>>().join("\n");
    let more = listed.len().saturating_sub(MAX_LISTED);
    LocalOutput::ok(if more > 0 { format!("{shown}\n… and {more} more: list a subdirectory") } else { shown })
}

fn read_file(workspace: &Workspace, raw: &str) -> LocalOutput {
    let rel = match workspace.check_relative_file(raw) {
        Ok(rel) => rel,
        Err(e) => return LocalOutput::error(format!("read_file: {e}")),
    };
    match std::fs::read(workspace.root().join(&rel)) {
        Ok(bytes) if bytes.len() > MAX_READ_BYTES => LocalOutput::error(format!(
            "read_file: {rel} has {} bytes, over the {MAX_READ_BYTES}-byte limit",
            bytes.len()
        )),
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => LocalOutput::ok(text),
            Err(_) => LocalOutput::error(format!("read_file: {rel} is not UTF-8 text")),
        },
        Err(e) => LocalOutput::error(format!("read_file: cannot read {rel}: {e}")),
    }
}

fn apply_edit(workspace: &Workspace, p: &ApplyEditParams) -> LocalOutput {
    let rel = match workspace.check_relative_file(&p.path) {
        Ok(rel) => rel,
        Err(e) => return LocalOutput::error(format!("apply_edit: {e}")),
    };
    if p.old_text.is_empty() {
        return LocalOutput::error(
            "apply_edit: `old_text` is empty; copy the exact text to replace from read_file".into(),
        );
    }
    let path = workspace.root().join(&rel);
    // An in-place write through a hard link would change a file outside the workspace too.
    if has_other_hard_links(&path) {
        return LocalOutput::error(format!(
            "apply_edit: {rel} has other hard links (possibly outside the workspace); not edited"
        ));
    }
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) => return LocalOutput::error(format!("apply_edit: cannot read {rel} as UTF-8 text: {e}")),
    };
    match text.matches(p.old_text.as_str()).count() {
        0 => LocalOutput::error(format!(
            "apply_edit: `old_text` does not occur in {rel}; read_file it again and copy the text exactly"
        )),
        1 => {
            let edited = text.replacen(p.old_text.as_str(), &p.new_text, 1);
            if let Err(e) = write_edited(&path, &edited) {
                return LocalOutput::error(format!("apply_edit: cannot write {rel}: {e}"));
            }
            LocalOutput { text: format!("edited {rel}: 1 replacement"), is_error: false, edited: true }
        }
        n => LocalOutput::error(format!(
            "apply_edit: `old_text` occurs {n} times in {rel}; include more surrounding lines so it occurs once"
        )),
    }
}

/// Whether the file at `path` has other hard links (its link count is above 1).
#[cfg(unix)]
fn has_other_hard_links(path: &std::path::Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| std::os::unix::fs::MetadataExt::nlink(&m) > 1)
}

/// Windows gives a file's link count only through an API std has not stabilised
/// (`std::os::windows::fs::MetadataExt::number_of_links`); there [`write_edited`] never writes through
/// a link instead.
#[cfg(not(unix))]
fn has_other_hard_links(_path: &std::path::Path) -> bool {
    false
}

/// Writes the edited text in place (a file with other links was refused before).
#[cfg(unix)]
fn write_edited(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    std::fs::write(path, text)
}

/// Writes the edited text to a new file in the same folder and renames it over the old one, so that
/// another hard link of the old file (possibly outside the workspace) keeps the old content.
#[cfg(not(unix))]
fn write_edited(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = tempfile::NamedTempFile::new_in(path.parent().unwrap_or(std::path::Path::new(".")))?;
    file.write_all(text.as_bytes())?;
    file.persist(path).map(drop).map_err(|e| e.error)
}
