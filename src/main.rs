//! The `astra-mcp` binary: parse the command line, start logging (stderr only), dispatch.
//!
//! Exit codes: 0 success; 1 failure (the error chain is printed once to stderr, prefixed `astra-mcp:`);
//! 2 command-line usage error (clap).

mod commands;

use std::io::IsTerminal;
use std::process::ExitCode;

use astra_mcp::app::OpenOptions;
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

/// How long exiting waits for blocking tasks still running once the command has returned.
const RUNTIME_SHUTDOWN: std::time::Duration = std::time::Duration::from_secs(1);

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // A hook's bad flag or environment value is a failure of the hook, exit 1: exit 2 would make
        // the agent client block the action the hook runs on (docs/hooks.md).
        Err(e) if e.use_stderr() && is_hook_invocation() => {
            let text = e.to_string();
            eprintln!("astra-mcp: {}", text.lines().next().unwrap_or_default().trim_start_matches("error: "));
            return ExitCode::FAILURE;
        }
        Err(e) => e.exit(),
    };
    if !matches!(cli.command, Command::Serve(_)) {
        quiet_on_closed_stdout();
    }
    // SAFETY: no other thread exists yet (before logging and the runtime start).
    unsafe { astra_mcp::app::prepare_process() };
    let open = cli.open_options();
    // A hook reports in one line of its own (Claude Code shows a failing hook's stderr to the user):
    // its logs stay off unless asked for with --log / ASTRA_LOG.
    let hook_quiet = matches!(cli.command, Command::Hook { .. })
        && cli.log == DEFAULT_LOG
        && std::env::var_os(astra_mcp::env_vars::ASTRA_LOG).is_none();
    let log = if hook_quiet { "off" } else { cli.log.as_str() };
    let filter = tracing_subscriber::EnvFilter::try_new(astra_mcp::cli::log_filter(log)).unwrap_or_else(|e| {
        eprintln!("astra-mcp: invalid --log filter `{}` ({e}); using `info`", cli.log);
        tracing_subscriber::EnvFilter::new("info")
    });
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("astra-mcp: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let result = run(cli.command, open).await;
        // Compactions started by this process's writes finish before it exits.
        astra_mcp::app::wait_for_upkeep().await;
        result
    });
    // Every write was awaited above. What may still run is the stdio server's stdin read, a blocking
    // read that only the client's EOF ends: after a SIGTERM with the pipe still open, dropping the
    // runtime would wait for it forever.
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN);
    let code = match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("astra-mcp: {e:#}");
            ExitCode::FAILURE
        }
    };
    exit_now(code)
}

/// A report piped into `head` ends quietly when the pipe closes, as other CLI tools do: `println!` to the
/// closed pipe fails with `EPIPE` and panics, and this hook turns that one panic into exit 0 with no
/// message. SIGPIPE stays ignored (Rust's default) rather than restored to its default action, which
/// would also end the process silently, status 141, when a socket closes under a write: an `https://`
/// endpoint that speaks plain HTTP, say. The server does not install it: a closed stdout is its client
/// going away, handled as EOF.
fn quiet_on_closed_stdout() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info.payload_as_str().unwrap_or_default();
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            exit_now(ExitCode::SUCCESS);
        }
        report(info)
    }));
}

/// Ends the process with `code` once stdout and stderr are flushed, without running the C and C++ exit
/// handlers (`_exit(2)`, not `exit(3)`).
///
/// Why: native work can outlive the runtime's shutdown, which waits [`RUNTIME_SHUTDOWN`] for blocking
/// tasks and then leaves them running: the model load a server starts in the background (a session
/// that ends within a second or two of `initialize`), or an embedding abandoned with its call. `exit(3)`
/// then runs ONNX Runtime's static destructors while that thread is inside ONNX Runtime, which crashes
/// the process (SIGSEGV, seen in a core dump: the main thread in `__run_exit_handlers` freeing ONNX
/// Runtime's globals, a blocking-pool thread in `OnnxEmbedder::load` creating its session) or makes the
/// load throw ("Exception during initialization: GetElementType is not implemented"). Nothing is lost:
/// every write was awaited, stdout is flushed here, and the kernel ends the remaining threads at once.
fn exit_now(code: ExitCode) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    let status = if code == ExitCode::SUCCESS { 0 } else { 1 };
    // SAFETY: _exit(2) ends the process; no Rust value is used after it.
    unsafe { libc::_exit(status) }
}

/// Runs the subcommand (src/commands/, one module each).
async fn run(command: Command, open: OpenOptions) -> anyhow::Result<ExitCode> {
    let done = |()| ExitCode::SUCCESS;
    match command {
        Command::Serve(args) => commands::serve::run(args, open).await.map(done),
        Command::Smoke { command } => commands::smoke::run(command, open).await.map(done),
        Command::Drive(args) => commands::drive::run(*args, open).await.map(done),
        Command::SessionDemo(args) => commands::session_demo::run(*args, open).await.map(done),
        Command::Distill(args) => commands::distill::run(*args, open).await.map(done),
        Command::Sessions { command } => commands::sessions::run(command, open).await.map(done),
        Command::Hook { command } => commands::hook::run(command, open).await.map(done),
        Command::Ui(args) => commands::ui::run(*args, open).await.map(done),
        Command::Memory { command } => commands::memory::run(command, open).await.map(done),
        Command::Core { command } => commands::core::run(command, open).await.map(done),
        Command::Eval { command } => commands::eval::run(command, open).await.map(done),
        Command::Bench { command } => commands::bench::run(command, open).await.map(done),
        Command::Schemas(args) => commands::schemas::run(&args),
        Command::Setup(args) => commands::setup::run(&args),
    }
}
