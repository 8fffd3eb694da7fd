//! `astra-mcp-dev`: the developers' tools of astra-mcp, apart from the product binary (docs/development.md).
//! Parses its command line, starts logging (stderr only) and runs the command; exit codes as
//! `astra-mcp`'s: 0 success, 1 failure (the error chain on stderr), 2 usage error.

mod bench;
mod cli;
mod eval;
mod schemas;
mod session_demo;
mod settings;

use std::process::ExitCode;

use astra_mcp::app::process;
use clap::Parser;

use cli::{DevCli, DevCommand};

/// jemalloc, as `astra-mcp` (its benchmarks measure the server's allocator).
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = DevCli::parse();
    process::quiet_on_closed_stdout();
    // SAFETY: no other thread exists yet (before logging and the runtime start).
    unsafe { astra_mcp::app::prepare_process() };
    process::init_logging(&cli.global.log);
    let open = cli.global.open_options();
    let done = |()| ExitCode::SUCCESS;
    let result = process::run_command(async move {
        match cli.command {
            DevCommand::Bench { command } => bench::run(command, open).await.map(done),
            DevCommand::Eval { command } => eval::run(command, open).await.map(done),
            DevCommand::SessionDemo(args) => session_demo::run(*args, open).await.map(done),
            DevCommand::Schemas(args) => schemas::run(&args),
            DevCommand::Settings(args) => settings::run(&args),
        }
    });
    let code = result.unwrap_or_else(|e| {
        eprintln!("astra-mcp-dev: {e:#}");
        ExitCode::FAILURE
    });
    process::exit_now(code)
}
