//! The in-process runners for the node agents that exist, and the default registry.
//! Each runner parses the container's command line with the agent's own flag type
//! (`gantry_node::<agent>::args`, the type `gantry node <agent>` parses), converts it to the
//! agent's options with the node's paths, and runs it against the node's SimBackend until the
//! pod stops. What the sim sets on top is the node itself: its API client, and poll periods
//! that keep a thousand simulated nodes cheap.

use std::sync::Arc;
use std::time::Duration;

use gantry_gpu::Backend;
use gantry_node::device_plugin::{self, args::DevicePluginArgs};
use gantry_node::discovery::{self, DiscoveryOptions, args::DiscoveryArgs};
use gantry_node::mig::{self, args::MigManagerArgs};

use super::agents::{AgentContext, AgentExit, AgentFuture, AgentRegistry};

/// How often the in-process device plugin re-checks its sockets and inventory. Slower than
/// the agent's default so a thousand simulated nodes stay cheap.
pub const SIM_PLUGIN_POLL: Duration = Duration::from_secs(2);

/// Every runner the sim knows.
pub fn default_registry() -> AgentRegistry {
    let mut r = AgentRegistry::new();
    r.register("device-plugin", Arc::new(device_plugin_runner));
    r.register("discovery", Arc::new(discovery_runner));
    r.register("mig-manager", Arc::new(mig_manager_runner));
    super::host_agents::register(&mut r);
    r
}

/// The container's command line parsed as `gantry node <agent>` parses it, env from the
/// container: a rejected one ends the container with clap's exit code and message.
pub(crate) fn parse<A: clap::Args + clap::FromArgMatches>(
    ctx: &AgentContext,
    agent: &'static str,
) -> Result<A, AgentExit> {
    Ok(gantry_node::args::parse(agent, &ctx.args, &ctx.env)?)
}

/// Options for `gantry node device-plugin` on a simulated node.
pub fn device_plugin_options(
    ctx: &AgentContext,
    args: &DevicePluginArgs,
) -> Result<device_plugin::Options, String> {
    let mut opts = args.options(&ctx.paths).map_err(|e| e.to_string())?;
    opts.kube = Some(ctx.client.clone());
    opts.poll_interval = opts.poll_interval.max(SIM_PLUGIN_POLL);
    // The sim has no driver: MIG minors come from the fixed layout.
    opts.mig_minors_file = None;
    Ok(opts)
}

fn device_plugin_runner(ctx: AgentContext) -> AgentFuture {
    Box::pin(async move {
        let args: DevicePluginArgs = parse(&ctx, "gantry node device-plugin")?;
        let opts = device_plugin_options(&ctx, &args)?;
        let backend = match gpus(&ctx, "for the device plugin") {
            Ok(b) => b,
            // FAIL_ON_INIT_ERROR=false: upstream logs the error and idles until stopped.
            Err(e) if !args.fail_on_init_error => {
                tracing::error!(node = %ctx.node_name, "{e}; idling (FAIL_ON_INIT_ERROR=false)");
                stopped(ctx.shutdown.clone()).await;
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        if let Some(secs) = args.health_check {
            let policy = opts.health.clone();
            let gpus = tokio::task::spawn_blocking(move || {
                device_plugin::check::check(backend.as_ref(), &policy, Duration::from_secs(secs))
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
            for g in &gpus {
                tracing::info!(gpu = g.index, healthy = g.healthy, "{}", g.detail);
            }
            if gpus.iter().all(|g| g.healthy) {
                return Ok(());
            }
            return Err("a GPU is unhealthy".to_string().into());
        }
        device_plugin::run(opts, backend, stopped(ctx.shutdown.clone()))
            .await
            .map_err(|e| e.to_string().into())
    })
}

/// Options for `gantry node discovery` on a simulated node.
pub fn discovery_options(
    ctx: &AgentContext,
    args: &DiscoveryArgs,
) -> Result<DiscoveryOptions, String> {
    args.options(&ctx.paths).map_err(|e| e.to_string())
}

fn discovery_runner(ctx: AgentContext) -> AgentFuture {
    Box::pin(async move {
        let args: DiscoveryArgs = parse(&ctx, "gantry node discovery")?;
        let opts = discovery_options(&ctx, &args)?;
        let backend = match gpus(&ctx, "to discover") {
            Ok(b) => b,
            // GFD_FAIL_ON_INIT_ERROR=false: upstream logs the error and idles until stopped.
            Err(e) if !args.fail_on_init_error && !args.print => {
                tracing::error!(node = %ctx.node_name, "{e}; idling (--fail-on-init-error=false)");
                stopped(ctx.shutdown.clone()).await;
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        if args.print {
            let labels =
                discovery::labels_once(&opts, backend.as_ref()).map_err(|e| e.to_string())?;
            tracing::info!("{}", discovery::render(&labels));
            return Ok(());
        }
        discovery::run(
            opts,
            backend,
            ctx.client.clone(),
            stopped(ctx.shutdown.clone()),
        )
        .await
        .map_err(|e| e.to_string().into())
    })
}

/// The node's simulated GPUs; an agent that needs them fails on a GPU-less node, saying
/// what it wanted them `for_what`.
pub(crate) fn gpus(ctx: &AgentContext, for_what: &str) -> Result<Arc<dyn Backend>, String> {
    ctx.backend
        .clone()
        .map(|b| b as Arc<dyn Backend>)
        .ok_or_else(|| format!("node {} has no GPUs {for_what}", ctx.node_name))
}

/// Resolves once the pod's shutdown flag flips (or its sender is gone).
pub(crate) async fn stopped(mut stop: tokio::sync::watch::Receiver<bool>) {
    while !*stop.borrow_and_update() {
        if stop.changed().await.is_err() {
            return;
        }
    }
}

/// Options for `gantry node mig-manager` (daemon mode) on a simulated node: waits poll
/// faster than on a real node.
pub fn mig_manager_options(
    ctx: &AgentContext,
    args: &MigManagerArgs,
) -> Result<mig::DaemonOptions, String> {
    let mut opts = args.daemon_options(&ctx.paths).map_err(|e| e.to_string())?;
    opts.poll_interval = Duration::from_millis(200);
    opts.clients_timeout = Duration::from_secs(60);
    Ok(opts)
}

fn mig_manager_runner(ctx: AgentContext) -> AgentFuture {
    Box::pin(async move {
        let args: MigManagerArgs = parse(&ctx, "gantry node mig-manager")?;
        if args.config.is_some() {
            // The one-shot apply (`--config NAME`) is a tool run by hand, not an operand.
            return Err("mig-manager --config (apply once) is not run on simulated nodes; run it as the daemon".to_string().into());
        }
        let opts = mig_manager_options(&ctx, &args)?;
        let backend = gpus(&ctx, "to partition")?;
        mig::run(
            opts,
            backend,
            ctx.client.clone(),
            stopped(ctx.shutdown.clone()),
        )
        .await
        .map_err(|e| e.to_string().into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_has_every_agent() {
        assert_eq!(
            default_registry().names(),
            [
                "device-plugin",
                "discovery",
                "driver",
                "exporter",
                "mig-manager",
                "toolkit",
                "validator"
            ]
        );
    }
}
