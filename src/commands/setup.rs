//! `astra-mcp setup claude-code|codex`: wires astra-mcp into an agent client for every project, through the
//! client's own plugin mechanism rather than by editing its settings.
//!
//! It writes the plugin marketplace this binary carries (the repository's `.claude-plugin/marketplace.json`
//! and `plugins/astra-mcp/`, compiled in byte for byte) to `<data dir>/astra-mcp/marketplace`, then runs the
//! client's two commands that add that marketplace and install the plugin from it, user-wide. The plugin
//! starts `astra-mcp serve --stdio` and runs `astra-mcp hook <client>`, calling `astra-mcp` by name, so the
//! command must be on `PATH` (`uv tool install astra-mcp` puts it in `~/.local/bin`). The client edits its
//! own settings and undoes them with its own uninstall command. Running it again changes nothing (both
//! clients answer that the marketplace and the plugin are already there); after an upgrade it rewrites the
//! files that changed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;

use astra_mcp::cli::{SetupArgs, SetupClient};

/// The plugin as `<plugin>@<marketplace>`: both are named `astra-mcp` in their manifests.
const PLUGIN: &str = "astra-mcp@astra-mcp";

/// The marketplace's files, relative to its root: the repository's own, compiled in.
const FILES: &[(&str, &str)] = &[
    (".claude-plugin/marketplace.json", include_str!("../../.claude-plugin/marketplace.json")),
    ("plugins/astra-mcp/README.md", include_str!("../../plugins/astra-mcp/README.md")),
    (
        "plugins/astra-mcp/.claude-plugin/plugin.json",
        include_str!("../../plugins/astra-mcp/.claude-plugin/plugin.json"),
    ),
    ("plugins/astra-mcp/.codex-plugin/plugin.json", include_str!("../../plugins/astra-mcp/.codex-plugin/plugin.json")),
    ("plugins/astra-mcp/.mcp.json", include_str!("../../plugins/astra-mcp/.mcp.json")),
    ("plugins/astra-mcp/codex.mcp.json", include_str!("../../plugins/astra-mcp/codex.mcp.json")),
    ("plugins/astra-mcp/hooks/hooks.json", include_str!("../../plugins/astra-mcp/hooks/hooks.json")),
    ("plugins/astra-mcp/hooks/codex.json", include_str!("../../plugins/astra-mcp/hooks/codex.json")),
];

/// What `setup` runs and says for one client.
struct Client {
    /// As the user knows it.
    name: &'static str,
    /// The client's command on `PATH`.
    program: &'static str,
    /// The subcommand that installs a plugin from an added marketplace.
    install: &'static [&'static str],
    /// What the user gets, and what is left to do.
    done: &'static str,
    /// The commands that undo it.
    undo: &'static str,
}

impl Client {
    fn of(client: SetupClient) -> Self {
        match client {
            SetupClient::ClaudeCode => Self {
                name: "Claude Code",
                program: "claude",
                install: &["plugin", "install"],
                done: "Claude Code starts `astra-mcp serve --stdio` (its tools are `mcp__plugin_astra-mcp_astra__*`) \
                       and runs `astra-mcp hook claude-code` in every project, from its next session.",
                undo: "claude plugin uninstall astra-mcp@astra-mcp && claude plugin marketplace remove astra-mcp",
            },
            SetupClient::Codex => Self {
                name: "Codex CLI",
                program: "codex",
                install: &["plugin", "add"],
                done: "Codex starts `astra-mcp serve --stdio` in every project, from its next session. It runs the \
                       hooks (`astra-mcp hook codex`) only once you trust them: start `codex`, open `/hooks` and \
                       trust the astra-mcp entries (until then Codex skips them without a word).",
                undo: "codex plugin remove astra-mcp@astra-mcp && codex plugin marketplace remove astra-mcp",
            },
        }
    }

    /// The client commands, in order: add the marketplace at `dir`, install the plugin from it.
    fn commands(&self, dir: &Path) -> Vec<Vec<String>> {
        let mut add: Vec<String> = vec![self.program.into(), "plugin".into(), "marketplace".into(), "add".into()];
        add.push(dir.to_string_lossy().into_owned());
        let mut install: Vec<String> =
            std::iter::once(self.program).chain(self.install.iter().copied()).map(String::from).collect();
        install.push(PLUGIN.into());
        vec![add, install]
    }
}

/// Where the marketplace is written: `<data dir>/astra-mcp/marketplace` (`~/.local/share/astra-mcp/...`).
/// Claude Code reads a local marketplace's plugin in place, so the directory must stay.
pub fn marketplace_dir() -> PathBuf {
    astra_mcp::config::data_dir().join("marketplace")
}

/// Exit 0 when the plugin is installed (or, with `--dry-run`, when the plan was printed and the client is
/// on `PATH`: without it the plan could not run, so the dry run says so in its first line and exits 1).
///
/// # Errors
/// `astra-mcp` not on `PATH` (the plugin could not start it), the client's command not on `PATH` (both
/// checked before anything is written), a file that cannot be written, or a client command that failed
/// (its own output says why).
pub fn run(args: &SetupArgs) -> anyhow::Result<ExitCode> {
    let client = Client::of(args.client);
    let dir = marketplace_dir();
    let commands = client.commands(&dir);
    let found = on_path("astra-mcp");
    let client_found = on_path(client.program).is_some();
    if args.dry_run {
        if !client_found {
            println!("would fail: {}", client_not_on_path(&client, &commands));
        }
        for (rel, body) in FILES {
            let path = dir.join(rel);
            let state = match std::fs::read_to_string(&path) {
                Ok(old) if old == *body => "unchanged",
                Ok(_) => "changed",
                Err(_) => "new",
            };
            println!("would write {} ({state})", path.display());
        }
        for command in &commands {
            println!("would run: {}", shell_line(command));
        }
        if found.is_none() {
            println!("note: {}", not_on_path());
        }
        return Ok(if client_found { ExitCode::SUCCESS } else { ExitCode::FAILURE });
    }
    let Some(found) = found else { anyhow::bail!(not_on_path()) };
    // before anything is written: a marketplace no client adds is of no use
    anyhow::ensure!(client_found, "{}", client_not_on_path(&client, &commands));
    if let (Ok(found), Ok(this)) = (found.canonicalize(), std::env::current_exe().and_then(|e| e.canonicalize()))
        && found != this
    {
        println!(
            "note: the plugin will run `astra-mcp` from {}, not this binary ({})",
            found.display(),
            this.display()
        );
    }
    let mut written = 0;
    for (rel, body) in FILES {
        let path = dir.join(rel);
        if std::fs::read_to_string(&path).is_ok_and(|old| old == *body) {
            continue;
        }
        let parent = path.parent().expect("a file under the marketplace directory");
        std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        std::fs::write(&path, body).with_context(|| format!("writing {}", path.display()))?;
        written += 1;
    }
    println!("astra-mcp plugin marketplace: {} ({written} of {} files written)", dir.display(), FILES.len());
    for command in &commands {
        let line = shell_line(command);
        println!("+ {line}");
        let status = match std::process::Command::new(&command[0]).args(&command[1..]).status() {
            Ok(status) => status,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                anyhow::bail!("{}", client_not_on_path(&client, &commands))
            }
            Err(e) => return Err(e).with_context(|| format!("running `{line}`")),
        };
        anyhow::ensure!(status.success(), "`{line}` failed ({status}); its output above says why");
    }
    println!("{}", client.done);
    println!("To undo: {}", client.undo);
    Ok(ExitCode::SUCCESS)
}

/// The client's command is not on `PATH`: what to install, and the commands to run by hand instead.
fn client_not_on_path(client: &Client, commands: &[Vec<String>]) -> String {
    format!(
        "`{}` is not on PATH: install {} first, then run `astra-mcp setup` again (or run these commands \
         yourself: {})",
        client.program,
        client.name,
        commands.iter().map(|c| shell_line(c)).collect::<Vec<_>>().join("; ")
    )
}

fn not_on_path() -> String {
    "`astra-mcp` is not on PATH, and the plugin starts it by that name: install it with `uv tool install \
     astra-mcp` (which puts it in ~/.local/bin; `uv tool update-shell` adds that to PATH), or put the directory \
     of this binary on PATH, then run `astra-mcp setup` again"
        .to_string()
}

/// The first executable file named `name` in a directory of `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|file| std::fs::metadata(file).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// `command` as a POSIX shell line: each word that holds anything but `[A-Za-z0-9@%+=:,./_-]` is single-quoted.
fn shell_line(command: &[String]) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "@%+=:,./_-".contains(c);
    command
        .iter()
        .map(|word| {
            if !word.is_empty() && word.chars().all(safe) {
                word.clone()
            } else {
                format!("'{}'", word.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
