//! `gantry node device-plugin` as an [`Agent`].

use std::sync::Arc;
use std::time::Duration;

use super::contract::{Agent, AgentError, Host, Run, Shutdown};
use crate::args::GpuArgs;
use crate::device_plugin::{self as plugin, ConfigSource, HealthPolicy, args::DevicePluginArgs};

/// The least period of the plugin's checks of its sockets and inventory on a simulated node:
/// slower than the agent's default so thousands of simulated nodes stay cheap. Every 2 s,
/// the checks' `stat`s of socket paths were a fifth of the simulated kubelets' CPU at rest
/// with 5,000 nodes (docs/benchmarks.md, issue #42).
pub const SIM_PLUGIN_POLL: Duration = Duration::from_secs(5);

pub struct DevicePlugin;

pub struct Options {
    plugin: plugin::Options,
    gpu: GpuArgs,
    fail_on_init_error: bool,
    /// `--health-check SECONDS`: check the GPUs once, listening this long for events.
    health_check: Option<Duration>,
}

impl Agent for DevicePlugin {
    const NAME: &'static str = "device-plugin";
    const ABOUT: &'static str =
        "Kubelet device plugin: advertise GPUs, MIG devices and shared replicas; allocate them";
    const WORKER_THREADS: bool = true;
    type Args = DevicePluginArgs;
    type Options = Options;

    fn options(args: DevicePluginArgs, host: &dyn Host) -> Result<Options, AgentError> {
        let mut plugin = args.options(host.paths()).map_err(AgentError::failed)?;
        if host.simulated() {
            plugin.poll_interval = plugin.poll_interval.max(SIM_PLUGIN_POLL);
        }
        Ok(Options {
            plugin,
            gpu: args.gpu,
            fail_on_init_error: args.fail_on_init_error,
            health_check: args.health_check.map(Duration::from_secs),
        })
    }

    fn run(o: Options, host: Arc<dyn Host>, shutdown: Shutdown) -> Run {
        Box::pin(async move {
            let backend = match host.gpus(&o.gpu, "for the device plugin") {
                Ok(b) => b,
                // FAIL_ON_INIT_ERROR=false: upstream logs the error and idles until stopped.
                Err(e) if !o.fail_on_init_error => {
                    tracing::error!("{e}; idling (FAIL_ON_INIT_ERROR=false)");
                    shutdown.await;
                    return Ok(());
                }
                Err(e) => return Err(e.into()),
            };
            if let Some(listen) = o.health_check {
                return health_check(backend, o.plugin.health, listen, host.as_ref()).await;
            }
            let mut opts = o.plugin;
            // The node label, Node events and a ConfigMap source need the API.
            if opts.node_name.is_some() || matches!(opts.config, ConfigSource::ConfigMap { .. }) {
                match host.client(None).await {
                    Ok(client) => opts.kube = Some(client),
                    Err(e) => {
                        tracing::warn!(
                            "no Kubernetes API access ({e}); node label and events disabled"
                        )
                    }
                }
            }
            plugin::run(opts, backend, shutdown)
                .await
                .map_err(AgentError::failed)
        })
    }
}

/// `--health-check`: every GPU's verdict under the policy; fails when one is unhealthy.
async fn health_check(
    backend: Arc<dyn gantry_gpu::Backend>,
    policy: HealthPolicy,
    listen: Duration,
    host: &dyn Host,
) -> Result<(), AgentError> {
    let p = policy.clone();
    let gpus =
        tokio::task::spawn_blocking(move || plugin::check::check(backend.as_ref(), &p, listen))
            .await
            .map_err(AgentError::failed)?
            .map_err(|e| format!("--health-check: counting GPUs: {e}"))?;
    host.print(&format!(
        "health policy: ignored XIDs {:?}, always fatal {:?}, all fatal {}, disabled {}, quiet period {}s",
        policy.ignored,
        policy.fatal,
        policy.all_fatal,
        policy.disabled,
        policy.quiet_period.as_secs()
    ));
    for g in &gpus {
        let verdict = if g.healthy { "Healthy" } else { "Unhealthy" };
        host.print(&format!(
            "gpu {} {}: {verdict} ({})",
            g.index, g.uuid, g.detail
        ));
    }
    if gpus.iter().all(|g| g.healthy) {
        Ok(())
    } else {
        Err("a GPU is unhealthy".to_string().into())
    }
}
