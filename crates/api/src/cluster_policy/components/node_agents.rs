//! The node agents' sections: toolkit, device plugin, DCGM and its exporter, MIG and the MIG
//! manager, validator, workload config.

use super::*;

/// `spec.toolkit`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolkitSpec {
    /// Deploy the container toolkit (nil means true).
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
    /// ConfigMap in the operator namespace whose keys are named configs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Key applied on nodes that select none with their config label.
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
    /// Deploy the device plugin (nil means true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(flatten)]
    pub image: ImageSpec,
    #[serde(flatten)]
    pub container: ContainerSettings,
    /// ConfigMap of device plugin config files and the default key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<NamedConfigRef>,
    /// MPS control daemon settings.
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
    /// Service type of the exporter's Service (default ClusterIP).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// internalTrafficPolicy of the exporter's Service (Cluster or Local).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_traffic_policy: Option<String>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `dcgmExporter.hpcJobMapping`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct HpcJobMappingSpec {
    /// Label GPU metrics with the HPC job that uses the GPU (default false).
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
    /// Deploy the GPU metrics exporter (nil means true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(flatten)]
    pub image: ImageSpec,
    #[serde(flatten)]
    pub container: ContainerSettings,
    /// Annotations of the exporter's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// ConfigMap whose key `dcgm-metrics.csv` lists the metrics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<NameRef>,
    /// ServiceMonitor for the exporter (Prometheus Operator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_monitor: Option<ServiceMonitorConfig>,
    /// The exporter's Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceSpec>,
    /// Run the exporter in the host PID namespace (per-process metrics; default false).
    #[serde(rename = "hostPID", default, skip_serializing_if = "Option::is_none")]
    pub host_pid: Option<bool>,
    /// HPC job to GPU mapping for metric labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hpc_job_mapping: Option<HpcJobMappingSpec>,
    /// Add the labels of the pod using a GPU to its metrics (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_pod_labels: Option<bool>,
    /// Add the UID of the pod using a GPU to its metrics (default false).
    #[serde(
        rename = "enablePodUID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub enable_pod_uid: Option<bool>,
    /// Regular expressions selecting which pod labels enablePodLabels adds.
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
    /// How MIG devices are exposed: none, single (all GPUs of a node alike, as nvidia.com/gpu) or mixed (nvidia.com/mig-<profile>).
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
    /// Deploy the MIG manager on MIG-capable nodes (nil means true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(flatten)]
    pub image: ImageSpec,
    #[serde(flatten)]
    pub container: ContainerSettings,
    /// ConfigMap of mig-parted configs (key config.yaml) and the config applied by default.
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
    /// Env of the device plugin validation (WITH_WORKLOAD ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<EnvOnly>,
    /// Env of the container toolkit validation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toolkit: Option<EnvOnly>,
    /// Env of the driver validation (DISABLE_DEV_CHAR_SYMLINK_CREATION ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<EnvOnly>,
    /// Env of the CUDA workload validation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda: Option<EnvOnly>,
    /// Env of the vfio-pci validation (sandbox workloads).
    #[serde(rename = "vfioPCI", default, skip_serializing_if = "Option::is_none")]
    pub vfio_pci: Option<EnvOnly>,
    /// Env of the vGPU manager validation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vgpu_manager: Option<EnvOnly>,
    /// Env of the vGPU devices validation.
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
