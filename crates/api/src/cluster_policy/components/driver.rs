//! The driver sections: `driver` and what it configures (kernel module type, RDMA, driver
//! manager, repository, licensing, virtual topology).

use super::*;

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
    /// Load nvidia-peermem for GPUDirect RDMA (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// The MLNX_OFED driver is installed on the host rather than by the Network Operator (default false).
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
    /// Environment of the k8s-driver-manager init container (ENABLE_GPU_POD_EVICTION, ENABLE_AUTO_DRAIN ...).
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
    /// ConfigMap with package repository files mounted into the driver container.
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
    /// Secret with the vGPU client licensing configuration (gridd.conf, client token).
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
    /// Deploy the NVIDIA driver container (nil means true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Hand driver management to NVIDIADriver CRs. nil means false.
    #[serde(
        rename = "useNvidiaDriverCRD",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub use_nvidia_driver_crd: Option<bool>,
    /// Use precompiled driver images for the node's kernel instead of compiling at start (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_precompiled: Option<bool>,
    /// Deprecated and ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_open_kernel_modules: Option<bool>,
    /// Kernel modules to load: auto, open or proprietary (default auto).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_module_type: Option<KernelModuleType>,
    /// Startup probe of the driver container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_probe: Option<ContainerProbeSpec>,
    /// Liveness probe of the driver container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness_probe: Option<ContainerProbeSpec>,
    /// Readiness probe of the driver container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness_probe: Option<ContainerProbeSpec>,
    /// GPUDirect RDMA settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdma: Option<RdmaSpec>,
    /// How driver upgrades roll through the nodes (parallelism, waiting, pod deletion, drain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_policy: Option<UpgradePolicy>,
    #[serde(flatten)]
    pub image: ImageSpec,
    /// The k8s-driver-manager init container, which prepares nodes for driver install and upgrade.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manager: Option<DriverManagerSpec>,
    #[serde(flatten)]
    pub container: ContainerSettings,
    /// Custom package repository configuration for the driver container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo_config: Option<RepoConfigSpec>,
    /// ConfigMap with SSL certificates for the driver container's package repositories.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_config: Option<NameRef>,
    /// vGPU guest driver licensing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub licensing_config: Option<LicensingConfigSpec>,
    /// ConfigMap with a virtual topology daemon config for vGPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_topology: Option<VirtualTopologySpec>,
    /// ConfigMap with kernel module parameters for the driver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_module_config: Option<NameRef>,
    /// Secret whose keys become env vars of the driver container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_env: Option<String>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}
