//! Pure render: (ClusterPolicy, cluster facts) -> the objects each operand state wants.
//!
//! The reconciler applies every enabled state's objects in order with server-side apply and
//! deletes what a state owned before but no longer renders (objects carry
//! [`LABEL_STATE`] so they can be found again). Nothing here does I/O.
//!
//! One module per operand group: `prereq` (RuntimeClasses, operator metrics), `driver`,
//! `toolkit`, `validator` (validator, node status exporter, the validation init containers),
//! `device_plugin` (device plugin, GFD, MPS control daemon), `dcgm` (host engine, exporter),
//! `mig_manager`, `sandbox`; `validate` checks the spec first. Which image each operand runs
//! is the rule in [`image`]. Per node, operands start in order through init containers that
//! wait on `/run/nvidia/validations/*-ready` (driver → toolkit → validator → the rest).
//!
//! `nvdriver` renders one NVIDIADriver CR's driver DaemonSets ([`render_nvidia_driver`]) from
//! the same driver pod, for the NVIDIADriver controller ([`crate::nvdriver`]).

mod dcgm;
mod device_plugin;
mod driver;
pub mod image;
mod meta;
mod mig_manager;
mod nvdriver;
mod pod;
mod prereq;
mod sandbox;
#[cfg(test)]
mod tests;
mod toolkit;
mod validate;
mod validator;

use std::collections::BTreeMap;

use gantry_api::cluster_policy::ClusterPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

pub use image::DEFAULT_IMAGE;
pub use nvdriver::{
    LABEL_NVIDIA_DRIVER, NvDriverError, driver_name, owner_value, render_nvidia_driver,
    sanitized_kernel, string_hash,
};

/// Label on every rendered object: the operand state that owns it (`state-driver`, ...).
pub const LABEL_STATE: &str = "gantry.dev/operand-state";
/// Label on every rendered object.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "gantry";

/// The operand states, in the order upstream walks them (`reference/gpu-operator.md` §3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum State {
    PreRequisites,
    OperatorMetrics,
    Driver,
    ContainerToolkit,
    OperatorValidation,
    DevicePlugin,
    MpsControlDaemon,
    Dcgm,
    DcgmExporter,
    Gfd,
    MigManager,
    NodeStatusExporter,
    VgpuManager,
    VgpuDeviceManager,
    SandboxValidation,
    VfioManager,
    SandboxDevicePlugin,
    KataDevicePlugin,
    CcManager,
}

impl State {
    pub const ALL: [State; 19] = [
        State::PreRequisites,
        State::OperatorMetrics,
        State::Driver,
        State::ContainerToolkit,
        State::OperatorValidation,
        State::DevicePlugin,
        State::MpsControlDaemon,
        State::Dcgm,
        State::DcgmExporter,
        State::Gfd,
        State::MigManager,
        State::NodeStatusExporter,
        State::VgpuManager,
        State::VgpuDeviceManager,
        State::SandboxValidation,
        State::VfioManager,
        State::SandboxDevicePlugin,
        State::KataDevicePlugin,
        State::CcManager,
    ];

    /// Upstream's state name (the value of [`LABEL_STATE`]).
    pub fn name(self) -> &'static str {
        match self {
            State::PreRequisites => "pre-requisites",
            State::OperatorMetrics => "state-operator-metrics",
            State::Driver => "state-driver",
            State::ContainerToolkit => "state-container-toolkit",
            State::OperatorValidation => "state-operator-validation",
            State::DevicePlugin => "state-device-plugin",
            State::MpsControlDaemon => "state-mps-control-daemon",
            State::Dcgm => "state-dcgm",
            State::DcgmExporter => "state-dcgm-exporter",
            State::Gfd => "gpu-feature-discovery",
            State::MigManager => "state-mig-manager",
            State::NodeStatusExporter => "state-node-status-exporter",
            State::VgpuManager => "state-vgpu-manager",
            State::VgpuDeviceManager => "state-vgpu-device-manager",
            State::SandboxValidation => "state-sandbox-validation",
            State::VfioManager => "state-vfio-manager",
            State::SandboxDevicePlugin => "state-sandbox-device-plugin",
            State::KataDevicePlugin => "state-kata-device-plugin",
            State::CcManager => "state-cc-manager",
        }
    }
}

/// What the render needs to know about the cluster besides the policy.
#[derive(Clone, Debug, Default)]
pub struct ClusterFacts {
    /// The operator's namespace: namespaced operand objects go here.
    pub namespace: String,
    /// Gantry's own image (`gantry node <agent>` runs from it).
    pub operator_image: String,
    /// Nodes with `nvidia.com/gpu.present=true` (name and labels). Empty: no DaemonSets.
    pub gpu_nodes: Vec<NodeFacts>,
    /// The Prometheus operator's CRDs exist (render ServiceMonitor / PrometheusRule).
    pub has_service_monitor_crd: bool,
    pub has_prometheus_rule_crd: bool,
    /// Controller owner reference to the ClusterPolicy, set on every rendered object.
    pub owner: Option<OwnerReference>,
    /// Upstream's OLM-style image env vars of the operator pod (`DRIVER_IMAGE`, `DCGM_IMAGE`,
    /// `DEVICE_PLUGIN_IMAGE`, ...): the fallback for an upstream-image operand whose CR
    /// section names no image. Empty: the upstream chart defaults are used.
    pub image_env: BTreeMap<String, String>,
    /// Container runtime of the GPU nodes (`containerd`, `crio`, `docker`), as upstream
    /// detects it from `node.status.nodeInfo.containerRuntimeVersion`. Empty: containerd.
    pub container_runtime: String,
    /// Labels of the operator's own pods, which the operator metrics Service selects.
    /// Empty: the Helm chart's `app.kubernetes.io/name=gantry`,
    /// `app.kubernetes.io/component=operator`.
    pub operator_labels: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeFacts {
    pub name: String,
    /// The node's labels the render reads ([`NODE_LABELS`]; others may be left out).
    pub labels: BTreeMap<String, String>,
}

/// The node labels a render reads (the driver image's OS and kernel tags).
pub const NODE_LABELS: &[&str] = &[
    gantry_api::names::NFD_OS_RELEASE_ID,
    gantry_api::names::NFD_OS_RELEASE_VERSION_ID,
    gantry_api::names::NFD_KERNEL_VERSION_FULL,
];

/// One state's wanted objects. `enabled == false`: the state renders nothing and the
/// reconciler deletes whatever carries its [`LABEL_STATE`].
#[derive(Clone, Debug, PartialEq)]
pub struct StateObjects {
    pub state: State,
    pub enabled: bool,
    /// Whole manifests (`apiVersion`, `kind`, `metadata.name`, `metadata.namespace` when
    /// namespaced, the two labels above), in apply order (ServiceAccount, RBAC, ConfigMaps,
    /// Service, ServiceMonitor, DaemonSet, PrometheusRule).
    pub objects: Vec<serde_json::Value>,
}

/// An invalid ClusterPolicy: `path` is the field (`spec.mig.strategy`), `message` what is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("ClusterPolicy {path}: {message}")]
pub struct RenderError {
    pub path: String,
    pub message: String,
}

/// Every state, in [`State::ALL`] order. An invalid spec is an error and nothing is rendered.
///
/// A disabled state comes back with `enabled: false` and no objects. With no GPU nodes in
/// `facts.gpu_nodes` no DaemonSet is rendered (upstream's rule); the other objects are.
/// Same input, same output, byte for byte: the reconciler's "no change, no write" rests on it.
pub fn render(
    policy: &ClusterPolicy,
    facts: &ClusterFacts,
) -> Result<Vec<StateObjects>, RenderError> {
    let spec = &policy.spec;
    validate::validate(spec)?;
    let mut out = Vec::with_capacity(State::ALL.len());
    for state in State::ALL {
        let ctx = meta::Ctx { spec, facts, state };
        let enabled = enabled(&ctx);
        let mut objects = if enabled { objects(&ctx)? } else { Vec::new() };
        if facts.gpu_nodes.is_empty() {
            objects.retain(|o| !meta::is_daemonset(o));
        }
        // Stable sort: upstream's apply order of kinds, builders' order within a kind.
        objects.sort_by_key(meta::kind_rank);
        out.push(StateObjects {
            state,
            enabled,
            objects,
        });
    }
    Ok(out)
}

/// Whether a state is on (reference §3.1 "Enabled when").
fn enabled(ctx: &meta::Ctx<'_>) -> bool {
    use gantry_api::cluster_policy::SandboxMode;
    let s = ctx.spec;
    let sandbox = s.sandbox_workloads_enabled();
    match ctx.state {
        State::PreRequisites => !s.cdi_nri_plugin_enabled(),
        State::OperatorMetrics | State::OperatorValidation => true,
        State::Driver => s.driver_state_enabled(),
        State::ContainerToolkit => s.toolkit_enabled(),
        State::DevicePlugin | State::MpsControlDaemon => s.device_plugin_enabled(),
        State::Dcgm => s.dcgm_enabled(),
        State::DcgmExporter => s.dcgm_exporter_enabled(),
        State::Gfd => s.gfd_enabled(),
        State::MigManager => s.mig_manager_enabled(),
        State::NodeStatusExporter => s.node_status_exporter_enabled(),
        State::VgpuManager => sandbox && s.vgpu_manager_enabled() && !s.use_nvidia_driver_crd(),
        State::VgpuDeviceManager => sandbox && s.vgpu_device_manager_enabled(),
        State::SandboxValidation => sandbox,
        State::VfioManager => sandbox && s.vfio_manager_enabled(),
        State::SandboxDevicePlugin => {
            sandbox
                && s.sandbox_device_plugin_enabled()
                && s.sandbox_mode() == SandboxMode::Kubevirt
        }
        State::KataDevicePlugin => {
            sandbox
                && s.kata_sandbox_device_plugin_enabled()
                && s.sandbox_mode() == SandboxMode::Kata
        }
        State::CcManager => {
            sandbox && s.cc_manager_enabled() && s.sandbox_mode() == SandboxMode::Kata
        }
    }
}

fn objects(ctx: &meta::Ctx<'_>) -> Result<Vec<serde_json::Value>, RenderError> {
    match ctx.state {
        State::PreRequisites => prereq::runtime_classes(ctx),
        State::OperatorMetrics => prereq::operator_metrics(ctx),
        State::Driver => driver::render(ctx),
        State::ContainerToolkit => toolkit::render(ctx),
        State::OperatorValidation => validator::render(ctx),
        State::DevicePlugin => device_plugin::render(ctx),
        State::MpsControlDaemon => device_plugin::mps_control_daemon(ctx),
        State::Dcgm => dcgm::hostengine(ctx),
        State::DcgmExporter => dcgm::exporter(ctx),
        State::Gfd => device_plugin::gfd(ctx),
        State::MigManager => mig_manager::render(ctx),
        State::NodeStatusExporter => validator::node_status_exporter(ctx),
        State::VgpuManager => sandbox::vgpu_manager(ctx),
        State::VgpuDeviceManager => sandbox::vgpu_device_manager(ctx),
        State::SandboxValidation => sandbox::sandbox_validator(ctx),
        State::VfioManager => sandbox::vfio_manager(ctx),
        State::SandboxDevicePlugin => sandbox::sandbox_device_plugin(ctx),
        State::KataDevicePlugin => sandbox::kata_device_plugin(ctx),
        State::CcManager => sandbox::cc_manager(ctx),
    }
}
