//! `state-driver`: NVIDIA's driver container, one DaemonSet per OS pool of the GPU nodes
//! (per kernel too with precompiled drivers), always `OnDelete` — the upgrade controller
//! decides when a node's driver pod is replaced.
//!
//! Pool naming: a single non-precompiled pool keeps upstream's `nvidia-driver-daemonset`;
//! with several OS pools, or precompiled drivers, each is `nvidia-driver-daemonset-<suffix>`
//! (`<os tag>` or `<kernel>-<os tag>`). GPU nodes without the NFD OS labels (or, with
//! precompiled drivers, the kernel label) belong to no pool and get no driver pod.

use std::collections::BTreeSet;

use gantry_api::cluster_policy::KernelModuleType;
use gantry_api::names;
use serde_json::{Map, Value, json};

use super::RenderError;
use super::image::{self, chart};
use super::meta::{Ctx, Rule, service_account};
use super::pod::{
    Container, DaemonSet, config_map_volume, env, env_field, host_volume, merge_env, mount,
    mount_bidi, mount_ro, vol,
};

pub(crate) const DAEMONSET: &str = "nvidia-driver-daemonset";
const SERVICE_ACCOUNT: &str = "nvidia-driver";

/// One driver pool: the NFD OS labels (and kernel) its nodes share.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Pool {
    pub os_id: String,
    pub version_id: String,
    pub kernel: Option<String>,
}

impl Pool {
    /// Upstream's OS tag: `<ID><VERSION_ID>`, major version only for rhel, rocky and ol.
    pub fn os_tag(&self) -> String {
        let version = match self.os_id.as_str() {
            "rhel" | "rocky" | "ol" => self.version_id.split('.').next().unwrap_or(""),
            _ => self.version_id.as_str(),
        };
        format!("{}{}", self.os_id, version)
    }

    /// The image tag suffix: `<os tag>`, or `<kernel>-<os tag>` when precompiled.
    pub fn suffix(&self) -> String {
        match &self.kernel {
            Some(k) => format!("{k}-{}", self.os_tag()),
            None => self.os_tag(),
        }
    }
}

/// The pools present among the GPU nodes, sorted.
pub(crate) fn pools(ctx: &Ctx<'_>, precompiled: bool) -> Vec<Pool> {
    let mut set = BTreeSet::new();
    for n in &ctx.facts.gpu_nodes {
        let get = |k: &str| n.labels.get(k).filter(|v| !v.is_empty()).cloned();
        let (Some(os_id), Some(version_id)) = (
            get(names::NFD_OS_RELEASE_ID),
            get(names::NFD_OS_RELEASE_VERSION_ID),
        ) else {
            continue;
        };
        let kernel = if precompiled {
            match get(names::NFD_KERNEL_VERSION_FULL) {
                Some(k) => Some(k),
                None => continue,
            }
        } else {
            None
        };
        set.insert(Pool {
            os_id,
            version_id,
            kernel,
        });
    }
    set.into_iter().collect()
}

/// A DNS-1123 subdomain part: lowercase; per dot-separated segment anything but
/// `[a-z0-9-]` becomes `-` and the ends are alphanumeric; empty segments are dropped.
pub(crate) fn sanitize(s: &str) -> String {
    s.to_ascii_lowercase()
        .split('.')
        .map(|seg| {
            let mapped: String = seg
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                .collect();
            mapped.trim_matches('-').to_string()
        })
        .filter(|seg| !seg.is_empty())
        .collect::<Vec<_>>()
        .join(".")
}

/// A label value from a name: at most 63 characters, alphanumeric at the end.
pub(crate) fn label_value(s: &str) -> String {
    let cut: String = s.chars().take(63).collect();
    cut.trim_end_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

/// What the driver manager may do: cordon/drain its node, evict GPU pods, find its DaemonSet.
pub(crate) const RBAC: &[Rule] = &[
    Rule(
        &[""],
        &["nodes"],
        &["get", "list", "watch", "patch", "update"],
    ),
    Rule(&[""], &["pods"], &["get", "list", "watch", "delete"]),
    Rule(&[""], &["pods/eviction"], &["create"]),
    Rule(&["apps"], &["daemonsets"], &["get", "list", "watch"]),
];

/// Package-repo and CA directories by OS family.
fn repo_dir(os_id: &str) -> &'static str {
    match os_id {
        "ubuntu" | "debian" => "/etc/apt/sources.list.d",
        "sles" | "sl-micro" | "opensuse-leap" => "/etc/zypp/repos.d",
        _ => "/etc/yum.repos.d",
    }
}

fn cert_dir(os_id: &str) -> &'static str {
    match os_id {
        "ubuntu" | "debian" => "/usr/local/share/ca-certificates",
        "sles" | "sl-micro" | "opensuse-leap" => "/etc/pki/trust/anchors",
        _ => "/etc/pki/ca-trust/source/anchors",
    }
}

/// Kernel module parameter files the driver container reads from `/drivers`.
const MODULE_CONFIG_FILES: [&str; 4] = [
    "nvidia.conf",
    "nvidia-uvm.conf",
    "nvidia-modeset.conf",
    "nvidia-peermem.conf",
];

pub(crate) fn render(ctx: &Ctx<'_>) -> Result<Vec<Value>, RenderError> {
    let spec = ctx.spec;
    let precompiled = spec.driver_use_precompiled();
    let driver_image = image::upstream(
        ctx,
        "spec.driver",
        Some(&spec.driver.image),
        "DRIVER_IMAGE",
        Some(chart::DRIVER),
    )?;
    if precompiled && driver_image.is_digest() {
        return Err(RenderError {
            path: "spec.driver.version".into(),
            message: "a digest cannot be used with usePrecompiled: the tag carries the kernel"
                .into(),
        });
    }
    let manager = spec.driver.manager.as_ref();
    let manager_image = image::upstream(
        ctx,
        "spec.driver.manager",
        manager.map(|m| &m.image),
        "DRIVER_MANAGER_IMAGE",
        Some(chart::DRIVER_MANAGER),
    )?
    .reference();
    let gds = match &spec.gds {
        Some(g) if spec.gds_enabled() => Some((
            g,
            image::upstream(
                ctx,
                "spec.gds",
                Some(&g.image),
                "GDS_IMAGE",
                Some(chart::GDS),
            )?,
        )),
        _ => None,
    };
    let gdrcopy = match &spec.gdrcopy {
        Some(g) if spec.gdrcopy_enabled() => Some((
            g,
            image::upstream(
                ctx,
                "spec.gdrcopy",
                Some(&g.image),
                "GDRCOPY_IMAGE",
                Some(chart::GDRCOPY),
            )?,
        )),
        _ => None,
    };

    let mut out = service_account(ctx, SERVICE_ACCOUNT, &[], RBAC)?;
    let pools = pools(ctx, precompiled);
    let single = pools.len() == 1 && !precompiled;
    for pool in &pools {
        let name = if single {
            DAEMONSET.to_string()
        } else {
            format!("{DAEMONSET}-{}", sanitize(&pool.suffix()))
        };
        let shape = Shape {
            app: label_value(&name),
            name,
            service_account: SERVICE_ACCOUNT.to_string(),
            node_selector: Vec::new(),
            labels: Vec::new(),
            pod_spec: serde_json::Map::new(),
        };
        let parts = Parts {
            image: driver_image.with_suffix(&pool.suffix()),
            manager_image: manager_image.clone(),
            gds: gds
                .as_ref()
                .map(|(g, i)| (*g, i.with_suffix(&pool.os_tag()))),
            gdrcopy: gdrcopy
                .as_ref()
                .map(|(g, i)| (*g, i.with_suffix(&pool.os_tag()))),
        };
        out.push(daemonset(ctx, shape, pool, parts)?);
    }
    Ok(out)
}

/// The resolved images of one pool's DaemonSet.
pub(crate) struct Parts<'a> {
    pub image: String,
    pub manager_image: String,
    pub gds: Option<(&'a gantry_api::cluster_policy::DriverAddonSpec, String)>,
    pub gdrcopy: Option<(&'a gantry_api::cluster_policy::DriverAddonSpec, String)>,
}

/// What differs between the ClusterPolicy's driver DaemonSets and an NVIDIADriver's: names,
/// the extra node selector and labels, and pod spec fields (affinity).
pub(crate) struct Shape {
    pub name: String,
    pub app: String,
    pub service_account: String,
    pub node_selector: Vec<(String, String)>,
    pub labels: Vec<(String, String)>,
    pub pod_spec: Map<String, Value>,
}

pub(crate) fn daemonset(
    ctx: &Ctx<'_>,
    shape: Shape,
    pool: &Pool,
    parts: Parts<'_>,
) -> Result<Value, RenderError> {
    let spec = ctx.spec;
    let d = &spec.driver;
    let mut volumes = vec![
        host_volume(vol::RUN_NVIDIA, "/run/nvidia", "DirectoryOrCreate"),
        host_volume("var-log", "/var/log", ""),
        host_volume("dev-log", "/dev/log", ""),
        host_volume("host-os-release", "/etc/os-release", ""),
        host_volume(
            "run-nvidia-topologyd",
            "/run/nvidia-topologyd",
            "DirectoryOrCreate",
        ),
        host_volume(
            "run-mellanox-drivers",
            "/run/mellanox/drivers",
            "DirectoryOrCreate",
        ),
        host_volume(
            "run-nvidia-fabricmanager",
            "/run/nvidia-fabricmanager",
            "DirectoryOrCreate",
        ),
        host_volume(
            "firmware-search-path",
            "/sys/module/firmware_class/parameters/path",
            "",
        ),
        host_volume(
            "sysfs-memory-online",
            "/sys/devices/system/memory/auto_online_blocks",
            "",
        ),
        host_volume(
            "nv-firmware",
            "/run/nvidia/driver/lib/firmware",
            "DirectoryOrCreate",
        ),
        host_volume(vol::HOST_ROOT, spec.host_root(), ""),
        host_volume("host-sys", "/sys", "Directory"),
    ];
    let mut mounts = vec![
        mount_bidi(vol::RUN_NVIDIA, "/run/nvidia"),
        mount("var-log", "/var/log"),
        mount("dev-log", "/dev/log"),
        mount_ro("host-os-release", "/host-etc/os-release"),
        mount("run-nvidia-topologyd", "/run/nvidia-topologyd"),
        json!({ "name": "run-mellanox-drivers", "mountPath": "/run/mellanox/drivers", "mountPropagation": "HostToContainer" }),
        mount("run-nvidia-fabricmanager", "/run/nvidia-fabricmanager"),
        mount(
            "firmware-search-path",
            "/sys/module/firmware_class/parameters/path",
        ),
        mount(
            "sysfs-memory-online",
            "/sys/devices/system/memory/auto_online_blocks",
        ),
        mount("nv-firmware", "/lib/firmware"),
    ];
    let nonempty = |s: Option<&String>| s.filter(|v| !v.is_empty()).cloned();
    if let Some(cm) = nonempty(
        d.repo_config
            .as_ref()
            .and_then(|c| c.config_map_name.as_ref()),
    ) {
        volumes.push(config_map_volume("repo-config", &cm, false));
        mounts.push(mount_ro("repo-config", repo_dir(&pool.os_id)));
    }
    if let Some(cm) = nonempty(d.cert_config.as_ref().and_then(|c| c.name.as_ref())) {
        volumes.push(config_map_volume("cert-config", &cm, false));
        mounts.push(mount_ro("cert-config", cert_dir(&pool.os_id)));
    }
    if let Some(l) = &d.licensing_config {
        let source = match (
            nonempty(l.secret_name.as_ref()),
            nonempty(l.config_map_name.as_ref()),
        ) {
            (Some(s), _) => {
                Some(json!({ "name": "licensing-config", "secret": { "secretName": s } }))
            }
            (None, Some(cm)) => Some(config_map_volume("licensing-config", &cm, false)),
            (None, None) => None,
        };
        if let Some(v) = source {
            volumes.push(v);
            mounts.push(json!({ "name": "licensing-config", "mountPath": "/drivers/gridd.conf", "subPath": "gridd.conf", "readOnly": true }));
            if l.nls_enabled == Some(true) {
                mounts.push(json!({
                    "name": "licensing-config",
                    "mountPath": "/drivers/ClientConfigToken/client_configuration_token.tok",
                    "subPath": "client_configuration_token.tok",
                    "readOnly": true,
                }));
            }
        }
    }
    if let Some(cm) = nonempty(d.virtual_topology.as_ref().and_then(|c| c.config.as_ref())) {
        volumes.push(config_map_volume("topologyd-config", &cm, false));
        mounts.push(json!({ "name": "topologyd-config", "mountPath": "/etc/nvidia/nvidia-topologyd.conf", "subPath": "nvidia-topologyd.conf", "readOnly": true }));
    }
    if let Some(cm) = nonempty(
        d.kernel_module_config
            .as_ref()
            .and_then(|c| c.name.as_ref()),
    ) {
        volumes.push(json!({ "name": "kernel-module-config", "configMap": { "name": cm, "optional": true } }));
        for f in MODULE_CONFIG_FILES {
            mounts.push(json!({ "name": "kernel-module-config", "mountPath": format!("/drivers/{f}"), "subPath": f, "readOnly": true }));
        }
    }

    let module_type = match spec.kernel_module_type() {
        KernelModuleType::Auto => "auto",
        KernelModuleType::Open => "open",
        KernelModuleType::Proprietary => "proprietary",
    };
    let mut base_env = vec![env("KERNEL_MODULE_TYPE", module_type)];
    if spec.rdma_enabled() {
        base_env.push(env("GPU_DIRECT_RDMA_ENABLED", "true"));
        if spec.rdma_use_host_mofed() {
            base_env.push(env("USE_HOST_MOFED", "true"));
        }
    }
    let mut ctr = Container::new("nvidia-driver-ctr", parts.image);
    ctr.image_spec = Some(&d.image);
    ctr.command = vec!["nvidia-driver".into()];
    ctr.args = vec!["init".into()];
    ctr.env = merge_env("spec.driver.env", base_env, d.container.env.as_ref())?;
    ctr.mounts = mounts;
    ctr.privileged = true;
    ctr.settings = Some(("spec.driver", &d.container));
    ctr.extra.insert(
        "securityContext".into(),
        json!({ "privileged": true, "seLinuxOptions": { "level": "s0" } }),
    );
    let ready = format!(
        "{}/{}",
        names::VALIDATIONS_DIR,
        names::ready_file::DRIVER_CTR
    );
    let mut startup = probe(d.startup_probe.as_ref(), (60, 10, 60, 120));
    startup.insert(
        "exec".into(),
        json!({ "command": ["sh", "-c", format!("nvidia-smi && touch {ready}")] }),
    );
    ctr.extra
        .insert("startupProbe".into(), Value::Object(startup));
    for (key, p) in [
        ("livenessProbe", &d.liveness_probe),
        ("readinessProbe", &d.readiness_probe),
    ] {
        if let Some(p) = p {
            let mut m = probe(Some(p), (60, 30, 60, 1));
            m.insert(
                "exec".into(),
                json!({ "command": ["sh", "-c", "lsmod | grep nvidia"] }),
            );
            ctr.extra.insert(key.into(), Value::Object(m));
        }
    }
    ctr.extra.insert(
        "lifecycle".into(),
        json!({ "preStop": { "exec": { "command": ["sh", "-c", format!("rm -f {ready}")] } } }),
    );
    if let Some(secret) = nonempty(d.secret_env.as_ref()) {
        ctr.extra.insert(
            "envFrom".into(),
            json!([{ "secretRef": { "name": secret } }]),
        );
    }
    let mut containers = vec![ctr.json()?];
    for (cname, cmd, addon, path) in [
        ("nvidia-fs-ctr", "nvidia-gds-driver", &parts.gds, "spec.gds"),
        (
            "nvidia-gdrcopy-ctr",
            "nvidia-gdrcopy-driver",
            &parts.gdrcopy,
            "spec.gdrcopy",
        ),
    ] {
        if let Some((a, img)) = addon {
            let mut c = Container::new(cname, img.clone());
            c.image_spec = Some(&a.image);
            c.command = vec![cmd.into()];
            c.args = vec!["start".into()];
            c.env = merge_env(&format!("{path}.env"), Vec::new(), a.container.env.as_ref())?;
            c.mounts = vec![
                mount_bidi(vol::RUN_NVIDIA, "/run/nvidia"),
                mount("var-log", "/var/log"),
            ];
            c.privileged = true;
            c.settings = Some((path, &a.container));
            containers.push(c.json()?);
        }
    }

    let manager_env = merge_env(
        "spec.driver.manager.env",
        vec![
            env_field("NODE_NAME", "spec.nodeName"),
            env("NVIDIA_VISIBLE_DEVICES", "void"),
            env("ENABLE_GPU_POD_EVICTION", "true"),
            env("ENABLE_AUTO_DRAIN", "false"),
            env("DRAIN_USE_FORCE", "false"),
            env("DRAIN_POD_SELECTOR_LABEL", ""),
            env("DRAIN_TIMEOUT_SECONDS", "0s"),
            env("DRAIN_DELETE_EMPTYDIR_DATA", "false"),
            env_field("OPERATOR_NAMESPACE", "metadata.namespace"),
        ],
        d.manager.as_ref().and_then(|m| m.env.as_ref()),
    )?;
    let mut init = Container::new("k8s-driver-manager", parts.manager_image);
    init.image_spec = d.manager.as_ref().map(|m| &m.image);
    init.command = vec!["driver-manager".into()];
    init.args = vec!["uninstall_driver".into()];
    init.env = manager_env;
    init.privileged = true;
    init.mounts = vec![
        mount_bidi(vol::RUN_NVIDIA, "/run/nvidia"),
        json!({ "name": vol::HOST_ROOT, "mountPath": "/host", "readOnly": true, "mountPropagation": "HostToContainer" }),
        mount("host-sys", "/sys"),
        json!({ "name": "run-mellanox-drivers", "mountPath": "/run/mellanox/drivers", "mountPropagation": "HostToContainer" }),
    ];

    let mut ds = DaemonSet::new(&shape.name, names::operand::DRIVER, &shape.service_account);
    ds.app = shape.app;
    ds.node_selector = vec![
        (names::NFD_OS_RELEASE_ID.into(), pool.os_id.clone()),
        (
            names::NFD_OS_RELEASE_VERSION_ID.into(),
            pool.version_id.clone(),
        ),
    ];
    if let Some(k) = &pool.kernel {
        ds.node_selector
            .push((names::NFD_KERNEL_VERSION_FULL.into(), k.clone()));
    }
    ds.node_selector.extend(shape.node_selector);
    for (k, v) in shape.labels {
        ds.labels.insert(k, v.into());
    }
    ds.labels.insert(
        names::LABEL_APP_COMPONENT.into(),
        names::COMPONENT_NVIDIA_DRIVER.into(),
    );
    ds.extra_pod_spec = shape.pod_spec;
    ds.init = vec![init.json()?];
    ds.containers = containers;
    ds.volumes = volumes;
    ds.host_pid = true;
    ds.host_network = d.container.host_network == Some(true);
    ds.on_delete = true;
    ds.pull_secrets = vec![&d.image];
    if let Some(m) = &d.manager {
        ds.pull_secrets.push(&m.image);
    }
    for (g, _) in [&parts.gds, &parts.gdrcopy].into_iter().flatten() {
        ds.pull_secrets.push(&g.image);
    }
    ds.pod_annotations.insert(
        "kubectl.kubernetes.io/default-container".into(),
        "nvidia-driver-ctr".into(),
    );
    ds.json(ctx)
}

/// Probe timings: the CR's values over `(initialDelay, period, timeout, failureThreshold)`.
fn probe(
    p: Option<&gantry_api::common::ContainerProbeSpec>,
    (delay, period, timeout, failures): (i32, i32, i32, i32),
) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert(
        "initialDelaySeconds".into(),
        p.and_then(|p| p.initial_delay_seconds)
            .unwrap_or(delay)
            .into(),
    );
    m.insert(
        "periodSeconds".into(),
        p.and_then(|p| p.period_seconds).unwrap_or(period).into(),
    );
    m.insert(
        "timeoutSeconds".into(),
        p.and_then(|p| p.timeout_seconds).unwrap_or(timeout).into(),
    );
    m.insert(
        "successThreshold".into(),
        p.and_then(|p| p.success_threshold).unwrap_or(1).into(),
    );
    m.insert(
        "failureThreshold".into(),
        p.and_then(|p| p.failure_threshold)
            .unwrap_or(failures)
            .into(),
    );
    m
}
