//! `astra-mcp-dev settings`: writes docs/settings.md, or with `--check` fails when the checked-in page
//! differs from what it would write (as `schemas` does for the tool schemas).
//!
//! The page is `dev/settings.template.md` (the prose: precedence, the workspace rules, the config file,
//! exit codes) with its directive lines replaced by tables built from `astra-mcp`'s clap definitions
//! (`Cli::command()`: each flag's name, value name, environment variable, default, and help text, the long
//! one where set, grouped by the help headings `--help` shows) and from `env_vars::ALL`. So a flag's
//! `--help` and its row on the page say the same thing, and a flag cannot be missing from the page: the
//! render fails when a flag of any command has no place in it.
//!
//! Written here rather than with `clap-markdown` (0.1.5): that crate writes a whole page of its own, one
//! section per command, with no environment variables and no help headings, and repeats every flattened
//! argument struct (the store settings) in each of the ~20 commands that take it.
//!
//! The template's directives, each alone on its line:
//! - `{{global}}`: the global flags (the `GlobalArgs` every command takes);
//! - `{{group Name}}`: the flags of the `#[derive(Args)]` struct `Name` (clap derive makes each such struct
//!   an argument group of that name), with the commands that take them; elsewhere those flags are left
//!   out of a command's table, which links to this section instead (named by the heading above it);
//! - `{{args a b; c d}}`: the flags of command `a b` (its own, without groups rendered elsewhere); the
//!   commands after `;` must take the very same flags, and are covered by the same table;
//! - `{{commands}}`: every command no `{{args}}` names, in the order `astra-mcp --help` lists them;
//! - `{{env-without-flag}}`: the variables of `env_vars::ALL` that no flag reads, with their doc comments.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::{Context, bail, ensure};
use astra_mcp::cli::Cli;
use astra_mcp::env_vars;
use clap::{Arg, ArgAction, Command, CommandFactory};

use crate::cli::SettingsArgs;

/// The page's prose, with the directives the tables replace.
const TEMPLATE: &str = include_str!("../settings.template.md");

pub fn run(args: &SettingsArgs) -> anyhow::Result<ExitCode> {
    let page = render(TEMPLATE, &Cli::command())?;
    if !args.check {
        std::fs::write(&args.out, &page).with_context(|| format!("writing {}", args.out.display()))?;
        println!("wrote {}", args.out.display());
        return Ok(ExitCode::SUCCESS);
    }
    if std::fs::read_to_string(&args.out).ok().as_deref() == Some(page.as_str()) {
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!(
        "astra-mcp-dev: {} differs from what src/cli.rs, src/env_vars.rs and dev/settings.template.md make of it; \
         run `astra-mcp-dev settings` and commit the result",
        args.out.display()
    );
    Ok(ExitCode::FAILURE)
}

/// A `{{group Name}}` of the template: the section its flags are listed in.
struct Shared {
    group: String,
    /// The heading above the directive, as written (`Store settings`), and its anchor (`store-settings`).
    heading: String,
    anchor: String,
}

/// The page being rendered: what the template says goes where, and which flags have been listed.
struct Page<'a> {
    cli: &'a Command,
    shared: Vec<Shared>,
    /// The commands `{{args}}` directives name, each as its path (`distill status`).
    named: HashSet<String>,
    /// Every `(command path, argument id)` listed so far; the global flags under the path "".
    listed: HashSet<(String, String)>,
}

/// The page: `template` with each directive line replaced by what it names. Fails on an unknown directive,
/// on a command the template names that `cli` lacks, and when a flag of `cli` is listed nowhere.
fn render(template: &str, cli: &Command) -> anyhow::Result<String> {
    let mut page = Page { cli, shared: Vec::new(), named: HashSet::new(), listed: HashSet::new() };
    let mut heading = "";
    let mut fenced = false;
    for line in template.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if line.starts_with('#') && !fenced {
            heading = line.trim_start_matches('#').trim();
        } else if let Some(directive) = directive(line) {
            match directive.split_once(' ') {
                Some(("group", group)) => page.shared.push(Shared {
                    group: group.trim().to_string(),
                    heading: heading.to_string(),
                    anchor: anchor(heading),
                }),
                Some(("args", paths)) => page.named.extend(paths.split(';').map(|p| p.trim().to_string())),
                _ => {}
            }
        } else {
            ensure!(!line.contains("{{"), "dev/settings.template.md has `{{{{` outside a directive line: {line}");
        }
    }
    let mut out = String::new();
    for line in template.lines() {
        match directive(line) {
            Some(directive) => out.push_str(page.directive(directive)?.trim_end()),
            None => out.push_str(line),
        }
        out.push('\n');
    }
    page.check_every_flag_is_listed()?;
    Ok(out)
}

/// The directive a line of the template is (`{{args serve}}` gives `args serve`), if it is one.
fn directive(line: &str) -> Option<&str> {
    line.trim().strip_prefix("{{")?.strip_suffix("}}").map(str::trim)
}

impl<'a> Page<'a> {
    fn directive(&mut self, directive: &str) -> anyhow::Result<String> {
        let (verb, rest) = directive.split_once(' ').map_or((directive, ""), |(v, r)| (v, r.trim()));
        match verb {
            "global" => {
                let global: Vec<&Arg> = flags(self.cli).filter(|a| a.is_global_set()).collect();
                ensure!(!global.is_empty(), "astra-mcp has no global flags for {{{{global}}}}");
                self.listed.extend(global.iter().map(|a| (String::new(), a.get_id().to_string())));
                Ok(table(&global))
            }
            "group" => self.group(rest),
            "args" => {
                let paths: Vec<&str> = rest.split(';').map(str::trim).collect();
                let first = self.find(paths[0])?;
                let ids = |cmd: &Command| flags(cmd).map(|a| a.get_id().to_string()).collect::<Vec<_>>();
                let mut out = String::new();
                self.command_args(paths[0], first, &mut out);
                for path in &paths[1..] {
                    let cmd = self.find(path)?;
                    ensure!(
                        ids(cmd) == ids(first),
                        "`{path}` and `{}` take different flags: give each its own {{{{args}}}}",
                        paths[0]
                    );
                    self.list(path, &self.split(cmd).0);
                }
                Ok(out)
            }
            "commands" => {
                let mut out = String::new();
                for cmd in self.cli.get_subcommands() {
                    self.command_tree(cmd, cmd.get_name().to_string(), 3, &mut out);
                }
                Ok(out)
            }
            "env-without-flag" => Ok(self.env_without_flag()),
            _ => bail!("unknown directive in dev/settings.template.md: {{{{{directive}}}}}"),
        }
    }

    /// `{{group Name}}`: the commands that take the group, and its flags (from the first of them).
    fn group(&self, group: &str) -> anyhow::Result<String> {
        let mut takers = Vec::new();
        let mut members: Option<Vec<&Arg>> = None;
        for top in self.cli.get_subcommands() {
            let mut takes = false;
            walk(top, top.get_name().to_string(), &mut |cmd, _| {
                if let Some(g) = cmd.get_groups().find(|g| g.get_id() == group && g.get_args().next().is_some()) {
                    takes = true;
                    let ids: Vec<&clap::Id> = g.get_args().collect();
                    members.get_or_insert_with(|| flags(cmd).filter(|a| ids.contains(&a.get_id())).collect());
                }
            });
            if takes {
                takers.push(format!("`{}`", top.get_name()));
            }
        }
        let members = members.with_context(|| {
            format!("no command of astra-mcp takes the flags of `{group}` (the template's {{{{group {group}}}}})")
        })?;
        Ok(format!("Taken by {}.\n\n{}", takers.join(", "), table(&members)))
    }

    /// The command at `path` (`distill status`).
    fn find(&self, path: &str) -> anyhow::Result<&'a Command> {
        let mut cmd = self.cli;
        for name in path.split_whitespace() {
            cmd = cmd.find_subcommand(name).with_context(|| format!("astra-mcp has no command `{path}`"))?;
        }
        Ok(cmd)
    }

    /// Records `args` of the command at `path` as listed.
    fn list(&mut self, path: &str, args: &[&Arg]) {
        self.listed.extend(args.iter().map(|a| (path.to_string(), a.get_id().to_string())));
    }

    /// The flags of `cmd` (at `path`) outside the template's groups, as a table, then links to the
    /// sections of the groups it takes.
    fn command_args(&mut self, path: &str, cmd: &Command, out: &mut String) {
        let (own, groups) = self.split(cmd);
        self.list(path, &own);
        if !own.is_empty() {
            out.push_str(&table(&own));
        }
        if !groups.is_empty() {
            let _ = writeln!(out, "Also takes: {}.\n", groups.join(", "));
        }
    }

    /// `cmd`'s arguments outside the template's groups, and a link to the section of each group it takes.
    fn split<'c>(&self, cmd: &'c Command) -> (Vec<&'c Arg>, Vec<String>) {
        let mut grouped: Vec<&clap::Id> = Vec::new();
        let mut links = Vec::new();
        for shared in &self.shared {
            if let Some(g) =
                cmd.get_groups().find(|g| g.get_id() == shared.group.as_str() && g.get_args().next().is_some())
            {
                grouped.extend(g.get_args());
                links.push(format!("[{}](#{})", markdown(&shared.heading, false), shared.anchor));
            }
        }
        (flags(cmd).filter(|a| !grouped.contains(&a.get_id())).collect(), links)
    }

    /// Whether the command needs a table of its own: it runs (no subcommands), or has flags of its own.
    fn needs_place(&self, cmd: &Command) -> bool {
        !cmd.has_subcommands() || !self.split(cmd).0.is_empty()
    }

    /// `{{commands}}`: `cmd` (at `path`) and the commands below it that no `{{args}}` names, each under a
    /// heading of `level` (`###`), its subcommands one level down.
    fn command_tree(&mut self, cmd: &Command, path: String, level: usize, out: &mut String) {
        let mut unnamed = false;
        walk(cmd, path.clone(), &mut |c, p| unnamed |= self.needs_place(c) && !self.named.contains(&p));
        if !unnamed {
            return;
        }
        if !self.named.contains(&path) {
            let _ = writeln!(out, "{} `{path}`\n", "#".repeat(level));
            if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
                let _ = writeln!(out, "{}\n", markdown(&sentence(&about.to_string()), false));
            }
            if self.needs_place(cmd) {
                self.command_args(&path, cmd, out);
            }
        }
        for sub in cmd.get_subcommands() {
            self.command_tree(sub, format!("{path} {}", sub.get_name()), level + 1, out);
        }
    }

    /// The variables of `env_vars::ALL` that no flag of any command reads, with their doc comments.
    fn env_without_flag(&self) -> String {
        let mut read = HashSet::new();
        walk(self.cli, String::new(), &mut |cmd, _| {
            read.extend(cmd.get_arguments().filter_map(|a| a.get_env()).map(|e| e.to_string_lossy().into_owned()));
        });
        let mut out = String::from("| variable | meaning |\n| --- | --- |\n");
        for (name, doc) in env_vars::ALL.iter().filter(|(name, _)| !read.contains(*name)) {
            let _ = writeln!(out, "| `{name}` | {} |", markdown(&paragraphs(doc), true));
        }
        out
    }

    /// Fails when a flag of some command is in no table: a command the template has no place for.
    fn check_every_flag_is_listed(&self) -> anyhow::Result<()> {
        let mut missing = Vec::new();
        walk(self.cli, String::new(), &mut |cmd, path| {
            let (own, _) = self.split(cmd);
            missing.extend(
                own.iter()
                    .filter(|a| !self.listed.contains(&(path.clone(), a.get_id().to_string())))
                    .map(|a| format!("{path} --{}", a.get_long().unwrap_or(a.get_id().as_str()))),
            );
        });
        ensure!(
            missing.is_empty(),
            "dev/settings.template.md lists these flags nowhere (it needs {{{{global}}}}, and {{{{commands}}}} or \
             an {{{{args}}}} naming their command): {}",
            missing.join(", ")
        );
        Ok(())
    }
}

/// Calls `f` with `cmd` and every command below it, each with its path (`memory list`; `cmd`'s is `path`).
fn walk<'c>(cmd: &'c Command, path: String, f: &mut dyn FnMut(&'c Command, String)) {
    f(cmd, path.clone());
    for sub in cmd.get_subcommands() {
        let sub_path = if path.is_empty() { sub.get_name().to_string() } else { format!("{path} {}", sub.get_name()) };
        walk(sub, sub_path, f);
    }
}

/// The arguments of `cmd` the page lists: all but `--help` and `--version`, and hidden ones.
fn flags(cmd: &Command) -> impl Iterator<Item = &Arg> {
    cmd.get_arguments().filter(|a| {
        !a.is_hide_set()
            && !matches!(
                a.get_action(),
                ArgAction::Help | ArgAction::HelpShort | ArgAction::HelpLong | ArgAction::Version
            )
    })
}

/// `args` as tables, one per help heading in the order `--help` shows them (flags without one first, then
/// each heading under its name).
fn table(args: &[&Arg]) -> String {
    let mut headings: Vec<Option<&str>> = vec![None];
    for arg in args {
        if !headings.contains(&arg.get_help_heading()) {
            headings.push(arg.get_help_heading());
        }
    }
    let mut out = String::new();
    for heading in headings {
        let rows: Vec<&&Arg> = args.iter().filter(|a| a.get_help_heading() == heading).collect();
        if rows.is_empty() {
            continue;
        }
        if let Some(heading) = heading {
            let _ = writeln!(out, "**{}**\n", markdown(heading, false));
        }
        out.push_str("| flag | env | default | meaning |\n| --- | --- | --- | --- |\n");
        for arg in rows {
            let env = arg.get_env().map(|e| format!("`{}`", e.to_string_lossy())).unwrap_or_default();
            let _ = writeln!(out, "| `{}` | {env} | {} | {} |", usage(arg), default(arg), meaning(arg));
        }
        out.push('\n');
    }
    out
}

/// How the argument is typed: `--db PATH`, `-o, --out FILE`, `--prompt-search [BOOL]`, `[SECTION]`, `ID...`.
fn usage(arg: &Arg) -> String {
    let value = arg
        .get_value_names()
        .and_then(|names| names.first())
        .map(|name| name.to_string())
        .unwrap_or_else(|| arg.get_id().as_str().to_ascii_uppercase());
    let many = matches!(arg.get_action(), ArgAction::Append) || arg.get_num_args().is_some_and(|n| n.max_values() > 1);
    let value = if many { format!("{value}...") } else { value };
    if arg.is_positional() {
        return if arg.is_required_set() { value } else { format!("[{value}]") };
    }
    let mut out = match arg.get_short() {
        Some(short) => format!("-{short}, "),
        None => String::new(),
    };
    out.push_str(&format!("--{}", arg.get_long().unwrap_or(arg.get_id().as_str())));
    if arg.get_action().takes_values() {
        let optional = arg.get_num_args().is_some_and(|n| n.min_values() == 0);
        out.push_str(&if optional { format!(" [{value}]") } else { format!(" {value}") });
    }
    out.replace('|', "\\|")
}

/// The default column: clap's default value, `on` / `off` for a flag without a value, `required`.
fn default(arg: &Arg) -> String {
    if arg.is_required_set() && !arg.is_positional() {
        return "required".to_string();
    }
    let values: Vec<String> = arg.get_default_values().iter().map(|v| v.to_string_lossy().into_owned()).collect();
    match (arg.get_action().takes_values(), values.as_slice()) {
        // clap gives a flag its implicit default only when the command is built
        (false, []) if matches!(arg.get_action(), ArgAction::SetTrue) => "off".to_string(),
        (false, []) if matches!(arg.get_action(), ArgAction::SetFalse) => "on".to_string(),
        (_, []) => String::new(),
        (false, [v]) if v == "true" => "on".to_string(),
        (false, [v]) if v == "false" => "off".to_string(),
        (_, values) => values.iter().map(|v| format!("`{}`", v.replace('|', "\\|"))).collect::<Vec<_>>().join(", "),
    }
}

/// The meaning column: the long help where set (`--help`), else the short one, then the values and their
/// help as `--help` lists them.
fn meaning(arg: &Arg) -> String {
    let mut text = match (arg.get_long_help(), arg.get_help()) {
        (Some(long), _) => long.to_string(),
        (None, Some(short)) => sentence(&short.to_string()),
        (None, None) => String::new(),
    };
    let values: Vec<_> = arg.get_possible_values().into_iter().filter(|v| !v.is_hide_set()).collect();
    if arg.get_action().takes_values() && !values.is_empty() {
        let described: Vec<String> = values
            .iter()
            .map(|v| match v.get_help() {
                Some(help) => format!("`{}`: {}", v.get_name(), sentence(&help.to_string())),
                None => format!("`{}`", v.get_name()),
            })
            .collect();
        if values.iter().any(|v| v.get_help().is_some()) {
            text.push_str(&format!("\n\n{}", described.join("\n\n")));
        } else {
            text.push_str(&format!(" Values: {}.", described.join(", ")));
        }
    }
    markdown(text.trim(), true)
}

/// A doc comment as `env_vars::ALL` holds it (one line per `///` line) as text: each paragraph's lines
/// joined with spaces, paragraphs apart with a blank line.
fn paragraphs(doc: &str) -> String {
    let lines: Vec<&str> = doc.lines().map(str::trim).collect();
    lines.split(|l| l.is_empty()).filter(|p| !p.is_empty()).map(|p| p.join(" ")).collect::<Vec<_>>().join("\n\n")
}

/// `text` with the period clap derive drops from a short help (the first paragraph of a doc comment) put
/// back.
fn sentence(text: &str) -> String {
    let text = text.trim();
    if text.is_empty() || text.ends_with(['.', '!', '?', ':']) { text.to_string() } else { format!("{text}.") }
}

/// Help text as Markdown: outside code spans a `<` is escaped (`<data dir>` is text, not a tag) and a
/// page of docs/ becomes a link to it (`docs/storage.md, "How the store reads its files"` links to that
/// heading's anchor; `docs/settings.md, "…"` to the heading on this page). In a table cell (`cell`), paragraphs
/// are kept apart with `<br><br>` and `|` is escaped.
fn markdown(text: &str, cell: bool) -> String {
    let mut out = String::new();
    let mut code = false;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if !code && rest.starts_with("docs/") && !out.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '/') {
            let path_len =
                rest.find(|c: char| !(c.is_ascii_alphanumeric() || "/._-".contains(c))).unwrap_or(rest.len());
            let path = rest["docs/".len()..path_len].trim_end_matches('.');
            if path.ends_with(".md") {
                let after = &rest["docs/".len() + path.len()..];
                let title = after.strip_prefix(", \"").and_then(|t| t.find('"').map(|end| &t[..end]));
                match (title, path) {
                    (Some(title), "settings.md") => {
                        let _ = write!(out, "[{title}](#{})", anchor(title));
                    }
                    (Some(title), _) => {
                        let _ = write!(out, "[{path}, \"{title}\"]({path}#{})", anchor(title));
                    }
                    (None, _) => {
                        let _ = write!(out, "[{path}]({path})");
                    }
                }
                let used = "docs/".len() + path.len() + title.map_or(0, |t| ", \"".len() + t.len() + 1);
                rest = &rest[used..];
                continue;
            }
        }
        match c {
            '`' => code = !code,
            '<' if !code => {
                out.push_str("&lt;");
                rest = &rest[1..];
                continue;
            }
            '|' if cell => out.push('\\'),
            '\n' if cell => {
                out.push_str(if rest.starts_with("\n\n") { "<br><br>" } else { " " });
                rest = rest.trim_start_matches('\n');
                continue;
            }
            _ => {}
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// GitHub's anchor of a heading: lowercased, punctuation dropped, spaces as hyphens.
fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}
