//! `state-device-plugin` (`gantry node device-plugin`), `gpu-feature-discovery`
//! (`gantry node discovery`) and `state-mps-control-daemon` (NVIDIA's MPS control daemon).
//!
//! Time-slicing / MPS (`devicePlugin.config`): the device plugin and GFD read the named
//! ConfigMap through the API (`--config-map <ns>/<name>`) and pick the key from the node
//! label `nvidia.com/device-plugin.config`, else `--default-config` (env `DEFAULT_CONFIG`).

use gantry_api::names::{self, validator_component as component};
use serde_json::{Value, json};

use super::RenderError;
use super::image::{self, chart};
use super::meta::{Ctx, Rule, service_account};
use super::pod::{
    Container, DaemonSet, HOST_ROOT_MOUNT, config_map_volume, driver_root_in_container,
    driver_root_volume, env, host_root_volume, host_volume, merge_env, mount, mount_bidi, node_env,
    vol,
};
use super::validator::add_wait_for;

pub(crate) const DAEMONSET: &str = "nvidia-device-plugin-daemonset";
pub(crate) const GFD: &str = "gpu-feature-discovery";
pub(crate) const MPS_DAEMONSET: &str = "nvidia-device-plugin-mps-control-daemon";
const SERVICE_ACCOUNT: &str = "nvidia-device-plugin";
const MPS_SERVICE_ACCOUNT: &str = "nvidia-mps-control-daemon";

/// `--config-map <ns>/<name> [--default-config <key>]` and env `DEFAULT_CONFIG`, when
/// `devicePlugin.config.name` is set.
fn config_flags(ctx: &Ctx<'_>) -> (Vec<String>, Vec<Value>) {
    let Some(name) = ctx.spec.device_plugin_config_name() else {
        return (Vec::new(), Vec::new());
    };
    let mut args = vec![
        "--config-map".to_string(),
        format!("{}/{name}", ctx.namespace()),
    ];
    let mut envs = Vec::new();
    if let Some(d) = ctx.spec.device_plugin_config_default() {
        args.extend(["--default-config".to_string(), d.to_string()]);
        envs.push(env("DEFAULT_CONFIG", d));
    }
    (args, envs)
}

fn ro_host(name: &str, path: &str) -> Value {
    json!({ "name": name, "mountPath": path, "readOnly": true, "mountPropagation": "HostToContainer" })
}

pub(crate) fn render(ctx: &Ctx<'_>) -> Result<Vec<Value>, RenderError> {
    let spec = ctx.spec;
    let dp = &spec.device_plugin;
    let mut out = service_account(
        ctx,
        SERVICE_ACCOUNT,
        &[Rule(&[""], &["configmaps"], &["get"])],
        &[
            Rule(&[""], &["nodes"], &["get"]),
            Rule(&[""], &["events"], &["create"]),
        ],
    )?;
    let mut ds = DaemonSet::new(DAEMONSET, names::operand::DEVICE_PLUGIN, SERVICE_ACCOUNT);
    ds.runtime_class = true;
    add_wait_for(ctx, &mut ds, component::TOOLKIT)?;

    let (config_args, config_env) = config_flags(ctx);
    let mut base = node_env();
    base.extend([
        env("MIG_STRATEGY", spec.mig_strategy().as_str()),
        env("PASS_DEVICE_SPECS", "true"),
        env("FAIL_ON_INIT_ERROR", "true"),
        env("DEVICE_LIST_STRATEGY", "envvar"),
        env("DEVICE_ID_STRATEGY", "uuid"),
        env("NVIDIA_VISIBLE_DEVICES", "all"),
        env("NVIDIA_DRIVER_CAPABILITIES", "all"),
        env("MPS_ROOT", spec.mps_root()),
        env("NVIDIA_DRIVER_ROOT", driver_root_in_container(ctx)),
    ]);
    base.extend(config_env);
    let kubelet = spec.kubelet_root_dir().trim_end_matches('/');
    let mut c = Container::new("nvidia-device-plugin", image::gantry(ctx, Some(&dp.image)));
    c.image_spec = Some(&dp.image);
    c.command = ["gantry", "node", "device-plugin"]
        .map(String::from)
        .to_vec();
    c.command.extend(config_args);
    c.env = merge_env("spec.devicePlugin.env", base, dp.container.env.as_ref())?;
    c.mounts = vec![
        mount(vol::DEVICE_PLUGINS, "/var/lib/kubelet/device-plugins"),
        mount(vol::VALIDATIONS, names::VALIDATIONS_DIR),
        ro_host(vol::HOST_ROOT, HOST_ROOT_MOUNT),
        ro_host(vol::DRIVER_ROOT, names::DRIVER_ROOT_DIR),
        mount(vol::CDI, "/var/run/cdi"),
        mount_bidi(vol::MPS_ROOT, spec.mps_root()),
    ];
    c.privileged = true;
    c.settings = Some(("spec.devicePlugin", &dp.container));
    ds.containers.push(c.json()?);
    ds.volume(host_volume(
        vol::DEVICE_PLUGINS,
        &format!("{kubelet}/device-plugins"),
        "Directory",
    ));
    ds.volume(host_root_volume(ctx));
    ds.volume(driver_root_volume(ctx));
    ds.volume(host_volume(vol::CDI, "/var/run/cdi", "DirectoryOrCreate"));
    ds.volume(host_volume(
        vol::MPS_ROOT,
        spec.mps_root(),
        "DirectoryOrCreate",
    ));
    ds.host_network = dp.container.host_network == Some(true);
    ds.pull_secrets.push(&dp.image);
    out.push(ds.json(ctx)?);
    Ok(out)
}

pub(crate) fn gfd(ctx: &Ctx<'_>) -> Result<Vec<Value>, RenderError> {
    let spec = ctx.spec;
    let g = &spec.gfd;
    // The ConfigMap is read through the API only when one is configured.
    let config_rules: &[Rule] = if spec.device_plugin_config_name().is_some() {
        &[Rule(&[""], &["configmaps"], &["get"])]
    } else {
        &[]
    };
    let mut out = service_account(
        ctx,
        GFD,
        config_rules,
        &[Rule(&[""], &["nodes"], &["get", "patch"])],
    )?;
    let mut ds = DaemonSet::new(GFD, names::operand::GPU_FEATURE_DISCOVERY, GFD);
    ds.runtime_class = true;
    add_wait_for(ctx, &mut ds, component::TOOLKIT)?;
    let (config_args, config_env) = config_flags(ctx);
    let mut base = node_env();
    base.extend([
        env("MIG_STRATEGY", spec.mig_strategy().as_str()),
        env("GFD_SLEEP_INTERVAL", "60s"),
        env("GANTRY_HOST_ROOT", HOST_ROOT_MOUNT),
        env("NVIDIA_DRIVER_ROOT", driver_root_in_container(ctx)),
    ]);
    base.extend(config_env);
    let mut c = Container::new(GFD, image::gantry(ctx, Some(&g.image)));
    c.image_spec = Some(&g.image);
    c.command = ["gantry", "node", "discovery"].map(String::from).to_vec();
    c.command.extend(config_args);
    c.env = merge_env("spec.gfd.env", base, g.container.env.as_ref())?;
    c.mounts = vec![
        mount(vol::VALIDATIONS, names::VALIDATIONS_DIR),
        ro_host(vol::HOST_ROOT, HOST_ROOT_MOUNT),
        ro_host(vol::DRIVER_ROOT, names::DRIVER_ROOT_DIR),
    ];
    c.privileged = true;
    c.settings = Some(("spec.gfd", &g.container));
    ds.containers.push(c.json()?);
    ds.volume(host_root_volume(ctx));
    ds.volume(driver_root_volume(ctx));
    ds.host_network = g.container.host_network == Some(true);
    ds.pull_secrets.push(&g.image);
    out.push(ds.json(ctx)?);
    Ok(out)
}

/// NVIDIA's MPS control daemon (from the k8s-device-plugin image), on nodes GFD marked
/// `nvidia.com/mps.capable=true`. Its config comes through upstream's config-manager.
pub(crate) fn mps_control_daemon(ctx: &Ctx<'_>) -> Result<Vec<Value>, RenderError> {
    let spec = ctx.spec;
    let dp = &spec.device_plugin;
    // A Gantry device plugin image has no MPS daemon: use NVIDIA's then.
    let block = (!image::names_gantry(&dp.image)).then_some(&dp.image);
    let img = image::upstream(
        ctx,
        "spec.devicePlugin",
        block,
        "DEVICE_PLUGIN_IMAGE",
        Some(chart::DEVICE_PLUGIN),
    )?
    .reference();
    let mut out = service_account(
        ctx,
        MPS_SERVICE_ACCOUNT,
        &[],
        &[Rule(&[""], &["nodes"], &["get"])],
    )?;
    let mut ds = DaemonSet::new(
        MPS_DAEMONSET,
        names::operand::DEVICE_PLUGIN,
        MPS_SERVICE_ACCOUNT,
    );
    ds.node_selector = vec![(names::LABEL_MPS_CAPABLE.into(), "true".into())];
    ds.runtime_class = true;
    ds.host_pid = true;
    add_wait_for(ctx, &mut ds, component::TOOLKIT)?;

    let root = spec.mps_root().trim_end_matches('/');
    ds.volume(host_volume(vol::MPS_ROOT, root, "DirectoryOrCreate"));
    ds.volume(host_volume(
        "mps-shm",
        &format!("{root}/shm"),
        "DirectoryOrCreate",
    ));
    let mut mounts_init = Container::new("mps-control-daemon-mounts", img.clone());
    mounts_init.image_spec = block;
    mounts_init.command = ["mps-control-daemon", "mount-shm"]
        .map(String::from)
        .to_vec();
    mounts_init.mounts = vec![mount_bidi(vol::MPS_ROOT, "/mps")];
    mounts_init.privileged = true;
    ds.init.push(mounts_init.json()?);

    let mut main_env = vec![
        ctx_env_node(),
        env("NVIDIA_VISIBLE_DEVICES", "all"),
        env("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"),
        env("MIG_STRATEGY", spec.mig_strategy().as_str()),
    ];
    let mut main_mounts = vec![mount(vol::MPS_ROOT, "/mps"), mount("mps-shm", "/dev/shm")];
    if let Some(name) = spec.device_plugin_config_name() {
        main_env.push(env("CONFIG_FILE", "/config/config.yaml"));
        main_mounts.push(mount("config", "/config"));
        ds.volume(config_map_volume("available-configs", name, false));
        ds.volume(json!({ "name": "config", "emptyDir": {} }));
        ds.extra_pod_spec
            .insert("shareProcessNamespace".into(), true.into());
        for (cname, oneshot) in [("config-manager-init", "true"), ("config-manager", "false")] {
            let mut c = Container::new(cname, img.clone());
            c.image_spec = block;
            c.command = vec!["config-manager".into()];
            c.env = vec![
                ctx_env_node(),
                env("ONESHOT", oneshot),
                env("NODE_LABEL", names::LABEL_DEVICE_PLUGIN_CONFIG),
                env("CONFIG_FILE_SRCDIR", "/available-configs"),
                env("CONFIG_FILE_DST", "/config/config.yaml"),
                env(
                    "DEFAULT_CONFIG",
                    spec.device_plugin_config_default().unwrap_or(""),
                ),
                env("FALLBACK_STRATEGIES", "empty"),
                env(
                    "SEND_SIGNAL",
                    if oneshot == "true" { "false" } else { "true" },
                ),
                env("SIGNAL", "1"),
                env("PROCESS_TO_SIGNAL", "/usr/bin/mps-control-daemon"),
            ];
            c.mounts = vec![
                mount("available-configs", "/available-configs"),
                mount("config", "/config"),
            ];
            if oneshot == "true" {
                ds.init.push(c.json()?);
            } else {
                ds.containers.push(c.json()?);
            }
        }
    }
    let mut c = Container::new("mps-control-daemon-ctr", img);
    c.image_spec = block;
    c.command = vec!["mps-control-daemon".into()];
    c.env = main_env;
    c.mounts = main_mounts;
    c.privileged = true;
    ds.containers.insert(0, c.json()?);
    ds.pull_secrets.push(&dp.image);
    out.push(ds.json(ctx)?);
    Ok(out)
}

fn ctx_env_node() -> Value {
    super::pod::env_field("NODE_NAME", "spec.nodeName")
}
