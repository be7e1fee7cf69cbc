//! `gantry node discovery`: GPU Feature Discovery labels on the node's own Node object (flags
//! and env: `gantry_node::discovery::args`).

use std::process::ExitCode;

use anyhow::Context;
use gantry_node::args::HostPaths;
use gantry_node::discovery::{self, args::DiscoveryArgs};

pub fn run(args: DiscoveryArgs) -> anyhow::Result<ExitCode> {
    let opts = args.options(&HostPaths::identity())?;
    let backend = args.gpu.open().map_err(anyhow::Error::msg)?;
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
