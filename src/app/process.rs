//! What a command-line process of this crate does around its command, for both binaries (`astra-mcp`
//! and the developers' `astra-mcp-dev`): logs on stderr, the async runtime and its shutdown, a quiet end
//! when stdout's reader goes away, and an exit that skips the C and C++ exit handlers.

use std::future::Future;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

/// How long exiting waits for blocking tasks still running once the command has returned.
const RUNTIME_SHUTDOWN: Duration = Duration::from_secs(1);

/// Starts logging to stderr (never stdout: in `serve --stdio` it is the protocol) with the `--log`
/// filter (`crate::cli::log_filter`). A filter that does not parse falls back to `info`, and the first
/// log line says so.
pub fn init_logging(filter: &str) {
    let (env_filter, invalid) = match tracing_subscriber::EnvFilter::try_new(crate::cli::log_filter(filter)) {
        Ok(f) => (f, None),
        Err(e) => (tracing_subscriber::EnvFilter::new("info"), Some(e)),
    };
    tracing_subscriber::fmt()
        .with_env_filter(env_filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    if let Some(e) = invalid {
        tracing::warn!("invalid --log filter `{filter}` ({e}); using `info`");
    }
}

/// Runs `command` to its end on a multi-threaded runtime, then waits for the compactions its writes
/// started ([`super::wait_for_upkeep`]) and gives blocking tasks [`RUNTIME_SHUTDOWN`] to end.
///
/// Why the bounded shutdown: what may still run is the stdio server's stdin read, a blocking read that
/// only the client's EOF ends; after a SIGTERM with the pipe still open, dropping the runtime would wait
/// for it forever.
///
/// # Errors
/// The runtime could not start (the command did not run), or the command's own error.
pub fn run_command(command: impl Future<Output = anyhow::Result<ExitCode>>) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow::anyhow!("cannot start the async runtime: {e}"))?;
    let result = runtime.block_on(async {
        let result = command.await;
        super::wait_for_upkeep().await;
        result
    });
    runtime.shutdown_timeout(RUNTIME_SHUTDOWN);
    result
}

/// A report piped into `head` ends quietly when the pipe closes, as other CLI tools do: `println!` to the
/// closed pipe fails with `EPIPE` and panics, and this hook turns that one panic into exit 0 with no
/// message. SIGPIPE stays ignored (Rust's default) rather than restored to its default action, which
/// would also end the process silently, status 141, when a socket closes under a write: an `https://`
/// endpoint that speaks plain HTTP, say. The server does not install it: a closed stdout is its client
/// going away, handled as EOF.
pub fn quiet_on_closed_stdout() {
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
pub fn exit_now(code: ExitCode) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    let status = if code == ExitCode::SUCCESS { 0 } else { 1 };
    // SAFETY: _exit(2) ends the process; no Rust value is used after it.
    unsafe { libc::_exit(status) }
}

/// A progress bar on stderr when it is a terminal; hidden otherwise (logs and CI stay clean).
pub fn progress_bar(total: u64, unit: &str) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total);
    let template = format!("{{bar:40}} {{pos}}/{{len}} {unit} ({{per_sec}}, eta {{eta}})");
    if let Ok(style) = indicatif::ProgressStyle::with_template(&template) {
        bar.set_style(style);
    }
    bar
}
