//! The `astra-mcp` binary: parse the command line, start logging (stderr only), dispatch.
//!
//! Exit codes: 0 success; 1 failure (the error chain is printed once to stderr, prefixed `astra-mcp:`);
//! 2 command-line usage error (clap).

mod commands;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use astra_mcp::cli::{Cli, Command, DEFAULT_LOG, SmokeCommand};
use astra_mcp::config::{ServeSettings, StoreSettings, store_failure};
use astra_mcp::transport::{McpServer, Shutdown, http, signal_received, stdio};
use clap::Parser;
use futures::FutureExt;

/// How long exiting waits for blocking tasks still running once the command has returned.
const RUNTIME_SHUTDOWN: std::time::Duration = std::time::Duration::from_secs(1);

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(cli.command, Command::Serve(_)) {
        // A report piped into `head` ends quietly when the pipe closes, as other CLI tools do (Rust
        // ignores SIGPIPE, which would turn the closed pipe into a panic in println!). The server keeps
        // the default: a closed stdout is its client going away, handled as EOF.
        // SAFETY: setting a signal disposition before any thread is started.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    // Lance's index statistics (read by upkeep's segment check and `memory stats`) load the vector
    // index's centroids, which nothing here uses, and warn once on every run that this default will
    // change, unless the variable is set. Opt in to the coming default, unless the user set it.
    if std::env::var_os("LANCE_INCLUDE_VECTOR_CENTROIDS").is_none() {
        // SAFETY: no other thread exists yet (before logging and the runtime start).
        unsafe {
            std::env::set_var("LANCE_INCLUDE_VECTOR_CENTROIDS", "false");
        }
    }
    // Lance's io_uring settings, unless the user set them (store::lance::io)
    // SAFETY: no other thread exists yet (before logging and the runtime start).
    unsafe { astra_mcp::store::lance::io::set_uring_defaults() };
    astra_mcp::store::lance::io::set_read_io(cli.lance_io);
    astra_mcp::store::lance::row_cache::set_row_cache_rows(cli.row_cache_rows);
    // A hook reports in one line of its own (Claude Code shows a failing hook's stderr to the user):
    // its logs stay off unless asked for with --log / ASTRA_LOG.
    let hook_quiet = matches!(cli.command, Command::Hook { .. })
        && cli.log == DEFAULT_LOG
        && std::env::var_os(astra_mcp::env_vars::ASTRA_LOG).is_none();
    let log = if hook_quiet { "off" } else { cli.log.as_str() };
    let filter = tracing_subscriber::EnvFilter::try_new(log).unwrap_or_else(|e| {
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
        let result = run(cli.command).await;
        // Compactions started by this process's writes finish before it exits.
        astra_mcp::store::lance::wait_for_upkeep().await;
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

async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Serve(args) => {
            astra_mcp::memory::testrun::set_run_limits(astra_mcp::memory::testrun::RunLimits {
                total: args.limits.max_test_runs as usize,
                per_workspace: args.limits.max_test_runs_per_workspace as usize,
            });
            let settings = ServeSettings::resolve(&args)?;
            let (hosts, opening) = settings.open();
            let hosts = Arc::new(hosts);
            let ready = {
                let (opening, settings) = (opening.clone(), settings.clone());
                async move {
                    if opening.await.is_ok() {
                        tracing::info!(
                            db = %settings.store.db,
                            actor = %settings.fixes.scope.actor_id,
                            project = %settings.fixes.scope.project,
                            workspace = ?settings.fixes.workspace.as_ref().map(|w| w.root().to_path_buf()),
                            "astra-mcp ready"
                        );
                    }
                }
            };
            tokio::spawn(ready);
            let shutdown = Shutdown::new();
            let served = match settings.http.clone() {
                Some(options) => {
                    // Nothing listens before the store is open: a client never reaches a server that
                    // cannot serve it.
                    opening.await.map_err(|e| anyhow::anyhow!("{e:#}"))?;
                    http::serve(hosts.clone(), options, shutdown, |bound| {
                        // Scripts that pass port 0 read the URL here; stdout is not the protocol over HTTP.
                        println!("http://{bound}/mcp");
                    })
                    .await
                }
                None => {
                    // `initialize` is answered while the store opens (issue 7). A store that cannot be
                    // opened ends the session (calls in flight get its error as their answer) and then
                    // the process, with its error, as it did before the first message.
                    let server = McpServer::connection(hosts.clone(), hosts.default_scope().clone());
                    let failed = store_failure(opening.clone()).map(|_| {
                        tracing::info!("the memory store could not be opened: ending the session");
                    });
                    let served = stdio::serve(server, shutdown, settings.shutdown_grace, failed).await;
                    // The store's error also when the session ended before the store was open; a store
                    // still opening (a slow remote URI) is waited for only until the next signal.
                    tokio::select! {
                        opened = opening => { opened.map_err(|e| anyhow::anyhow!("{e:#}"))?; }
                        () = signal_received() => tracing::warn!("signal: exiting before the store was open"),
                    }
                    served
                }
            };
            hosts.flush().await; // recorded tool calls reach the store before we exit
            served?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Smoke { command: SmokeCommand::Store(args) } => {
            let settings = StoreSettings::resolve(&args)?;
            let id = astra_mcp::smoke::store(&settings).await?;
            println!("{id}");
            eprintln!(
                "astra-mcp: smoke fix stored and found in {}; now run `astra-mcp smoke verify --memory-id {id}`",
                settings.db
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Smoke { command: SmokeCommand::Verify { store, memory_id } } => {
            let settings = StoreSettings::resolve(&store)?;
            astra_mcp::smoke::verify(&settings, memory_id).await?;
            println!("ok: {memory_id} persisted across the restart and was deleted");
            Ok(ExitCode::SUCCESS)
        }
        Command::Drive(args) => commands::drive(*args).await.map(|()| ExitCode::SUCCESS),
        Command::SessionDemo(args) => commands::session_demo(*args).await.map(|()| ExitCode::SUCCESS),
        Command::Distill(args) => commands::distill(*args).await.map(|()| ExitCode::SUCCESS),
        Command::Sessions { command } => commands::sessions(command).await.map(|()| ExitCode::SUCCESS),
        Command::Hook { command } => commands::hook(command).await.map(|()| ExitCode::SUCCESS),
        Command::Memory { command } => commands::memory(command).await.map(|()| ExitCode::SUCCESS),
        Command::Core { command } => commands::core(command).await.map(|()| ExitCode::SUCCESS),
        Command::Eval { command } => commands::eval(command).await.map(|()| ExitCode::SUCCESS),
        Command::Bench { command } => commands::bench(command).await.map(|()| ExitCode::SUCCESS),
        Command::Schemas(args) => {
            let mut drift = Vec::new();
            if !args.check {
                std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
            }
            for (name, body) in astra_mcp::schema_files() {
                let path = args.out.join(&name);
                if args.check {
                    if std::fs::read_to_string(&path).ok().as_deref() != Some(body.as_str()) {
                        drift.push(path.display().to_string());
                    }
                } else {
                    std::fs::write(&path, body).with_context(|| format!("writing {}", path.display()))?;
                    println!("wrote {}", path.display());
                }
            }
            if drift.is_empty() {
                Ok(ExitCode::SUCCESS)
            } else {
                eprintln!(
                    "astra-mcp: schema files differ from the code: {}; run `astra-mcp schemas` and commit the result",
                    drift.join(", ")
                );
                Ok(ExitCode::FAILURE)
            }
        }
    }
}
