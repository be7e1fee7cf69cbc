//! `gantry node exporter` (dcgm-exporter's metrics) as an [`Agent`].

use std::sync::Arc;
use std::time::Duration;

use super::contract::{Agent, AgentError, Host, Run, Shutdown};
use crate::args::GpuArgs;
use crate::exporter::{self, ExporterError, ExporterOptions, args::ExporterArgs};

/// On a simulated node a scrape refreshes pod attribution older than this (a test reads
/// what it just started), so thousands of simulated nodes do not ask their kubelets every
/// second between scrapes.
pub const SIM_POD_RESOURCES_MAX_AGE: Duration = Duration::from_secs(1);

/// On a simulated node the refresh between scrapes runs at most this often: scrapes read
/// fresh attribution anyway ([`SIM_POD_RESOURCES_MAX_AGE`]), so nothing reads what it
/// refreshes, and each refresh connects to the kubelet anew (`exporter::refresh_pods`). At
/// 5,000 nodes, every 5 s was ~15 s of the kubelet processes' CPU in a 150 s run; every 30 s
/// still ~6 % of their CPU at rest.
pub const SIM_POD_RESOURCES_INTERVAL: Duration = Duration::from_secs(600);

pub struct Exporter;

pub struct Options {
    exporter: ExporterOptions,
    gpu: GpuArgs,
}

impl Agent for Exporter {
    const NAME: &'static str = "exporter";
    const ABOUT: &'static str = "GPU metrics under dcgm-exporter's names and labels, on :9400";
    type Args = ExporterArgs;
    type Options = Options;

    fn normalize(argv: Vec<String>) -> Vec<String> {
        exporter::args::normalize_args(argv)
    }

    fn options(args: ExporterArgs, host: &dyn Host) -> Result<Options, AgentError> {
        for line in args.report() {
            tracing::info!("{line}");
        }
        let mut exporter = args.options(host.paths(), &host.hostname())?;
        if host.simulated() {
            exporter.pod_resources_max_age = Some(SIM_POD_RESOURCES_MAX_AGE);
            exporter.pod_resources_interval = exporter
                .pod_resources_interval
                .max(SIM_POD_RESOURCES_INTERVAL);
        }
        Ok(Options {
            exporter,
            gpu: args.gpu,
        })
    }

    fn run(o: Options, host: Arc<dyn Host>, shutdown: Shutdown) -> Run {
        Box::pin(async move {
            let backend = host.gpus(&o.gpu, "(NVML cannot load for the exporter)")?;
            let address = host.listen_address(o.exporter.address);
            let listener = tokio::net::TcpListener::bind(address)
                .await
                .map_err(|source| ExporterError::Bind { address, source })
                .map_err(AgentError::failed)?;
            let address = listener.local_addr().map_err(AgentError::failed)?;
            // The first sample calls NVML: keep it off the async workers.
            let opts = o.exporter;
            let exp = tokio::task::spawn_blocking(move || exporter::Exporter::start(opts, backend))
                .await
                .map_err(AgentError::failed)?
                .map_err(AgentError::failed)?;
            tracing::info!(%address, "serving GPU metrics");
            host.serving(address).await?;
            exp.serve(listener, shutdown)
                .await
                .map_err(AgentError::failed)
        })
    }
}
