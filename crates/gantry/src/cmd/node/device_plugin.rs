//! `gantry node device-plugin`: CLI wiring for `gantry_node::device_plugin` (flags and env:
//! `gantry_node::device_plugin::args`).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use gantry_node::args::HostPaths;
use gantry_node::device_plugin::args::DevicePluginArgs;
use gantry_node::device_plugin::{self, HealthPolicy};

use gantry_runtime::shutdown::signal as shutdown_signal;

pub fn run(args: DevicePluginArgs) -> anyhow::Result<ExitCode> {
    let mut opts = args.options(&HostPaths::identity())?;
    let backend = match args.gpu.open() {
        Ok(b) => b,
        // FAIL_ON_INIT_ERROR=false: upstream logs the error and idles until stopped.
        Err(e) if !args.fail_on_init_error => {
            tracing::error!("{e}; idling (FAIL_ON_INIT_ERROR=false)");
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(shutdown_signal());
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => anyhow::bail!("{e}"),
    };
    if let Some(secs) = args.health_check {
        return health_check(backend.as_ref(), &opts.health, Duration::from_secs(secs));
    }
    let rt = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    rt.block_on(async move {
        if opts.node_name.is_some() {
            match device_plugin::kube_client().await {
                Ok(client) => opts.kube = Some(client),
                Err(e) => {
                    tracing::warn!("no Kubernetes API access ({e}); node label and events disabled")
                }
            }
        }
        device_plugin::run(opts, backend, shutdown_signal()).await
    })
    .context("gantry node device-plugin")?;
    Ok(ExitCode::SUCCESS)
}

fn health_check(
    backend: &dyn gantry_gpu::Backend,
    policy: &HealthPolicy,
    listen: Duration,
) -> anyhow::Result<ExitCode> {
    let gpus = device_plugin::check::check(backend, policy, listen)
        .context("gantry node device-plugin --health-check: counting GPUs")?;
    println!(
        "health policy: ignored XIDs {:?}, always fatal {:?}, all fatal {}, disabled {}, quiet period {}s",
        policy.ignored,
        policy.fatal,
        policy.all_fatal,
        policy.disabled,
        policy.quiet_period.as_secs()
    );
    for g in &gpus {
        let verdict = if g.healthy { "Healthy" } else { "Unhealthy" };
        println!("gpu {} {}: {verdict} ({})", g.index, g.uuid, g.detail);
    }
    Ok(if gpus.iter().all(|g| g.healthy) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
