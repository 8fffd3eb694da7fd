//! `astra-mcp smoke`: the operator's check of the store: `smoke store` stores a fix and finds it, then
//! (after a restart) `smoke verify` finds it again and deletes it. The work is `astra_mcp::smoke`.

use astra_mcp::app::OpenOptions;
use astra_mcp::cli::SmokeCommand;
use astra_mcp::config::StoreSettings;

pub async fn run(command: SmokeCommand, open: OpenOptions) -> anyhow::Result<()> {
    match command {
        SmokeCommand::Store(args) => {
            let settings = StoreSettings::resolve(&args, open)?;
            let id = astra_mcp::smoke::store(&settings).await?;
            println!("{id}");
            eprintln!(
                "astra-mcp: smoke fix stored and found in {}; now run `astra-mcp smoke verify --memory-id {id}`",
                settings.db
            );
            Ok(())
        }
        SmokeCommand::Verify { store, memory_id } => {
            let settings = StoreSettings::resolve(&store, open)?;
            astra_mcp::smoke::verify(&settings, memory_id).await?;
            println!("ok: {memory_id} persisted across the restart and was deleted");
            Ok(())
        }
    }
}
