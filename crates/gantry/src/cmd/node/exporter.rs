//! `gantry node exporter`: dcgm-exporter-compatible GPU metrics on :9400 (flags and env:
//! `gantry_node::exporter::args`).

use std::process::ExitCode;

use anyhow::Context;
use gantry_node::args::HostPaths;
use gantry_node::exporter::{self, args::ExporterArgs};

pub fn run(args: ExporterArgs) -> anyhow::Result<ExitCode> {
    for line in args.report() {
        tracing::info!("{line}");
    }
    let opts = args
        .options(&HostPaths::identity(), &exporter::hostname_from_env())
        .map_err(anyhow::Error::msg)?;
    let backend = args.gpu.open().map_err(anyhow::Error::msg)?;
    // One thread serves; sampling has its own thread, so a scrape never waits on NVML.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(exporter::run(
        opts,
        backend,
        gantry_runtime::shutdown::signal(),
    ))
    .context("gantry node exporter")?;
    Ok(ExitCode::SUCCESS)
}
