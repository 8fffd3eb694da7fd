//! `astra-mcp-dev schemas`: writes every tool's schema to a file, or with `--check` fails when the checked-in
//! files differ from the code.

use std::process::ExitCode;

use anyhow::Context;

use crate::cli::SchemasArgs;

pub fn run(args: &SchemasArgs) -> anyhow::Result<ExitCode> {
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
            "astra-mcp-dev: schema files differ from the code: {}; run `astra-mcp-dev schemas` and commit the result",
            drift.join(", ")
        );
        Ok(ExitCode::FAILURE)
    }
}
