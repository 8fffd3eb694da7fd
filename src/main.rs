//! The `astra-mcp` binary: parse the command line, start logging (stderr only), dispatch.
//!
//! Exit codes: 0 success; 1 failure (the error chain is printed once to stderr, prefixed `astra-mcp:`);
//! 2 command-line usage error (clap).

mod commands;

use std::process::ExitCode;

use astra_mcp::app::OpenOptions;
use astra_mcp::app::process;
use astra_mcp::cli::{Cli, Command, DEFAULT_LOG};
use clap::Parser;

/// jemalloc, not the system allocator: under a long stream of tool calls glibc's malloc kept the freed
/// memory of LanceDB's short-lived buffers and the server grew by about 23 KB per call with its caches
/// bounded; under jemalloc it stays flat (docs/internals/fuzzing.md). ONNX Runtime, loaded as a shared
/// library, keeps the system allocator.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Whether the command line runs `hook claude-code` or `hook codex`, judged before it is parsed.
fn is_hook_invocation() -> bool {
    let args: Vec<String> = std::env::args().skip(1).collect();
    args.windows(2).any(|w| w[0] == "hook" && matches!(w[1].as_str(), "claude-code" | "codex"))
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let typed: Vec<String> = args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let cli = match Cli::try_parse_from(&args).map_err(|e| astra_mcp::cli::name_the_variable(e, &typed)) {
        Ok(cli) => cli,
        // A hook's bad flag or environment value is a failure of the hook, exit 1: exit 2 would make
        // the agent client block the action the hook runs on (docs/hooks.md). One line: its error and tip.
        Err(e) if e.use_stderr() && is_hook_invocation() => {
            let text = e.to_string();
            let mut lines = text.lines().map(str::trim).filter(|l| l.starts_with("error: ") || l.starts_with("tip: "));
            let first = lines.next().unwrap_or_default().trim_start_matches("error: ").to_string();
            let tips: String = lines.map(|l| format!("; {}", l.trim_start_matches("tip: "))).collect();
            eprintln!("astra-mcp: {first}{tips}");
            return ExitCode::FAILURE;
        }
        Err(e) => e.exit(),
    };
    if !matches!(cli.command, Command::Serve(_)) {
        process::quiet_on_closed_stdout();
    }
    // SAFETY: no other thread exists yet (before logging and the runtime start).
    unsafe { astra_mcp::app::prepare_process() };
    let open = cli.global.open_options();
    // A hook reports in one line of its own (Claude Code shows a failing hook's stderr to the user):
    // its logs stay off unless asked for with --log / ASTRA_LOG.
    let hook_quiet = matches!(cli.command, Command::Hook { .. })
        && cli.global.log == DEFAULT_LOG
        && std::env::var_os(astra_mcp::env_vars::ASTRA_LOG).is_none();
    process::init_logging(if hook_quiet { "off" } else { cli.global.log.as_str() });
    let code = process::run_command(run(cli.command, open)).unwrap_or_else(|e| {
        eprintln!("astra-mcp: {e:#}");
        ExitCode::FAILURE
    });
    process::exit_now(code)
}

/// Runs the subcommand (src/commands/, one module each).
async fn run(command: Command, open: OpenOptions) -> anyhow::Result<ExitCode> {
    let done = |()| ExitCode::SUCCESS;
    match command {
        Command::Serve(args) => commands::serve::run(args, open).await.map(done),
        Command::Smoke { command } => commands::smoke::run(command, open).await.map(done),
        Command::Drive(args) => commands::drive::run(*args, open).await.map(done),
        Command::Distill(args) => commands::distill::run(*args, open).await.map(done),
        Command::Sessions { command } => commands::sessions::run(command, open).await.map(done),
        Command::Hook { command } => commands::hook::run(command, open).await.map(done),
        Command::Ui(args) => commands::ui::run(*args, open).await.map(done),
        Command::Memory { command } => commands::memory::run(command, open).await.map(done),
        Command::Core { command } => commands::core::run(command, open).await.map(done),
        Command::Setup(args) => commands::setup::run(&args),
    }
}
