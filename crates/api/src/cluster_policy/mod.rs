//! `ClusterPolicy` (nvidia.com/v1, cluster-scoped): the one object that configures the whole
//! GPU node stack. Every upstream section is accepted; nil `enabled` means the component's
//! default, which the accessor methods below apply so callers never re-derive it.

pub mod components;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{EffectiveUpgradePolicy, EnabledOnly, Extra, flag};
pub use components::*;

/// Spec of a [`ClusterPolicy`]. The nine sections upstream's CRD requires are plain fields;
/// the rest are optional.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    derive = "PartialEq",
    group = "nvidia.com",
    version = "v1",
    kind = "ClusterPolicy",
    plural = "clusterpolicies",
    singular = "clusterpolicy",
    status = "ClusterPolicyStatus",
    doc = "ClusterPolicy configures the GPU node stack (driver, toolkit, device plugin, discovery, exporter, MIG manager, validator).",
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.state"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPolicySpec {
    /// The operator's settings: runtime class, deprecated init container, its metrics.
    pub operator: OperatorSpec,
    /// Settings every operand DaemonSet gets: labels, annotations, priority class, tolerations, update strategy.
    pub daemonsets: DaemonsetsSpec,
    /// The NVIDIA driver container (NVIDIA's image) and how it is upgraded.
    pub driver: DriverSpec,
    /// The container toolkit: configures the container runtime and writes CDI specs (Gantry's agent).
    pub toolkit: ToolkitSpec,
    /// The kubelet device plugin advertising nvidia.com/gpu (Gantry's agent).
    pub device_plugin: DevicePluginSpec,
    /// The GPU metrics exporter, dcgm-exporter's metric names (Gantry's agent).
    pub dcgm_exporter: DcgmExporterSpec,
    /// The standalone DCGM host engine (NVIDIA's image).
    pub dcgm: DcgmSpec,
    /// The node status exporter: per-node readiness gauges (Gantry's agent).
    pub node_status_exporter: ComponentSpec,
    /// GPU feature discovery: the nvidia.com/* node labels (Gantry's agent).
    pub gfd: ComponentSpec,
    /// MIG: how MIG devices are exposed as resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<MigSpec>,
    /// The MIG manager: applies the layout a node's nvidia.com/mig.config label selects (Gantry's agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_manager: Option<MigManagerSpec>,
    /// Deprecated: PodSecurityPolicies are no longer supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psp: Option<EnabledOnly>,
    /// Label the operator namespace for Pod Security Admission `privileged`. nil means false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub psa: Option<EnabledOnly>,
    /// The operator validator: per-node checks of driver, toolkit, CUDA and plugin (Gantry's agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validator: Option<ValidatorSpec>,
    /// GPUDirect Storage (nvidia-fs) container in the driver pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gds: Option<DriverAddonSpec>,
    /// GDRCopy (gdrdrv) container in the driver pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gdrcopy: Option<DriverAddonSpec>,
    /// Sandboxed workloads (VM passthrough, vGPU) on labelled nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_workloads: Option<SandboxWorkloadsSpec>,
    /// The vGPU host manager (NVIDIA's image), for vm-vgpu nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vgpu_manager: Option<VgpuManagerSpec>,
    /// The vGPU device manager (NVIDIA's image), for vm-vgpu nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vgpu_device_manager: Option<VgpuDeviceManagerSpec>,
    /// The VFIO manager (NVIDIA's image): binds GPUs to vfio-pci on vm-passthrough nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vfio_manager: Option<VfioManagerSpec>,
    /// The KubeVirt GPU device plugin (NVIDIA's image), for VM workloads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_device_plugin: Option<ComponentSpec>,
    /// The Kata sandbox device plugin (NVIDIA's image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kata_sandbox_device_plugin: Option<ComponentSpec>,
    /// The Kata manager (deprecated upstream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kata_manager: Option<KataManagerSpec>,
    /// The confidential computing manager (NVIDIA's image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cc_manager: Option<CcManagerSpec>,
    /// Container Device Interface: CDI specs and the nvidia-cdi runtime class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cdi: Option<CdiSpec>,
    /// Host paths of the root filesystem and the driver install.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_paths: Option<HostPathsSpec>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `status.state`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum ClusterPolicyState {
    /// Not the active ClusterPolicy (an older one exists).
    Ignored,
    Ready,
    #[default]
    NotReady,
}

/// Status of a [`ClusterPolicy`]. Conditions `Ready` and `Error` are always written as a pair.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPolicyStatus {
    /// ready, notReady or ignored (another ClusterPolicy is in charge).
    pub state: ClusterPolicyState,
    /// Namespace the operator runs in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Ready and Error conditions, always written as a pair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// The ClusterPolicy in charge among `all` (the operator acts on it; the others are
/// `ignored`): not being deleted, oldest `creationTimestamp` (one without a timestamp after
/// those with one), ties broken by the lowest name.
pub fn active<T>(
    all: &[T],
    meta: impl Fn(&T) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<&T> {
    all.iter()
        .filter(|p| meta(p).deletion_timestamp.is_none())
        .min_by(|a, b| {
            let (a, b) = (meta(a), meta(b));
            let by_name = a.name.cmp(&b.name);
            match (&a.creation_timestamp, &b.creation_timestamp) {
                (Some(x), Some(y)) => x.0.cmp(&y.0).then(by_name),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => by_name,
            }
        })
}

/// Condition types and reasons the operator writes on a ClusterPolicy.
pub mod condition {
    pub const READY: &str = "Ready";
    pub const ERROR: &str = "Error";
    pub const REASON_RECONCILED: &str = "Reconciled";
    pub const REASON_NO_GPU_NODES: &str = "NoGPUNodes";
    pub const REASON_NFD_LABELS_MISSING: &str = "NFDLabelsMissing";
    pub const REASON_READY: &str = "Ready";
    pub const REASON_ERROR: &str = "Error";
    pub const REASON_RECONCILE_FAILED: &str = "ReconcileFailed";
    pub const REASON_OPERAND_NOT_READY: &str = "OperandNotReady";
    pub const REASON_DRIVER_NOT_READY: &str = "DriverNotReady";
    pub const REASON_NODE_STATUS_EXPORTER_NOT_READY: &str = "NodeStatusExporterNotReady";
    pub const REASON_PREREQUISITE_NOT_MET: &str = "PrerequisiteNotMet";
}

/// Defaults documented upstream, used by the accessors.
pub mod defaults {
    pub const RUNTIME_CLASS: &str = "nvidia";
    pub const TOOLKIT_INSTALL_DIR: &str = "/usr/local/nvidia";
    pub const MPS_ROOT: &str = "/run/nvidia/mps";
    pub const HOST_ROOT: &str = "/";
    pub const DRIVER_INSTALL_DIR: &str = "/run/nvidia/driver";
    pub const KUBELET_ROOT_DIR: &str = "/var/lib/kubelet";
    pub const ROLLING_MAX_UNAVAILABLE: &str = "1";
    pub const DEFAULT_MIG_PARTED_CONFIG_MAP: &str = "default-mig-parted-config";
    pub const DEFAULT_GPU_CLIENTS_CONFIG_MAP: &str = "default-gpu-clients";
    pub const DEFAULT_VGPU_DEVICES_CONFIG_MAP: &str = "default-vgpu-devices-config";
    pub const HPC_JOB_MAPPING_DIR: &str = "/var/lib/dcgm-exporter/job-mapping";
    pub const DCGM_HOST_PORT: i32 = 5555;
}

fn nonempty(s: &Option<String>) -> Option<&str> {
    s.as_deref().filter(|v| !v.is_empty())
}

impl ClusterPolicySpec {
    /// `driver.enabled` (nil ⇒ true).
    pub fn driver_enabled(&self) -> bool {
        flag(self.driver.enabled, true)
    }
    /// `driver.useNvidiaDriverCRD` (nil ⇒ false).
    pub fn use_nvidia_driver_crd(&self) -> bool {
        flag(self.driver.use_nvidia_driver_crd, false)
    }
    /// Whether the ClusterPolicy itself deploys the driver DaemonSet.
    pub fn driver_state_enabled(&self) -> bool {
        self.driver_enabled() && !self.use_nvidia_driver_crd()
    }
    pub fn driver_use_precompiled(&self) -> bool {
        flag(self.driver.use_precompiled, false)
    }
    pub fn kernel_module_type(&self) -> KernelModuleType {
        self.driver.kernel_module_type.unwrap_or_default()
    }
    pub fn rdma_enabled(&self) -> bool {
        flag(self.driver.rdma.as_ref().and_then(|r| r.enabled), false)
    }
    pub fn rdma_use_host_mofed(&self) -> bool {
        flag(
            self.driver.rdma.as_ref().and_then(|r| r.use_host_mofed),
            false,
        )
    }
    /// The driver upgrade policy with defaults, or `None` when `upgradePolicy` is absent
    /// (the upgrade machine is then off, as upstream).
    pub fn driver_upgrade_policy(&self) -> Option<EffectiveUpgradePolicy> {
        self.driver
            .upgrade_policy
            .as_ref()
            .map(|p| p.effective(false))
    }
    /// Whether automatic driver upgrades run (off with sandbox workloads).
    pub fn driver_auto_upgrade(&self) -> bool {
        !self.sandbox_workloads_enabled()
            && self.driver_upgrade_policy().is_some_and(|p| p.auto_upgrade)
    }
    /// `toolkit.enabled` (nil ⇒ true).
    pub fn toolkit_enabled(&self) -> bool {
        flag(self.toolkit.enabled, true)
    }
    pub fn toolkit_install_dir(&self) -> &str {
        nonempty(&self.toolkit.install_dir).unwrap_or(defaults::TOOLKIT_INSTALL_DIR)
    }
    /// `devicePlugin.enabled` (nil ⇒ true).
    pub fn device_plugin_enabled(&self) -> bool {
        flag(self.device_plugin.enabled, true)
    }
    /// `devicePlugin.config.name`, when set and non-empty.
    pub fn device_plugin_config_name(&self) -> Option<&str> {
        nonempty(&self.device_plugin.config.as_ref()?.name)
    }
    /// `devicePlugin.config.default`, when set and non-empty.
    pub fn device_plugin_config_default(&self) -> Option<&str> {
        nonempty(&self.device_plugin.config.as_ref()?.default)
    }
    pub fn mps_root(&self) -> &str {
        self.device_plugin
            .mps
            .as_ref()
            .and_then(|m| nonempty(&m.root))
            .unwrap_or(defaults::MPS_ROOT)
    }
    /// `dcgm.enabled` (nil ⇒ true in the API; the chart sets false).
    pub fn dcgm_enabled(&self) -> bool {
        flag(self.dcgm.enabled, true)
    }
    /// `dcgmExporter.enabled` (nil ⇒ true).
    pub fn dcgm_exporter_enabled(&self) -> bool {
        flag(self.dcgm_exporter.enabled, true)
    }
    pub fn dcgm_exporter_service_monitor_enabled(&self) -> bool {
        self.dcgm_exporter
            .service_monitor
            .as_ref()
            .is_some_and(|s| s.is_enabled())
    }
    /// `gfd.enabled` (nil ⇒ true).
    pub fn gfd_enabled(&self) -> bool {
        self.gfd.is_enabled(true)
    }
    /// `nodeStatusExporter.enabled` (nil ⇒ false).
    pub fn node_status_exporter_enabled(&self) -> bool {
        self.node_status_exporter.is_enabled(false)
    }
    /// `mig.strategy`; unset means the node components' default `none`.
    pub fn mig_strategy(&self) -> MigStrategy {
        self.mig
            .as_ref()
            .and_then(|m| m.strategy)
            .unwrap_or_default()
    }
    /// `migManager.enabled` (nil ⇒ true).
    pub fn mig_manager_enabled(&self) -> bool {
        flag(self.mig_manager.as_ref().and_then(|m| m.enabled), true)
    }
    /// The mig-parted ConfigMap name (`default-mig-parted-config` when unset).
    pub fn mig_manager_config_name(&self) -> &str {
        self.mig_manager
            .as_ref()
            .and_then(|m| m.config.as_ref())
            .and_then(|c| nonempty(&c.name))
            .unwrap_or(defaults::DEFAULT_MIG_PARTED_CONFIG_MAP)
    }
    /// Whether a custom mig-parted ConfigMap is named (the CRD's default name, which the API
    /// server fills in, is the operator's own).
    pub fn mig_manager_has_custom_config(&self) -> bool {
        self.mig_manager_config_name() != defaults::DEFAULT_MIG_PARTED_CONFIG_MAP
    }
    /// `migManager.config.default`: `Some("all-disabled")` (the default) or `None` for `""`.
    pub fn mig_manager_default_config(&self) -> Option<&'static str> {
        let d = self
            .mig_manager
            .as_ref()
            .and_then(|m| m.config.as_ref())
            .and_then(|c| c.default)
            .unwrap_or_default();
        match d {
            MigDefaultConfig::AllDisabled => Some("all-disabled"),
            MigDefaultConfig::Empty => None,
        }
    }
    pub fn mig_manager_gpu_clients_config(&self) -> &str {
        self.mig_manager
            .as_ref()
            .and_then(|m| m.gpu_clients_config.as_ref())
            .and_then(|c| nonempty(&c.name))
            .unwrap_or(defaults::DEFAULT_GPU_CLIENTS_CONFIG_MAP)
    }
    /// `psa.enabled` (nil ⇒ false).
    pub fn psa_enabled(&self) -> bool {
        flag(self.psa.as_ref().and_then(|p| p.enabled), false)
    }
    /// `sandboxWorkloads.enabled` (nil ⇒ false).
    pub fn sandbox_workloads_enabled(&self) -> bool {
        flag(
            self.sandbox_workloads.as_ref().and_then(|s| s.enabled),
            false,
        )
    }
    pub fn sandbox_default_workload(&self) -> WorkloadConfig {
        self.sandbox_workloads
            .as_ref()
            .and_then(|s| s.default_workload)
            .unwrap_or_default()
    }
    pub fn sandbox_mode(&self) -> SandboxMode {
        self.sandbox_workloads
            .as_ref()
            .and_then(|s| s.mode)
            .unwrap_or_default()
    }
    /// Workload config of a node from its `nvidia.com/gpu.workload.config` label value:
    /// always `container` when sandbox workloads are off; missing/invalid ⇒ the default.
    pub fn workload_config_for(&self, label: Option<&str>) -> WorkloadConfig {
        if !self.sandbox_workloads_enabled() {
            return WorkloadConfig::Container;
        }
        label
            .and_then(WorkloadConfig::from_label)
            .unwrap_or_else(|| self.sandbox_default_workload())
    }
    /// `vgpuManager.enabled` (nil ⇒ false).
    pub fn vgpu_manager_enabled(&self) -> bool {
        flag(self.vgpu_manager.as_ref().and_then(|c| c.enabled), false)
    }
    /// `vgpuDeviceManager.enabled` (nil ⇒ false).
    pub fn vgpu_device_manager_enabled(&self) -> bool {
        flag(
            self.vgpu_device_manager.as_ref().and_then(|c| c.enabled),
            false,
        )
    }
    /// `vfioManager.enabled` (nil ⇒ false).
    pub fn vfio_manager_enabled(&self) -> bool {
        flag(self.vfio_manager.as_ref().and_then(|c| c.enabled), false)
    }
    /// `sandboxDevicePlugin.enabled` (nil ⇒ false).
    pub fn sandbox_device_plugin_enabled(&self) -> bool {
        self.sandbox_device_plugin
            .as_ref()
            .is_some_and(|c| c.is_enabled(false))
    }
    /// `kataSandboxDevicePlugin.enabled` (nil ⇒ false).
    pub fn kata_sandbox_device_plugin_enabled(&self) -> bool {
        self.kata_sandbox_device_plugin
            .as_ref()
            .is_some_and(|c| c.is_enabled(false))
    }
    /// `ccManager.enabled` (nil ⇒ false).
    pub fn cc_manager_enabled(&self) -> bool {
        flag(self.cc_manager.as_ref().and_then(|c| c.enabled), false)
    }
    /// `kataManager` is deprecated upstream: always disabled regardless of the field.
    pub fn kata_manager_enabled(&self) -> bool {
        false
    }
    /// `gds.enabled` (nil ⇒ false).
    pub fn gds_enabled(&self) -> bool {
        flag(self.gds.as_ref().and_then(|c| c.enabled), false)
    }
    /// `gdrcopy.enabled` (nil ⇒ false).
    pub fn gdrcopy_enabled(&self) -> bool {
        flag(self.gdrcopy.as_ref().and_then(|c| c.enabled), false)
    }
    /// `cdi.enabled` (nil ⇒ true).
    pub fn cdi_enabled(&self) -> bool {
        flag(self.cdi.as_ref().and_then(|c| c.enabled), true)
    }
    /// `cdi.nriPluginEnabled` (nil ⇒ false).
    pub fn cdi_nri_plugin_enabled(&self) -> bool {
        flag(self.cdi.as_ref().and_then(|c| c.nri_plugin_enabled), false)
    }
    /// RuntimeClass name (default `nvidia`).
    pub fn runtime_class(&self) -> &str {
        nonempty(&self.operator.runtime_class).unwrap_or(defaults::RUNTIME_CLASS)
    }
    pub fn update_strategy(&self) -> UpdateStrategy {
        self.daemonsets.update_strategy.unwrap_or_default()
    }
    /// `daemonsets.rollingUpdate.maxUnavailable` (default `"1"`).
    pub fn rolling_update_max_unavailable(&self) -> &str {
        self.daemonsets
            .rolling_update
            .as_ref()
            .and_then(|r| nonempty(&r.max_unavailable))
            .unwrap_or(defaults::ROLLING_MAX_UNAVAILABLE)
    }
    pub fn host_root(&self) -> &str {
        self.host_paths
            .as_ref()
            .and_then(|h| nonempty(&h.root_fs))
            .unwrap_or(defaults::HOST_ROOT)
    }
    pub fn driver_install_dir(&self) -> &str {
        self.host_paths
            .as_ref()
            .and_then(|h| nonempty(&h.driver_install_dir))
            .unwrap_or(defaults::DRIVER_INSTALL_DIR)
    }
    pub fn kubelet_root_dir(&self) -> &str {
        self.host_paths
            .as_ref()
            .and_then(|h| nonempty(&h.kubelet_root_dir))
            .unwrap_or(defaults::KUBELET_ROOT_DIR)
    }

    /// Semantic checks beyond the schema, as (path, message) pairs.
    pub fn validate(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if self.cdi_nri_plugin_enabled() && !(self.cdi_enabled() && self.toolkit_enabled()) {
            out.push((
                "spec.cdi.nriPluginEnabled".to_string(),
                "requires cdi.enabled and toolkit.enabled to be true".to_string(),
            ));
        }
        if let Some(m) = self
            .driver
            .upgrade_policy
            .as_ref()
            .and_then(|p| p.max_unavailable.as_ref())
            && let Some(msg) = crate::common::check_int_or_percent(m)
        {
            out.push(("spec.driver.upgradePolicy.maxUnavailable".into(), msg));
        }
        if let Some(r) = self
            .daemonsets
            .rolling_update
            .as_ref()
            .and_then(|r| r.max_unavailable.clone())
            && let Some(msg) = crate::common::check_int_or_percent(
                &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(r),
            )
        {
            out.push(("spec.daemonsets.rollingUpdate.maxUnavailable".into(), msg));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nil_enabled_means_component_default() {
        let s = ClusterPolicySpec::default();
        assert!(s.driver_enabled() && s.toolkit_enabled() && s.device_plugin_enabled());
        assert!(s.dcgm_enabled() && s.dcgm_exporter_enabled() && s.gfd_enabled());
        assert!(s.mig_manager_enabled() && s.cdi_enabled());
        assert!(!s.node_status_exporter_enabled() && !s.sandbox_workloads_enabled());
        assert!(!s.vgpu_manager_enabled() && !s.gds_enabled() && !s.psa_enabled());
        assert_eq!(s.runtime_class(), "nvidia");
        assert_eq!(s.mig_manager_default_config(), Some("all-disabled"));
        assert_eq!(s.mig_manager_config_name(), "default-mig-parted-config");
        assert_eq!(s.driver_upgrade_policy(), None);
        assert!(!s.driver_auto_upgrade());
    }

    #[test]
    fn explicit_false_is_false() {
        let mut s = ClusterPolicySpec::default();
        s.driver.enabled = Some(false);
        s.cdi = Some(CdiSpec {
            enabled: Some(false),
            ..Default::default()
        });
        assert!(!s.driver_enabled());
        assert!(!s.cdi_enabled());
    }

    #[test]
    fn workload_config_resolution() {
        let mut s = ClusterPolicySpec::default();
        assert_eq!(
            s.workload_config_for(Some("vm-vgpu")),
            WorkloadConfig::Container
        );
        s.sandbox_workloads = Some(SandboxWorkloadsSpec {
            enabled: Some(true),
            default_workload: Some(WorkloadConfig::VmPassthrough),
            ..Default::default()
        });
        assert_eq!(
            s.workload_config_for(Some("vm-vgpu")),
            WorkloadConfig::VmVgpu
        );
        assert_eq!(
            s.workload_config_for(Some("bogus")),
            WorkloadConfig::VmPassthrough
        );
    }

    #[test]
    fn nri_requires_cdi_and_toolkit() {
        let mut s = ClusterPolicySpec {
            cdi: Some(CdiSpec {
                nri_plugin_enabled: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(s.validate().is_empty());
        s.toolkit.enabled = Some(false);
        assert_eq!(s.validate()[0].0, "spec.cdi.nriPluginEnabled");
    }
}
