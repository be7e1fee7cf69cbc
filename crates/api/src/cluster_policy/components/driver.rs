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
