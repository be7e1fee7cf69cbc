//! The sandbox (VM workload) states, all NVIDIA images rendered as upstream deploys them:
//! vGPU manager, vGPU device manager, sandbox validator, VFIO manager, KubeVirt and Kata
//! device plugins, CC manager. Gantry does not run these itself.

use gantry_api::cluster_policy::{CcMode, DriverManagerSpec, SandboxMode};
use gantry_api::common::{ContainerSettings, EnvOnly, ImageSpec};
use gantry_api::names::{self, operand, validator_component as component};
use serde_json::{Value, json};

use super::RenderError;
use super::driver::{label_value, pools, sanitize};
use super::image::{self, chart};
use super::meta::{Ctx, Rule, service_account};
use super::pod::{
    Container, DaemonSet, config_map_volume, env, env_field, host_root_volume, host_volume,
    merge_env, mount, mount_bidi, validations_volume, vol,
};
use super::validator::add_wait_for;

/// Rules of components that drain GPU pods and label their node (driver manager).
const DRIVER_MANAGER_RULES: [Rule; 3] = [
    Rule(
        &[""],
        &["nodes"],
        &["get", "list", "watch", "patch", "update"],
    ),
    Rule(&[""], &["pods"], &["get", "list", "watch", "delete"]),
    Rule(&[""], &["pods/eviction"], &["create"]),
];

/// A single-container operand DaemonSet of an NVIDIA image.
struct Simple<'a> {
    name: &'a str,
    operand: &'a str,
    image: String,
    block: Option<&'a ImageSpec>,
    settings: Option<&'a ContainerSettings>,
    path: &'a str,
    command: Vec<String>,
    env: Vec<Value>,
}

fn simple<'a>(ctx: &Ctx<'a>, s: Simple<'a>) -> Result<DaemonSet<'a>, RenderError> {
    let mut ds = DaemonSet::new(s.name, s.operand, s.name);
    let mut c = Container::new(s.name, s.image);
    c.image_spec = s.block;
    c.command = s.command;
    c.env = merge_env(
        &format!("{}.env", s.path),
        s.env,
        s.settings.and_then(|x| x.env.as_ref()),
    )?;
    c.privileged = true;
    c.settings = s.settings.map(|x| (s.path, x));
    c.mounts = vec![
        mount_bidi(vol::VALIDATIONS, names::VALIDATIONS_DIR),
        mount("host-sys", "/sys"),
    ];
    ds.containers.push(c.json()?);
    ds.volume(validations_volume());
    ds.volume(host_volume("host-sys", "/sys", "Directory"));
    ds.host_network = s.settings.and_then(|x| x.host_network) == Some(true);
    if let Some(b) = s.block {
        ds.pull_secrets.push(b);
    }
    let _ = ctx;
    Ok(ds)
}

fn node_name() -> Vec<Value> {
    vec![env_field("NODE_NAME", "spec.nodeName")]
}

/// The k8s-driver-manager init container of the vGPU and VFIO managers.
fn driver_manager(
    ctx: &Ctx<'_>,
    path: &str,
    m: Option<&DriverManagerSpec>,
) -> Result<Value, RenderError> {
    let img = image::upstream(
        ctx,
        path,
        m.map(|m| &m.image),
        "DRIVER_MANAGER_IMAGE",
        Some(chart::DRIVER_MANAGER),
    )?;
    let mut c = Container::new("k8s-driver-manager", img.reference());
    c.image_spec = m.map(|m| &m.image);
    c.command = vec!["driver-manager".into()];
    c.args = vec!["uninstall_driver".into()];
    c.env = merge_env(
        &format!("{path}.env"),
        vec![
            env_field("NODE_NAME", "spec.nodeName"),
            env("NVIDIA_VISIBLE_DEVICES", "void"),
            env("ENABLE_GPU_POD_EVICTION", "false"),
            env("ENABLE_AUTO_DRAIN", "false"),
            env_field("OPERATOR_NAMESPACE", "metadata.namespace"),
        ],
        m.and_then(|m| m.env.as_ref()),
    )?;
    c.privileged = true;
    c.mounts = vec![
        mount_bidi(vol::RUN_NVIDIA, "/run/nvidia"),
        json!({ "name": vol::HOST_ROOT, "mountPath": "/host", "readOnly": true, "mountPropagation": "HostToContainer" }),
        mount("host-sys", "/sys"),
    ];
    c.json()
}

pub(crate) fn vgpu_manager(ctx: &Ctx<'_>) -> Result<Vec<Value>, RenderError> {
    const NAME: &str = "nvidia-vgpu-manager-daemonset";
    let Some(v) = ctx.spec.vgpu_manager.as_ref() else {
        return Ok(Vec::new());
    };
    let img = image::upstream(
        ctx,
        "spec.vgpuManager",
        Some(&v.image),
        "VGPU_MANAGER_IMAGE",
        None,
    )?;
    let mut out = service_account(ctx, NAME, &[], &DRIVER_MANAGER_RULES)?;
    let pools = pools(ctx, false);
    for pool in &pools {
        let name = if pools.len() == 1 {
            NAME.to_string()
        } else {
            format!("{NAME}-{}", sanitize(&pool.os_tag()))
        };
        let tagged = img.with_suffix(&pool.os_tag());
        let mut ds = simple(
            ctx,
            Simple {
                name: NAME,
                operand: operand::VGPU_MANAGER,
                image: tagged,
                block: Some(&v.image),
                settings: Some(&v.container),
                path: "spec.vgpuManager",
                command: vec!["nvidia-driver".into(), "init".into()],
                env: node_name(),
            },
        )?;
        ds.name = name.clone();
        ds.app = label_value(&name);
        ds.service_account = NAME;
        ds.node_selector = vec![
            (names::NFD_OS_RELEASE_ID.into(), pool.os_id.clone()),
            (
                names::NFD_OS_RELEASE_VERSION_ID.into(),
                pool.version_id.clone(),
            ),
        ];
        ds.on_delete = true;
        ds.host_pid = true;
        ds.init.push(driver_manager(
            ctx,
            "spec.vgpuManager.driverManager",
            v.driver_manager.as_ref(),
        )?);
        ds.volume(host_volume(
            vol::RUN_NVIDIA,
            "/run/nvidia",
            "DirectoryOrCreate",
        ));
        ds.volume(host_root_volume(ctx));
        out.push(ds.json(ctx)?);
    }
    Ok(out)
}

pub(crate) fn vgpu_device_manager(ctx: &Ctx<'_>) -> Result<Vec<Value>, RenderError> {
    const NAME: &str = "nvidia-vgpu-device-manager";
    let v = ctx.spec.vgpu_device_manager.as_ref();
    let block = v.map(|v| &v.image);
    let img = image::upstream(
        ctx,
        "spec.vgpuDeviceManager",
        block,
        "VGPU_DEVICE_MANAGER_IMAGE",
        Some(chart::VGPU_DEVICE_MANAGER),
    )?;
    let cfg = v.and_then(|v| v.config.as_ref());
    let cm = cfg
        .and_then(|c| c.name.as_deref())
        .filter(|n| !n.is_empty())
        .unwrap_or(gantry_api::cluster_policy::defaults::DEFAULT_VGPU_DEVICES_CONFIG_MAP);
    let default = cfg
        .and_then(|c| c.default.as_deref())
        .filter(|d| !d.is_empty())
        .unwrap_or("default");
    let mut out = service_account(
        ctx,
        NAME,
        &[Rule(&[""], &["configmaps"], &["get"])],
        &[Rule(&[""], &["nodes"], &["get", "patch"])],
    )?;
    let mut envs = node_name();
    envs.extend([
        env("DEFAULT_VGPU_CONFIG", default),
        env("CONFIG_FILE", "/vgpu-config/config.yaml"),
    ]);
    let mut ds = simple(
        ctx,
        Simple {
            name: NAME,
            operand: operand::VGPU_DEVICE_MANAGER,
            image: img.reference(),
            block,
            settings: v.map(|v| &v.container),
            path: "spec.vgpuDeviceManager",
            command: Vec::new(),
            env: envs,
        },
    )?;
    add_wait_for(ctx, &mut ds, component::VGPU_MANAGER)?;
    ds.volume(config_map_volume("vgpu-config", cm, true));
    if let Some(c) = ds
        .containers
        .first_mut()
        .and_then(|c| c.get_mut("volumeMounts"))
        .and_then(Value::as_array_mut)
    {
        c.push(mount("vgpu-config", "/vgpu-config"));
    }
    out.push(ds.json(ctx)?);
    Ok(out)
}

pub(crate) fn sandbox_validator(ctx: &Ctx<'_>) -> Result<Vec<Value>, RenderError> {
    const NAME: &str = "nvidia-sandbox-validator";
    let spec = ctx.spec;
    let v = spec.validator.as_ref();
    // NVIDIA's validator runs these checks; a Gantry-named validator block is not it.
    let block = v.map(|v| &v.image).filter(|i| !image::names_gantry(i));
    let img = image::upstream(
        ctx,
        "spec.validator",
        block,
        "VALIDATOR_IMAGE",
        Some(chart::VALIDATOR),
    )?
    .reference();
    let mut out = service_account(ctx, NAME, &[], &[Rule(&[""], &["nodes"], &["get"])])?;
    let mut ds = simple(
        ctx,
        Simple {
            name: NAME,
            operand: operand::SANDBOX_VALIDATOR,
            image: img.clone(),
            block,
            settings: v.map(|v| &v.container),
            path: "spec.validator",
            command: vec![
                "sh".into(),
                "-c".into(),
                "echo all validations are successful; sleep infinity".into(),
            ],
            env: node_name(),
        },
    )?;
    let env_of = |e: Option<&EnvOnly>| e.and_then(|e| e.env.clone());
    let mut checks: Vec<(&str, Option<Vec<k8s_openapi::api::core::v1::EnvVar>>)> = Vec::new();
    if spec.cc_manager_enabled() && spec.sandbox_mode() == SandboxMode::Kata {
        checks.push((component::CC_MANAGER, None));
    }
    if spec.vfio_manager_enabled() {
        checks.push((
            component::VFIO_PCI,
            env_of(v.and_then(|v| v.vfio_pci.as_ref())),
        ));
    }
    if spec.vgpu_manager_enabled() {
        checks.push((
            component::VGPU_MANAGER,
            env_of(v.and_then(|v| v.vgpu_manager.as_ref())),
        ));
    }
    if spec.vgpu_device_manager_enabled() {
        checks.push((
            component::VGPU_DEVICES,
            env_of(v.and_then(|v| v.vgpu_devices.as_ref())),
        ));
    }
    for (what, extra) in checks {
        let name = format!("{what}-validation");
        let mut c = Container::new(&name, img.clone());
        c.image_spec = block;
        c.command = vec!["sh".into(), "-c".into(), "nvidia-validator".into()];
        let mut base = node_name();
        base.extend([env("WITH_WAIT", "true"), env("COMPONENT", what)]);
        c.env = merge_env(&format!("spec.validator.{what}.env"), base, extra.as_ref())?;
        c.privileged = true;
        c.mounts = vec![
            mount_bidi(vol::VALIDATIONS, names::VALIDATIONS_DIR),
            json!({ "name": vol::HOST_ROOT, "mountPath": "/host", "readOnly": true, "mountPropagation": "HostToContainer" }),
            mount("host-sys", "/sys"),
        ];
        ds.init.push(c.json()?);
    }
    ds.volume(host_root_volume(ctx));
    out.push(ds.json(ctx)?);
    Ok(out)
}

pub(crate) fn vfio_manager(ctx: &Ctx<'_>) -> Result<Vec<Value>, RenderError> {
    const NAME: &str = "nvidia-vfio-manager";
    let v = ctx.spec.vfio_manager.as_ref();
    let block = v.map(|v| &v.image);
    let img = image::upstream(
        ctx,
        "spec.vfioManager",
        block,
        "VFIO_MANAGER_IMAGE",
        Some(chart::VFIO_MANAGER),
    )?;
    let mut out = service_account(ctx, NAME, &[], &DRIVER_MANAGER_RULES)?;
    let mut ds = simple(
        ctx,
        Simple {
            name: NAME,
            operand: operand::VFIO_MANAGER,
            image: img.reference(),
            block,
            settings: v.map(|v| &v.container),
            path: "spec.vfioManager",
            command: vec![
                "/bin/sh".into(),
                "-c".into(),
                "/bin/vfio-manage.sh bind --all && sleep inf".into(),
            ],
            env: node_name(),
        },
    )?;
    ds.init.push(driver_manager(
        ctx,
        "spec.vfioManager.driverManager",
        v.and_then(|v| v.driver_manager.as_ref()),
    )?);
    ds.volume(host_volume(
        vol::RUN_NVIDIA,
        "/run/nvidia",
        "DirectoryOrCreate",
    ));
    ds.volume(host_root_volume(ctx));
    ds.host_pid = true;
    out.push(ds.json(ctx)?);
    Ok(out)
}

fn device_plugin(
    ctx: &Ctx<'_>,
    name: &'static str,
    op: &'static str,
    path: &'static str,
    env_key: &str,
    section: Option<&gantry_api::cluster_policy::ComponentSpec>,
    default: (&str, &str, &str),
) -> Result<Vec<Value>, RenderError> {
    let block = section.map(|s| &s.image);
    let img = image::upstream(ctx, path, block, env_key, Some(default))?;
    let mut out = service_account(ctx, name, &[], &[Rule(&[""], &["nodes"], &["get"])])?;
    let mut ds = simple(
        ctx,
        Simple {
            name,
            operand: op,
            image: img.reference(),
            block,
            settings: section.map(|s| &s.container),
            path,
            command: Vec::new(),
            env: node_name(),
        },
    )?;
    let kubelet = ctx.spec.kubelet_root_dir().trim_end_matches('/');
    ds.volume(host_volume(
        vol::DEVICE_PLUGINS,
        &format!("{kubelet}/device-plugins"),
        "Directory",
    ));
    ds.volume(host_volume("vfio", "/dev/vfio", ""));
    if let Some(c) = ds
        .containers
        .first_mut()
        .and_then(|c| c.get_mut("volumeMounts"))
        .and_then(Value::as_array_mut)
    {
        c.push(mount(
            vol::DEVICE_PLUGINS,
            "/var/lib/kubelet/device-plugins",
        ));
        c.push(mount("vfio", "/dev/vfio"));
    }
    out.push(ds.json(ctx)?);
    Ok(out)
}

pub(crate) fn sandbox_device_plugin(ctx: &Ctx<'_>) -> Result<Vec<Value>, RenderError> {
    device_plugin(
        ctx,
        "nvidia-sandbox-device-plugin-daemonset",
        operand::SANDBOX_DEVICE_PLUGIN,
        "spec.sandboxDevicePlugin",
        "SANDBOX_DEVICE_PLUGIN_IMAGE",
        ctx.spec.sandbox_device_plugin.as_ref(),
        chart::SANDBOX_DEVICE_PLUGIN,
    )
}

pub(crate) fn kata_device_plugin(ctx: &Ctx<'_>) -> Result<Vec<Value>, RenderError> {
    device_plugin(
        ctx,
        "nvidia-kata-sandbox-device-plugin-daemonset",
        operand::KATA_SANDBOX_DEVICE_PLUGIN,
        "spec.kataSandboxDevicePlugin",
        "KATA_SANDBOX_DEVICE_PLUGIN_IMAGE",
        ctx.spec.kata_sandbox_device_plugin.as_ref(),
        chart::KATA_DEVICE_PLUGIN,
    )
}

pub(crate) fn cc_manager(ctx: &Ctx<'_>) -> Result<Vec<Value>, RenderError> {
    const NAME: &str = "nvidia-cc-manager";
    let c = ctx.spec.cc_manager.as_ref();
    let block = c.map(|c| &c.image);
    let img = image::upstream(
        ctx,
        "spec.ccManager",
        block,
        "CC_MANAGER_IMAGE",
        Some(chart::CC_MANAGER),
    )?;
    let mode = match c.and_then(|c| c.default_mode).unwrap_or(CcMode::On) {
        CcMode::On => "on",
        CcMode::Off => "off",
        CcMode::Devtools => "devtools",
    };
    let mut out = service_account(
        ctx,
        NAME,
        &[],
        &[Rule(&[""], &["nodes"], &["get", "patch"])],
    )?;
    let mut envs = node_name();
    envs.push(env("DEFAULT_CC_MODE", mode));
    let mut ds = simple(
        ctx,
        Simple {
            name: NAME,
            operand: operand::CC_MANAGER,
            image: img.reference(),
            block,
            settings: c.map(|c| &c.container),
            path: "spec.ccManager",
            command: Vec::new(),
            env: envs,
        },
    )?;
    ds.host_pid = true;
    out.push(ds.json(ctx)?);
    Ok(out)
}
