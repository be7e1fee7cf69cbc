//! `state-mig-manager`: `gantry node mig-manager` applies the `nvidia.com/mig.config` layout
//! of its node from the mig-parted ConfigMap; the operator ships the default ConfigMaps.

use gantry_api::names::{self, validator_component as component};
use serde_json::{Value, json};

use super::RenderError;
use super::image;
use super::meta::{Ctx, Rule, service_account};
use super::pod::{
    Container, DaemonSet, HOST_ROOT_MOUNT, config_map_volume, driver_root_in_container,
    driver_root_volume, env, host_root_volume, host_volume, merge_env, mount, mount_bidi, node_env,
    vol,
};
use super::validator::add_wait_for;

pub(crate) const DAEMONSET: &str = "nvidia-mig-manager";

/// Host services that hold GPUs open and are stopped around a MIG mode change (upstream's
/// default `clients.yaml`).
const DEFAULT_GPU_CLIENTS: &str = "version: v1
systemd-services:
  - nvsm.service
  - nvsm-mqtt.service
  - nvsm-core.service
  - nvsm-api-gateway.service
  - nvsm-notifier.service
  - nv_peer_mem.service
  - nvidia-dcgm.service
  - dcgm.service
  - dcgm-exporter.service
";

pub(crate) fn render(ctx: &Ctx<'_>) -> Result<Vec<Value>, RenderError> {
    let spec = ctx.spec;
    let section = spec.mig_manager.as_ref();
    let mut out = service_account(
        ctx,
        DAEMONSET,
        &[Rule(&[""], &["configmaps"], &["get"])],
        &[
            // It watches its own Node (field selector) for `nvidia.com/mig.config`.
            Rule(&[""], &["nodes"], &["get", "list", "watch", "patch"]),
            Rule(&[""], &["events"], &["create"]),
            Rule(&[""], &["pods"], &["list", "delete"]),
        ],
    )?;
    let config = spec.mig_manager_config_name();
    if config == names::CONFIG_MAP_DEFAULT_MIG_PARTED {
        out.push(ctx.config_map(
            names::CONFIG_MAP_DEFAULT_MIG_PARTED,
            json!({ names::MIG_PARTED_CONFIG_KEY: gantry_api::mig_parted::default_config_yaml() }),
        )?);
    }
    let clients = spec.mig_manager_gpu_clients_config();
    if clients == names::CONFIG_MAP_DEFAULT_GPU_CLIENTS {
        out.push(ctx.config_map(
            names::CONFIG_MAP_DEFAULT_GPU_CLIENTS,
            json!({ "clients.yaml": DEFAULT_GPU_CLIENTS }),
        )?);
    }

    let mut ds = DaemonSet::new(DAEMONSET, names::operand::MIG_MANAGER, DAEMONSET);
    ds.runtime_class = true;
    ds.host_pid = true;
    add_wait_for(ctx, &mut ds, component::TOOLKIT)?;
    let mut base = node_env();
    base.extend([
        env("DEFAULT_GPU_CLIENTS_NAMESPACE", ctx.namespace()),
        env("GPU_CLIENTS_FILE", "/gpu-clients/clients.yaml"),
        env("WITH_REBOOT", "false"),
        env("NVIDIA_DRIVER_ROOT", driver_root_in_container(ctx)),
        env("GANTRY_HOST_ROOT", HOST_ROOT_MOUNT),
    ]);
    let block = section.map(|s| &s.image);
    let settings = section.map(|s| &s.container);
    let mut c = Container::new(DAEMONSET, image::gantry(ctx, block));
    c.image_spec = block;
    c.command = ["gantry", "node", "mig-manager", "--config-map"]
        .map(String::from)
        .to_vec();
    c.command.push(format!("{}/{config}", ctx.namespace()));
    c.env = merge_env(
        "spec.migManager.env",
        base,
        settings.and_then(|s| s.env.as_ref()),
    )?;
    c.mounts = vec![
        mount_bidi(vol::VALIDATIONS, names::VALIDATIONS_DIR),
        json!({ "name": vol::HOST_ROOT, "mountPath": HOST_ROOT_MOUNT, "mountPropagation": "HostToContainer" }),
        json!({ "name": vol::DRIVER_ROOT, "mountPath": names::DRIVER_ROOT_DIR, "mountPropagation": "HostToContainer" }),
        mount("host-sys", "/sys"),
        mount(vol::CDI, "/var/run/cdi"),
        mount("gpu-clients", "/gpu-clients"),
    ];
    c.privileged = true;
    c.settings = settings.map(|s| ("spec.migManager", s));
    ds.containers.push(c.json()?);
    ds.volume(host_root_volume(ctx));
    ds.volume(driver_root_volume(ctx));
    ds.volume(host_volume("host-sys", "/sys", "Directory"));
    ds.volume(host_volume(vol::CDI, "/var/run/cdi", "DirectoryOrCreate"));
    // Optional: a user-named clients ConfigMap that does not exist must not block the pod.
    ds.volume(config_map_volume("gpu-clients", clients, true));
    ds.host_network = settings.and_then(|s| s.host_network) == Some(true);
    if let Some(b) = block {
        ds.pull_secrets.push(b);
    }
    out.push(ds.json(ctx)?);
    Ok(out)
}
