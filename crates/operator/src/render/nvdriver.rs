//! NVIDIADriver (nvidia.com/v1alpha1): one CR and the GPU nodes it owns -> its driver
//! DaemonSets, one per OS pool of those nodes (per kernel too with precompiled drivers), named
//! and selected the way upstream's `internal/state/driver.go` does:
//!
//! - DaemonSet (and its `app` label): `nvidia-<driverType>-driver-<osTag>-<hash>`, the hash
//!   (FNV-32a, Kubernetes' safe encoding) over the CR's uid and, when precompiled, `-<kernel>`;
//!   ServiceAccount and RBAC: `nvidia-<driverType>-driver-<cr>-<osTag>`
//!   (`nvidia-vgpu-manager-<cr>-<osTag>` for `vgpu-host-manager`).
//! - Labels `nvidia.com/node.os-version`, `nvidia.com/precompiled` (and
//!   `nvidia.com/precompiled.kernel-version`), the CR's `labels` less `app` / `app.kubernetes.io/*`.
//! - Node selector: `gpu.deploy.driver`, `gpu.present`, the CR's `nodeSelector`, the pool's OS
//!   (and kernel) labels, and the owner label the operator sets
//!   (`nvidia.com/gpu-operator.driver.owner=<cr>`), so a node two CRs select runs neither.
//! - Image: the CR's `repository/image:version-<osTag>` (precompiled:
//!   `version-<kernel>-<osTag>`), never an operator env var; a digest is used as is.
//!
//! The pod itself is the ClusterPolicy driver's (`driver.rs`), rendered from a ClusterPolicy
//! spec whose `driver`, `gds`, `gdrcopy` and `daemonsets` come from the CR (upstream's
//! NVIDIADriver template is the same container, mounts and probes).

use std::collections::BTreeSet;

use gantry_api::cluster_policy::{
    ClusterPolicySpec, DaemonsetsSpec, DriverAddonSpec, DriverSpec, LicensingConfigSpec,
    RepoConfigSpec, VirtualTopologySpec,
};
use gantry_api::common::{ContainerProbeSpec, ContainerSettings, ImageSpec};
use gantry_api::names;
use gantry_api::nvidia_driver::{DriverAddon, DriverType, NVIDIADriver, NVIDIADriverSpec};
use serde_json::{Map, Value, json};

use super::driver::{self, Parts, Pool, Shape};
use super::image::{self, Resolved, chart};
use super::meta::{Ctx, service_account};
use super::{ClusterFacts, LABEL_STATE, State};

/// On every object an NVIDIADriver renders: the CR's name. The ClusterPolicy reconciler's
/// state label is left off, so neither controller deletes the other's objects.
pub const LABEL_NVIDIA_DRIVER: &str = "gantry.dev/nvidia-driver";
pub const LABEL_OS_VERSION: &str = "nvidia.com/node.os-version";
pub const LABEL_PRECOMPILED: &str = "nvidia.com/precompiled";
pub const LABEL_PRECOMPILED_KERNEL: &str = "nvidia.com/precompiled.kernel-version";

/// Why an NVIDIADriver renders nothing: the CR, the field and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("NVIDIADriver {name} {path}: {message}")]
pub struct NvDriverError {
    pub name: String,
    pub path: String,
    pub message: String,
}

/// The CR's objects (ServiceAccount, RBAC, DaemonSets), for `facts.gpu_nodes` — the nodes it
/// owns. `base` is the active ClusterPolicy's spec (host paths). No nodes: no objects.
pub fn render_nvidia_driver(
    base: &ClusterPolicySpec,
    cr: &NVIDIADriver,
    facts: &ClusterFacts,
) -> Result<Vec<Value>, NvDriverError> {
    let name = cr.metadata.name.clone().unwrap_or_default();
    let err = |path: &str, message: String| NvDriverError {
        name: name.clone(),
        path: path.to_string(),
        message,
    };
    let s = &cr.spec;
    if let Some((path, message)) = s.validate().into_iter().next() {
        return Err(err(&path, message));
    }
    let driver_image = resolve_driver_image(s).map_err(|m| err("spec.image", m))?;
    if s.use_precompiled() && driver_image.is_digest() {
        return Err(err(
            "spec.version",
            "a digest cannot be used with usePrecompiled: the tag carries the kernel".into(),
        ));
    }
    let spec = overlay(base, s);
    let ctx = Ctx {
        spec: &spec,
        facts,
        state: State::Driver,
    };
    let from_shared = |e: super::RenderError| {
        let path = e
            .path
            .replacen("spec.driver", "spec", 1)
            .replacen("spec.daemonsets", "spec", 1);
        err(&path, e.message)
    };
    let manager_image = image::upstream(
        &ctx,
        "spec.manager",
        spec.driver.manager.as_ref().map(|m| &m.image),
        "DRIVER_MANAGER_IMAGE",
        Some(chart::DRIVER_MANAGER),
    )
    .map_err(from_shared)?
    .reference();
    let addon =
        |a: &Option<DriverAddonSpec>, path: &str, env: &str, default: (&str, &str, &str)| match a {
            Some(g) if g.enabled == Some(true) => {
                image::upstream(&ctx, path, Some(&g.image), env, Some(default)).map(Some)
            }
            _ => Ok(None),
        };
    let gds = addon(&spec.gds, "spec.gds", "GDS_IMAGE", chart::GDS).map_err(from_shared)?;
    let gdrcopy = addon(
        &spec.gdrcopy,
        "spec.gdrcopy",
        "GDRCOPY_IMAGE",
        chart::GDRCOPY,
    )
    .map_err(from_shared)?;

    let precompiled = s.use_precompiled();
    let uid = cr.metadata.uid.clone().unwrap_or_default();
    let mut out = Vec::new();
    let mut accounts = BTreeSet::new();
    for pool in driver::pools(&ctx, precompiled) {
        let account = driver_name(s.driver_type(), &name, &pool.os_tag());
        if accounts.insert(account.clone()) {
            out.extend(service_account(&ctx, &account, &[], driver::RBAC).map_err(from_shared)?);
        }
        let app = app_name(s.driver_type(), &pool, &uid);
        let shape = Shape {
            name: app.clone(),
            app,
            service_account: account,
            node_selector: node_selector(s, &name),
            labels: pool_labels(s, &pool),
            pod_spec: affinity(s).map_err(|m| err("spec.nodeAffinity", m))?,
        };
        let parts = Parts {
            image: driver_image.with_suffix(&pool.suffix()),
            manager_image: manager_image.clone(),
            gds: spec
                .gds
                .as_ref()
                .zip(gds.as_ref())
                .map(|(g, i)| (g, i.with_suffix(&pool.os_tag()))),
            gdrcopy: spec
                .gdrcopy
                .as_ref()
                .zip(gdrcopy.as_ref())
                .map(|(g, i)| (g, i.with_suffix(&pool.os_tag()))),
        };
        out.push(driver::daemonset(&ctx, shape, &pool, parts).map_err(from_shared)?);
    }
    for o in &mut out {
        relabel(o, &name);
    }
    Ok(out)
}

/// The driver image from the CR alone: `repository/image:version` (a `sha256:` version gives
/// `@sha256:…`), or `image` as a whole reference with a tag or digest.
fn resolve_driver_image(s: &NVIDIADriverSpec) -> Result<Resolved, String> {
    let nonempty = |o: &Option<String>| o.clone().filter(|v| !v.is_empty());
    let image = s.image_or_default().to_string();
    match (nonempty(&s.repository), nonempty(&s.version)) {
        (Some(repo), Some(v)) if v.starts_with("sha256:") => {
            Ok(Resolved::Digest(format!("{repo}/{image}@{v}")))
        }
        (Some(repo), Some(v)) => Ok(Resolved::Tagged {
            base: format!("{repo}/{image}"),
            tag: v,
        }),
        (None, Some(v)) if v.starts_with("sha256:") => Ok(Resolved::Digest(format!("{image}@{v}"))),
        (None, Some(v)) => Ok(Resolved::Tagged {
            base: image,
            tag: v,
        }),
        (_, None) => {
            let last = image.rsplit('/').next().unwrap_or(&image);
            if image.contains('@') || last.contains(':') {
                Ok(Resolved::Verbatim(image))
            } else {
                Err(format!(
                    "cannot resolve the driver image {image:?}: set spec.version (the driver \
                     version, e.g. \"580.95.05\"), or give spec.image as a full reference with a tag"
                ))
            }
        }
    }
}

/// The owner label value (and [`LABEL_NVIDIA_DRIVER`] value) for a CR name.
pub fn owner_value(cr: &str) -> String {
    driver::label_value(cr)
}

/// Upstream's `getDriverName`: the ServiceAccount / RBAC name of one pool.
pub fn driver_name(t: DriverType, cr: &str, os_tag: &str) -> String {
    let name = match t {
        DriverType::VgpuHostManager => format!("nvidia-vgpu-manager-{cr}-{os_tag}"),
        _ => format!("nvidia-{}-driver-{cr}-{os_tag}", t.as_str()),
    };
    name.chars().take(253).collect()
}

/// Upstream's `getDriverAppName`: the DaemonSet name and `app` label of one pool, at most 63
/// characters (the prefix is cut, never the hash).
pub(crate) fn app_name(t: DriverType, pool: &Pool, uid: &str) -> String {
    let prefix = format!("nvidia-{}-driver-{}", t.as_str(), pool.os_tag());
    let mut key = uid.to_string();
    if let Some(k) = &pool.kernel {
        key.push('-');
        key.push_str(k);
    }
    let hash = string_hash(&key);
    let keep = 63usize.saturating_sub(hash.len() + 1);
    let prefix: String = prefix.chars().take(keep).collect();
    format!("{prefix}-{hash}")
}

/// FNV-32a of `s`, its decimal digits mapped through Kubernetes' `rand.SafeEncodeString`
/// alphabet (no vowels, no confusable characters).
pub fn string_hash(s: &str) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut h: u32 = 0x811c_9dc5;
    for b in s.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h.to_string()
        .bytes()
        .map(|b| char::from(ALPHANUMS[usize::from(b) % ALPHANUMS.len()]))
        .collect()
}

/// The kernel as upstream puts it in labels: arch suffix dropped, `_` -> `.`, lower case.
pub fn sanitized_kernel(kernel: &str) -> String {
    let mut k = kernel.to_string();
    for arch in ["x86_64_64k", "aarch64_64k", "x86_64", "aarch64"] {
        k = k.replace(arch, "");
    }
    k.replace('_', ".")
        .trim_end_matches('.')
        .to_ascii_lowercase()
}

fn node_selector(s: &NVIDIADriverSpec, cr: &str) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = s.effective_node_selector().into_iter().collect();
    if !v.iter().any(|(k, _)| k == names::LABEL_GPU_PRESENT) {
        v.push((names::LABEL_GPU_PRESENT.into(), "true".into()));
    }
    v.push((names::LABEL_DRIVER_OWNER.into(), driver::label_value(cr)));
    v
}

fn pool_labels(s: &NVIDIADriverSpec, pool: &Pool) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = s
        .labels
        .iter()
        .flatten()
        .filter(|(k, _)| *k != names::LABEL_APP && !k.starts_with("app.kubernetes.io/"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    v.push((LABEL_OS_VERSION.into(), pool.os_tag()));
    v.push((LABEL_PRECOMPILED.into(), s.use_precompiled().to_string()));
    if let Some(k) = &pool.kernel {
        v.push((LABEL_PRECOMPILED_KERNEL.into(), sanitized_kernel(k)));
    }
    v
}

/// `affinity`: the CR's node affinity, and upstream's anti-affinity that keeps two driver pods
/// (of any CR) off one node.
fn affinity(s: &NVIDIADriverSpec) -> Result<Map<String, Value>, String> {
    let mut a = Map::new();
    if let Some(na) = &s.node_affinity {
        a.insert(
            "nodeAffinity".into(),
            serde_json::to_value(na).map_err(|e| format!("cannot be rendered: {e}"))?,
        );
    }
    a.insert(
        "podAntiAffinity".into(),
        json!({ "requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": { "matchExpressions": [{
                "key": names::LABEL_APP_COMPONENT,
                "operator": "In",
                "values": [names::COMPONENT_NVIDIA_DRIVER, "nvidia-vgpu-manager"],
            }]},
            "topologyKey": "kubernetes.io/hostname",
        }]}),
    );
    let mut pod = Map::new();
    pod.insert("affinity".into(), Value::Object(a));
    Ok(pod)
}

/// Swap the ClusterPolicy state label for the CR's label on the object and its pod template.
fn relabel(o: &mut Value, cr: &str) {
    let value = Value::String(driver::label_value(cr));
    for ptr in ["/metadata/labels", "/spec/template/metadata/labels"] {
        if let Some(Value::Object(l)) = o.pointer_mut(ptr) {
            l.remove(LABEL_STATE);
            l.insert(LABEL_NVIDIA_DRIVER.into(), value.clone());
        }
    }
}

fn image_spec(
    repository: &Option<String>,
    image: Option<String>,
    version: &Option<String>,
    pull_policy: &Option<String>,
    pull_secrets: &Option<Vec<String>>,
) -> ImageSpec {
    ImageSpec {
        repository: repository.clone(),
        image,
        version: version.clone(),
        image_pull_policy: pull_policy.clone(),
        image_pull_secrets: pull_secrets.clone(),
    }
}

fn addon_spec(a: &DriverAddon) -> DriverAddonSpec {
    DriverAddonSpec {
        enabled: a.enabled,
        image: image_spec(
            &a.repository,
            a.image.clone(),
            &a.version,
            &a.image_pull_policy,
            &a.image_pull_secrets,
        ),
        container: ContainerSettings {
            args: a.args.clone(),
            env: a.env.clone(),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The ClusterPolicy spec the shared driver render reads, with the CR in place of
/// `driver`, `gds`, `gdrcopy` and `daemonsets` (upstream's NVIDIADriver uses only the CR's
/// labels, annotations, tolerations, priority class and pod security context).
fn overlay(base: &ClusterPolicySpec, s: &NVIDIADriverSpec) -> ClusterPolicySpec {
    let name = |r: &Option<gantry_api::common::NameRef>| r.as_ref().and_then(|n| n.name.clone());
    let mut startup = s.startup_probe.clone();
    if startup.is_none() && s.use_precompiled() {
        // Precompiled modules load in seconds: upstream's default probe starts after 5 s.
        startup = Some(ContainerProbeSpec {
            initial_delay_seconds: Some(5),
            ..Default::default()
        });
    }
    let mut spec = base.clone();
    spec.driver = DriverSpec {
        enabled: Some(true),
        use_precompiled: s.use_precompiled,
        kernel_module_type: s.kernel_module_type,
        startup_probe: startup,
        liveness_probe: s.liveness_probe.clone(),
        readiness_probe: s.readiness_probe.clone(),
        rdma: s.rdma.clone(),
        image: image_spec(
            &s.repository,
            Some(s.image_or_default().to_string()),
            &s.version,
            &s.image_pull_policy,
            &s.image_pull_secrets,
        ),
        manager: s.manager.clone(),
        container: ContainerSettings {
            resources: s.resources.clone(),
            args: s.args.clone(),
            env: s.env.clone(),
            host_network: s.host_network,
        },
        repo_config: name(&s.repo_config).map(|n| RepoConfigSpec {
            config_map_name: Some(n),
            ..Default::default()
        }),
        cert_config: s.cert_config.clone(),
        licensing_config: s.licensing_config.as_ref().map(|l| LicensingConfigSpec {
            config_map_name: l.name.clone(),
            secret_name: l.secret_name.clone(),
            nls_enabled: Some(s.nls_enabled()),
            ..Default::default()
        }),
        virtual_topology: name(&s.virtual_topology_config).map(|n| VirtualTopologySpec {
            config: Some(n),
            ..Default::default()
        }),
        kernel_module_config: s.kernel_module_config.clone(),
        secret_env: s.secret_env.clone(),
        ..Default::default()
    };
    spec.gds = s.gds.as_ref().map(addon_spec);
    spec.gdrcopy = s.gdrcopy.as_ref().map(addon_spec);
    spec.daemonsets = DaemonsetsSpec {
        labels: None,
        annotations: s.annotations.clone(),
        tolerations: s.tolerations.clone(),
        priority_class_name: s.priority_class_name.clone(),
        pod_security_context: s.pod_security_context.clone(),
        ..Default::default()
    };
    spec
}
