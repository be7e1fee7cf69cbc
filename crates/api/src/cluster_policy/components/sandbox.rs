//! Sandbox (VM and confidential) workloads and the remaining sections: vGPU, VFIO, Kata, CC,
//! CDI, host paths.

use super::*;

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
    /// Run GPUs of sandboxed workloads (VM passthrough, vGPU) on nodes labelled for them (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Workload type of nodes without nvidia.com/gpu.workload.config: container, vm-passthrough or vm-vgpu (default container).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_workload: Option<WorkloadConfig>,
    /// Virtualization stack: kubevirt or kata (default kubevirt).
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
    /// The k8s-driver-manager init container of the vGPU manager.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_manager: Option<DriverManagerSpec>,
    /// ConfigMap with kernel module parameters for the vGPU manager.
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
    /// The k8s-driver-manager init container of the VFIO manager.
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
    /// OCI reference of the Kata guest artifacts (kernel, image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Secret used to pull the artifacts.
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
    /// Name of the RuntimeClass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Nodes the RuntimeClass schedules onto.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Guest artifacts of the runtime class.
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
    /// Host directory the artifacts are pulled to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifacts_dir: Option<String>,
    /// Kata RuntimeClasses to create.
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
    /// Deploy the Kata manager (deprecated upstream; default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(flatten)]
    pub image: ImageSpec,
    #[serde(flatten)]
    pub container: ContainerSettings,
    /// Kata manager configuration: artifacts and runtime classes.
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
    /// Confidential computing mode of nodes without nvidia.com/cc.mode: on, off or devtools.
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
    /// Generate CDI specs and the nvidia-cdi runtime class (nil means true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Deprecated: make nvidia-cdi the default runtime class (set the runtime class instead).
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
