//! `gantry node discovery`: GPU Feature Discovery labels on the node's own Node object (flags
//! and env: `gantry_node::discovery::args`).

use std::process::ExitCode;

use anyhow::Context;
use gantry_node::args::HostPaths;
use gantry_node::discovery::{self, args::DiscoveryArgs};

pub fn run(args: DiscoveryArgs) -> anyhow::Result<ExitCode> {
    let opts = args.options(&HostPaths::identity())?;
    let backend = match args.gpu.open() {
        Ok(b) => b,
        // GFD_FAIL_ON_INIT_ERROR=false: upstream logs the error and idles until stopped.
        Err(e) if !args.fail_on_init_error && !args.print => {
            tracing::error!("{e}; idling (--fail-on-init-error=false)");
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(gantry_runtime::shutdown::signal());
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => anyhow::bail!("{e}"),
    };
    if args.print {
        let labels = discovery::labels_once(&opts, backend.as_ref())?;
        print!("{}", discovery::render(&labels));
        return Ok(ExitCode::SUCCESS);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let client = discovery::client_from_env().await?;
        discovery::run(opts, backend, client, gantry_runtime::shutdown::signal()).await
    })
    .context("gantry node discovery")?;
    Ok(ExitCode::SUCCESS)
}
