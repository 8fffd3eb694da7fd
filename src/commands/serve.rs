//! `astra-mcp serve`: the MCP server over stdio (answering `initialize` while the store opens) or over
//! HTTP (listening once the store is open).

use std::sync::Arc;

use astra_mcp::app;
use astra_mcp::app::OpenOptions;
use astra_mcp::cli::ServeArgs;
use astra_mcp::config::ServeSettings;
use astra_mcp::transport::{McpServer, Shutdown, http, signal_received, stdio};
use futures::FutureExt;

pub async fn run(args: ServeArgs, open: OpenOptions) -> anyhow::Result<()> {
    astra_mcp::memory::testrun::set_run_limits(astra_mcp::memory::testrun::RunLimits {
        total: args.limits.max_test_runs as usize,
        per_workspace: args.limits.max_test_runs_per_workspace as usize,
    });
    let settings = ServeSettings::resolve(&args, open)?;
    let (hosts, opening) = app::serve(&settings);
    let hosts = Arc::new(hosts);
    // "ready": the store is open and, over HTTP, the listener is bound (a port in use fails before it)
    let ready = {
        let (settings, hosts) = (settings.clone(), hosts.clone());
        move || async move {
            // The default identity's host is made now, so its project label (an existing store may keep
            // the folder's: app::existing_label) is settled once, at start.
            let project = match hosts.host(hosts.default_scope()).await {
                Ok(host) => host.memories().scope.project.clone(),
                Err(_) => settings.fixes.scope.project.clone(),
            };
            tracing::info!(
                db = %settings.store.db,
                actor = %settings.fixes.scope.actor_id,
                project = %project,
                workspace = ?settings.fixes.workspace.as_ref().map(|w| w.root().to_path_buf()),
                "astra-mcp ready"
            );
        }
    };
    let shutdown = Shutdown::new();
    let served = match settings.http.clone() {
        Some(options) => {
            // Nothing listens before the store is open: a client never reaches a server that
            // cannot serve it.
            opening.await.map_err(|e| anyhow::anyhow!("{e:#}"))?;
            http::serve(hosts.clone(), options, shutdown, |bound| {
                // Scripts that pass port 0 read the URL here; stdout is not the protocol over HTTP.
                println!("http://{bound}/mcp");
                tokio::spawn(ready());
            })
            .await
        }
        None => {
            let opened = opening.clone();
            tokio::spawn(async move {
                if opened.await.is_ok() {
                    ready().await;
                }
            });
            // `initialize` is answered while the store opens (issue 7). A store that cannot be
            // opened ends the session (calls in flight get its error as their answer) and then
            // the process, with its error, as it did before the first message.
            let server = McpServer::connection(hosts.clone(), hosts.default_scope().clone());
            let failed = app::store_failure(opening.clone()).map(|_| {
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
    Ok(())
}
