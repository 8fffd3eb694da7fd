//! `hook claude-code` / `hook codex`: the work is `astra_mcp::hooks`; this prints its outcome. Context
//! goes to stdout (the client adds it for the model), reports to stderr; an error becomes one line on stderr with
//! exit code 1 (main), never 2, which would block the session.

use std::io::{Read, Write};

use anyhow::Context;

use astra_mcp::app::OpenOptions;
use astra_mcp::cli::HookCommand;

pub async fn run(command: HookCommand, open: OpenOptions) -> anyhow::Result<()> {
    let (HookCommand::ClaudeCode(args) | HookCommand::Codex(args)) = command;
    let mut input = Vec::new();
    std::io::stdin().read_to_end(&mut input).context("reading the hook input from stdin")?;
    let settings = astra_mcp::config::HookSettings::resolve(&args, open).map_err(one_line)?;
    match astra_mcp::hooks::run(&input, &settings).await.map_err(one_line)? {
        astra_mcp::hooks::Outcome::Context { stdout, report } => {
            let mut out = std::io::stdout().lock();
            out.write_all(stdout.as_bytes()).and_then(|()| out.flush()).context("writing the hook output")?;
            eprintln!("astra-mcp: {report}");
        }
        astra_mcp::hooks::Outcome::Imported(report) => eprintln!("astra-mcp: {report}"),
        astra_mcp::hooks::Outcome::Nothing => {}
    }
    Ok(())
}

/// The error chain on one line: Claude Code shows a failing hook's stderr to the user.
fn one_line(e: anyhow::Error) -> anyhow::Error {
    anyhow::anyhow!("{}", format!("{e:#}").split_whitespace().collect::<Vec<_>>().join(" "))
}
