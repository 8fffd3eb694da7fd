//! `astra-mcp ui`: the memory browser on a loopback port for the local store (docs/ui.md). It serves
//! the browser alone (no MCP), and prints a URL whose one-time code logs one browser in.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use astra_mcp::app;
use astra_mcp::app::{LanceStore, OpenOptions};
use astra_mcp::cli::{ServeArgs, UiArgs};
use astra_mcp::config::ServeSettings;
use astra_mcp::transport::{Shutdown, http};
use astra_mcp::ui::Access;

pub async fn run(args: UiArgs, open: OpenOptions) -> anyhow::Result<()> {
    let serve = ServeArgs {
        stdio: false,
        http: Some(SocketAddr::from((Ipv4Addr::LOCALHOST, args.port))),
        allow_remote: false,
        config: args.config,
        shutdown_grace: 5,
        // the browser runs no tests and takes no --http: serve's limits keep their defaults
        limits: astra_mcp::cli::LimitArgs::default(),
        store: args.store,
        workspace: args.workspace,
        test_command: None,
        test_timeout: 600,
        tool_timeout: args.tool_timeout,
        trust_client_outcomes: false,
        min_score: astra_mcp::memory::DEFAULT_MIN_SCORE,
        near_duplicate_cosine: astra_mcp::memory::DEFAULT_NEAR_DUPLICATE_COSINE,
    };
    let settings = ServeSettings::resolve(&serve, open)?;
    // a mistyped --db must not open an empty new store that shows no memories
    LanceStore::require_existing(&settings.store.db).await?;
    let mut options = settings.http.clone().expect("--http is set above");
    options.mcp = false;
    let code = Access::new_code();
    options.login_code = Some(code.clone());
    let (hosts, opening) = app::serve(&settings);
    let hosts = Arc::new(hosts);
    opening.await.map_err(|e| anyhow::anyhow!("{e:#}"))?;
    let no_open = args.no_open;
    let served = http::serve(hosts.clone(), options, Shutdown::new(), move |bound| {
        let url = format!("http://{bound}/login?code={code}");
        println!("{url}");
        eprintln!(
            "astra-mcp: the memory browser of actor `{}` is at the URL above (it logs one browser in; Ctrl-C stops it)",
            settings.store.actor_id
        );
        if !no_open
            && has_desktop()
            && let Err(e) = webbrowser::open(&url)
        {
            tracing::info!("could not start a web browser ({e}): open the URL by hand");
        }
    })
    .await;
    hosts.flush().await;
    served
}

/// A desktop a web browser can open on: macOS or Windows, or an X11 or Wayland display.
fn has_desktop() -> bool {
    cfg!(any(target_os = "macos", target_os = "windows"))
        || std::env::var_os("DISPLAY").is_some()
        || std::env::var_os("WAYLAND_DISPLAY").is_some()
}
