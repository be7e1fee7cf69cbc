//! The sections of `ClusterPolicy.spec`, one type per upstream section. Every section keeps
//! keys it does not model in `extra` so that nothing is lost on a round trip.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, PodSecurityContext, Toleration};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::{
    ContainerProbeSpec, ContainerSettings, EnvOnly, Extra, ImageSpec, NameRef,
    ServiceMonitorConfig, UpgradePolicy, flag,
};

/// Generic operand: `enabled`, image block, container settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComponentSpec {
    /// nil means the component default (see the accessor on `ClusterPolicySpec`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(flatten)]
    pub image: ImageSpec,
    #[serde(flatten)]
    pub container: ContainerSettings,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Container runtime named in `operator.defaultRuntime` (deprecated upstream: detected from nodes).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    Docker,
    Crio,
    Containerd,
}

/// `spec.operator`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperatorSpec {
    /// Deprecated and ignored: the runtime is detected from the GPU nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_runtime: Option<Runtime>,
    /// Name and handler of the RuntimeClass the operator creates (default `nvidia`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_class: Option<String>,
    /// Deprecated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_container: Option<ImageSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// OpenShift only; nil means on.
    #[serde(
        rename = "use_ocp_driver_toolkit",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub use_ocp_driver_toolkit: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<OperatorMetricsSpec>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.operator.metrics`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperatorMetricsSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_monitor: Option<ServiceMonitorConfig>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// DaemonSet update strategy.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum UpdateStrategy {
    #[default]
    RollingUpdate,
    OnDelete,
}

/// `spec.daemonsets`: settings common to every operand DaemonSet.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DaemonsetsSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// When non-empty, replaces the operands' default tolerations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// `RollingUpdate` (default) or `OnDelete`; the driver DaemonSet is always `OnDelete`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<UpdateStrategy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RollingUpdateSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_security_context: Option<PodSecurityContext>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.daemonsets.rollingUpdate`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollingUpdateSpec {
    /// Int or percent as a string (chart `"1"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<String>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Kernel module flavour.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum KernelModuleType {
    #[default]
    Auto,
    Open,
    Proprietary,
}

/// `driver.rdma` (GPUDirect RDMA via nvidia-peermem).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RdmaSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_host_mofed: Option<bool>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// The k8s-driver-manager init container (`driver.manager`, `*.driverManager`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriverManagerSpec {
    #[serde(flatten)]
    pub image: ImageSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<EnvVar>>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `driver.repoConfig`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RepoConfigSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_name: Option<String>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `driver.licensingConfig` (vGPU guest licensing).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LicensingConfigSpec {
    /// Deprecated: use `secretName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
    /// nil means false in ClusterPolicy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nls_enabled: Option<bool>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `driver.virtualTopology`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct VirtualTopologySpec {
    /// ConfigMap holding `nvidia-topologyd.conf`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.driver`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriverSpec {
    /// nil means true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Hand driver management to NVIDIADriver CRs. nil means false.
    #[serde(
        rename = "useNvidiaDriverCRD",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub use_nvidia_driver_crd: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_precompiled: Option<bool>,
    /// Deprecated and ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_open_kernel_modules: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_module_type: Option<KernelModuleType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_probe: Option<ContainerProbeSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness_probe: Option<ContainerProbeSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness_probe: Option<ContainerProbeSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdma: Option<RdmaSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_policy: Option<UpgradePolicy>,
    #[serde(flatten)]
    pub image: ImageSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manager: Option<DriverManagerSpec>,
    #[serde(flatten)]
    pub container: ContainerSettings,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo_config: Option<RepoConfigSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_config: Option<NameRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub licensing_config: Option<LicensingConfigSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_topology: Option<VirtualTopologySpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_module_config: Option<NameRef>,
    /// Secret whose keys become env vars of the driver container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_env: Option<String>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.toolkit`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolkitSpec {
    /// nil means true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(flatten)]
    pub image: ImageSpec,
    #[serde(flatten)]
    pub container: ContainerSettings,
    /// Default `/usr/local/nvidia`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_dir: Option<String>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `{name, default}`: a ConfigMap of named configs and the key applied by default.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct NamedConfigRef {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `devicePlugin.mps`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct MpsSpec {
    /// Host directory for MPS pipes/logs (default `/run/nvidia/mps`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.devicePlugin`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DevicePluginSpec {
    /// nil means true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(flatten)]
    pub image: ImageSpec,
    #[serde(flatten)]
    pub container: ContainerSettings,
    /// ConfigMap of device plugin config files and the default key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<NamedConfigRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mps: Option<MpsSpec>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.dcgm` (standalone host engine).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DcgmSpec {
    /// nil means true (the chart sets false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(flatten)]
    pub image: ImageSpec,
    #[serde(flatten)]
    pub container: ContainerSettings,
    /// Deprecated (5555).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_port: Option<i32>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `dcgmExporter.service`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_traffic_policy: Option<String>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `dcgmExporter.hpcJobMapping`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct HpcJobMappingSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Default `/var/lib/dcgm-exporter/job-mapping`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<String>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.dcgmExporter`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DcgmExporterSpec {
    /// nil means true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(flatten)]
    pub image: ImageSpec,
    #[serde(flatten)]
    pub container: ContainerSettings,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// ConfigMap whose key `dcgm-metrics.csv` lists the metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<NameRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_monitor: Option<ServiceMonitorConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceSpec>,
    #[serde(rename = "hostPID", default, skip_serializing_if = "Option::is_none")]
    pub host_pid: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hpc_job_mapping: Option<HpcJobMappingSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_pod_labels: Option<bool>,
    #[serde(
        rename = "enablePodUID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub enable_pod_uid: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_label_allowlist_regex: Option<Vec<String>>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// MIG strategy: how MIG devices are advertised (one type for every part: `gantry_k8s_rules`).
pub use gantry_k8s_rules::MigStrategy;

/// `spec.mig`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct MigSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<MigStrategy>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `migManager.config.default`: upstream only allows `all-disabled` or empty.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum MigDefaultConfig {
    #[default]
    #[serde(rename = "all-disabled")]
    AllDisabled,
    #[serde(rename = "")]
    Empty,
}

/// `migManager.config`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct MigPartedConfigRef {
    /// ConfigMap with key `config.yaml`; empty means the operator's `default-mig-parted-config`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Config set on MIG-capable nodes without `nvidia.com/mig.config` (default `all-disabled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<MigDefaultConfig>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.migManager`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigManagerSpec {
    /// nil means true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(flatten)]
    pub image: ImageSpec,
    #[serde(flatten)]
    pub container: ContainerSettings,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<MigPartedConfigRef>,
    /// ConfigMap listing host GPU clients (empty means `default-gpu-clients`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_clients_config: Option<NameRef>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.validator`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValidatorSpec {
    #[serde(flatten)]
    pub image: ImageSpec,
    #[serde(flatten)]
    pub container: ContainerSettings,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<EnvOnly>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toolkit: Option<EnvOnly>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<EnvOnly>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda: Option<EnvOnly>,
    #[serde(rename = "vfioPCI", default, skip_serializing_if = "Option::is_none")]
    pub vfio_pci: Option<EnvOnly>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vgpu_manager: Option<EnvOnly>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vgpu_devices: Option<EnvOnly>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Workload a node runs when sandbox workloads are enabled.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadConfig {
    #[default]
    Container,
    VmPassthrough,
    VmVgpu,
}

impl WorkloadConfig {
    /// Parse a `nvidia.com/gpu.workload.config` label value.
    pub fn from_label(v: &str) -> Option<Self> {
        match v {
            "container" => Some(Self::Container),
            "vm-passthrough" => Some(Self::VmPassthrough),
            "vm-vgpu" => Some(Self::VmVgpu),
            _ => None,
        }
    }
}

/// Sandbox (VM) workload mode.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    #[default]
    Kubevirt,
    Kata,
}

/// `spec.sandboxWorkloads`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxWorkloadsSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_workload: Option<WorkloadConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<SandboxMode>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.gds` / `spec.gdrcopy`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriverAddonSpec {
    /// nil means false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(flatten)]
    pub image: ImageSpec,
    #[serde(flatten)]
    pub container: ContainerSettings,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.vgpuManager`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VgpuManagerSpec {
    /// nil means false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(flatten)]
    pub image: ImageSpec,
    #[serde(flatten)]
    pub container: ContainerSettings,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_manager: Option<DriverManagerSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_module_config: Option<NameRef>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.vgpuDeviceManager`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VgpuDeviceManagerSpec {
    /// nil means false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(flatten)]
    pub image: ImageSpec,
    #[serde(flatten)]
    pub container: ContainerSettings,
    /// Empty name means `default-vgpu-devices-config`; default key `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<NamedConfigRef>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.vfioManager`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VfioManagerSpec {
    /// nil means false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(flatten)]
    pub image: ImageSpec,
    #[serde(flatten)]
    pub container: ContainerSettings,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_manager: Option<DriverManagerSpec>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `kataManager.config.runtimeClasses[].artifacts`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KataArtifacts {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_secret: Option<String>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `kataManager.config.runtimeClasses[]`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KataRuntimeClass {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifacts: Option<KataArtifacts>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `kataManager.config`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KataManagerConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifacts_dir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_classes: Option<Vec<KataRuntimeClass>>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.kataManager`: deprecated upstream and ignored (always disabled).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KataManagerSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(flatten)]
    pub image: ImageSpec,
    #[serde(flatten)]
    pub container: ContainerSettings,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<KataManagerConfig>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Confidential-computing mode.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum CcMode {
    On,
    Off,
    Devtools,
}

/// `spec.ccManager`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CcManagerSpec {
    /// nil means false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_mode: Option<CcMode>,
    #[serde(flatten)]
    pub image: ImageSpec,
    #[serde(flatten)]
    pub container: ContainerSettings,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.cdi`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CdiSpec {
    /// nil means true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Deprecated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<bool>,
    /// Requires `cdi.enabled` and `toolkit.enabled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nri_plugin_enabled: Option<bool>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.hostPaths`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostPathsSpec {
    /// Host root filesystem (default `/`).
    #[serde(rename = "rootFS", default, skip_serializing_if = "Option::is_none")]
    pub root_fs: Option<String>,
    /// Where the driver container exposes the driver root (default `/run/nvidia/driver`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_install_dir: Option<String>,
    /// Kubelet root (default `/var/lib/kubelet`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet_root_dir: Option<String>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

impl ComponentSpec {
    pub fn is_enabled(&self, default: bool) -> bool {
        flag(self.enabled, default)
    }
}
