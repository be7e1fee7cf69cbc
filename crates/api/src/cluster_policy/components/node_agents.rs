//! The node agents' sections: toolkit, device plugin, DCGM and its exporter, MIG and the MIG
//! manager, validator, workload config.

use super::*;

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
