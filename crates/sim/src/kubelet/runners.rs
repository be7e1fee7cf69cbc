//! The in-process runners for the node agents that exist, and the default registry.
//! Each runner maps the operand pod's args/env onto the agent's options with the node's
//! directories, and runs it against the node's SimBackend until the pod stops.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use gantry_gpu::Backend;
use gantry_node::device_plugin::{self, HealthPolicy, health, settings::MigStrategy};
use gantry_node::discovery::{self, DiscoveryOptions};
use gantry_node::mig;

use super::agents::{AgentContext, AgentFuture, AgentRegistry};

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

/// `--flag value` / `--flag=value` from args, else the env variable.
pub(crate) fn setting(
    args: &[String],
    env: &BTreeMap<String, String>,
    flag: &str,
    var: &str,
) -> Option<String> {
    let long = format!("--{flag}");
    let eq = format!("--{flag}=");
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if let Some(v) = a.strip_prefix(&eq) {
            return Some(v.to_string());
        }
        if *a == long {
            return it.next().cloned();
        }
    }
    env.get(var).cloned()
}

fn mig_strategy(s: &str) -> Result<MigStrategy, String> {
    s.parse()
        .map_err(|e: gantry_k8s_rules::mig::UnknownMigStrategy| e.to_string())
}

/// Options for `gantry node device-plugin` on a simulated node.
pub fn device_plugin_options(ctx: &AgentContext) -> Result<device_plugin::Options, String> {
    let mut opts = device_plugin::Options::new(&ctx.device_plugin_dir);
    opts.kubelet_socket = Some(ctx.kubelet_socket.clone());
    opts.node_name = Some(ctx.node_name.clone());
    opts.kube = Some(ctx.client.clone());
    opts.poll_interval = SIM_PLUGIN_POLL;
    if let Some(a) = setting(&ctx.args, &ctx.env, "metrics-address", "METRICS_ADDRESS") {
        opts.metrics_address = Some(
            a.parse()
                .map_err(|_| format!("--metrics-address {a:?}: expected HOST:PORT"))?,
        );
    }
    // The sim has no driver: MIG minors come from the fixed layout.
    opts.mig_minors_file = None;
    if let Some(s) = setting(&ctx.args, &ctx.env, "mig-strategy", "MIG_STRATEGY") {
        opts.overrides.mig_strategy = Some(mig_strategy(&s)?);
    }
    // The operator passes `devicePlugin.mps.root` as MPS_ROOT; an MPS config needs it.
    if let Some(root) = setting(&ctx.args, &ctx.env, "mps-root", "MPS_ROOT") {
        opts.overrides.mps_root = Some(root);
    }
    // Named configs from a ConfigMap (the operator's `devicePlugin.config`): the node label
    // picks the key, `--default-config` / DEFAULT_CONFIG when it is empty.
    if let Some(cm) = setting(&ctx.args, &ctx.env, "config-map", "CONFIG_MAP") {
        let (namespace, name) = cm
            .split_once('/')
            .ok_or_else(|| format!("--config-map {cm:?}: expected namespace/name"))?;
        opts.config = device_plugin::ConfigSource::ConfigMap {
            namespace: namespace.to_string(),
            name: name.to_string(),
            default: setting(&ctx.args, &ctx.env, "default-config", "DEFAULT_CONFIG"),
            fallbacks: device_plugin::named::DEFAULT_FALLBACKS.to_vec(),
        };
    }
    let (policy, warnings): (HealthPolicy, _) = HealthPolicy::from_env(
        ctx.env.get(health::ENV_DISABLE).map(String::as_str),
        ctx.env.get(health::ENV_ENABLE).map(String::as_str),
    );
    for w in warnings {
        tracing::warn!(node = %ctx.node_name, "{w}");
    }
    let mut policy = policy;
    if let Some(s) = setting(
        &ctx.args,
        &ctx.env,
        "xid-recovery-hold",
        "XID_RECOVERY_HOLD",
    ) {
        let secs: u64 = s
            .parse()
            .map_err(|_| format!("--xid-recovery-hold {s:?}: expected whole seconds"))?;
        policy.quiet_period = std::time::Duration::from_secs(secs);
    }
    opts.health = policy;
    Ok(opts)
}

/// Options for `gantry node discovery` on a simulated node: the node's directory stands in
/// for the host root (so `gpu.machine` reads `<node dir>/sys/...`).
pub fn discovery_options(ctx: &AgentContext) -> Result<DiscoveryOptions, String> {
    let flag = |name: &str| ctx.args.iter().any(|a| a == &format!("--{name}"));
    let mut opts = DiscoveryOptions {
        node_name: Some(ctx.node_name.clone()),
        host_root: ctx.host_root.clone(),
        oneshot: flag("oneshot"),
        no_timestamp: flag("no-timestamp"),
        ..DiscoveryOptions::default()
    };
    if let Some(s) = setting(&ctx.args, &ctx.env, "mig-strategy", "MIG_STRATEGY") {
        opts.mig_strategy = Some(mig_strategy(&s)?);
    }
    if let Some(cm) = setting(&ctx.args, &ctx.env, "config-map", "") {
        let (ns, name) = cm
            .split_once('/')
            .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
            .ok_or_else(|| format!("--config-map {cm:?}: expected namespace/name"))?;
        opts.config_map = Some((ns.to_string(), name.to_string()));
    }
    opts.default_config = setting(&ctx.args, &ctx.env, "default-config", "DEFAULT_CONFIG");
    if let Some(s) = setting(&ctx.args, &ctx.env, "sleep-interval", "GFD_SLEEP_INTERVAL") {
        opts.sleep_interval = Some(discovery::config::parse_interval(&s)?);
    }
    Ok(opts)
}

fn discovery_runner(ctx: AgentContext) -> AgentFuture {
    Box::pin(async move {
        let backend = gpus(&ctx, "to discover")?;
        let opts = discovery_options(&ctx)?;
        discovery::run(
            opts,
            backend,
            ctx.client.clone(),
            stopped(ctx.shutdown.clone()),
        )
        .await
        .map_err(|e| e.to_string())
    })
}

/// The node's simulated GPUs; an agent that needs them fails on a GPU-less node, saying
/// what it wanted them `for_what`.
fn gpus(ctx: &AgentContext, for_what: &str) -> Result<Arc<dyn Backend>, String> {
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

fn device_plugin_runner(ctx: AgentContext) -> AgentFuture {
    Box::pin(async move {
        let backend = gpus(&ctx, "for the device plugin")?;
        let opts = device_plugin_options(&ctx)?;
        device_plugin::run(opts, backend, stopped(ctx.shutdown.clone()))
            .await
            .map_err(|e| e.to_string())
    })
}

/// Options for `gantry node mig-manager` (daemon mode) on a simulated node: `--config-file`
/// resolves under the node's host dir; waits poll faster than on a real node.
pub fn mig_manager_options(ctx: &AgentContext) -> Result<mig::DaemonOptions, String> {
    let file = setting(&ctx.args, &ctx.env, "config-file", "CONFIG_FILE");
    let map = setting(&ctx.args, &ctx.env, "config-map", "CONFIG_MAP");
    let source = match (file, map) {
        (_, Some(m)) => {
            let (namespace, name) = mig::daemon::parse_namespaced(&m)
                .ok_or_else(|| format!("--config-map {m:?}: write NAMESPACE/NAME"))?;
            mig::ConfigSource::ConfigMap { namespace, name }
        }
        (Some(f), None) => mig::ConfigSource::File(ctx.host_root.join(f.trim_start_matches('/'))),
        (None, None) => return Err("mig-manager needs --config-file or --config-map".into()),
    };
    let mut opts = mig::DaemonOptions::new(ctx.node_name.clone(), source);
    opts.custom_layouts = match setting(
        &ctx.args,
        &ctx.env,
        "custom-config-map",
        "CUSTOM_CONFIG_MAP",
    ) {
        Some(m) => Some(
            mig::daemon::parse_namespaced(&m)
                .ok_or_else(|| format!("--custom-config-map {m:?}: write NAMESPACE/NAME"))?,
        ),
        None => mig::daemon::default_custom_layouts(&opts.source, Some(&ctx.pod_namespace)),
    };
    opts.poll_interval = Duration::from_millis(200);
    opts.clients_timeout = Duration::from_secs(60);
    Ok(opts)
}

fn mig_manager_runner(ctx: AgentContext) -> AgentFuture {
    Box::pin(async move {
        let backend = gpus(&ctx, "to partition")?;
        let opts = mig_manager_options(&ctx)?;
        mig::run(
            opts,
            backend,
            ctx.client.clone(),
            stopped(ctx.shutdown.clone()),
        )
        .await
        .map_err(|e| e.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_beat_env() {
        let env: BTreeMap<String, String> = [("MIG_STRATEGY".to_string(), "mixed".to_string())]
            .into_iter()
            .collect();
        let args = |xs: &[&str]| xs.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            setting(
                &args(&["--mig-strategy", "single"]),
                &env,
                "mig-strategy",
                "MIG_STRATEGY"
            )
            .as_deref(),
            Some("single")
        );
        assert_eq!(
            setting(
                &args(&["--mig-strategy=none"]),
                &env,
                "mig-strategy",
                "MIG_STRATEGY"
            )
            .as_deref(),
            Some("none")
        );
        assert_eq!(
            setting(&[], &env, "mig-strategy", "MIG_STRATEGY").as_deref(),
            Some("mixed")
        );
        assert!(mig_strategy("weird").unwrap_err().contains("\"weird\""));
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
