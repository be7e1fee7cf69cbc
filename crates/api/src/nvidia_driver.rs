//! `NVIDIADriver` (nvidia.com/v1alpha1, cluster-scoped): per-node-pool driver management,
//! active when ClusterPolicy `driver.useNvidiaDriverCRD` is true.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, NodeAffinity, PodSecurityContext, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cluster_policy::{DriverManagerSpec, KernelModuleType, RdmaSpec};
use crate::common::{
    ContainerProbeSpec, EffectiveUpgradePolicy, Extra, NameRef, Resources, UpgradePolicy, flag,
};
use crate::names;

/// Default driver image when the CR leaves `image` empty.
pub const DEFAULT_DRIVER_IMAGE: &str = "nvcr.io/nvidia/driver";

fn default_image() -> String {
    DEFAULT_DRIVER_IMAGE.to_string()
}

/// Which driver the CR installs. Immutable after creation.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum DriverType {
    #[default]
    Gpu,
    Vgpu,
    VgpuHostManager,
}

impl DriverType {
    pub fn as_str(self) -> &'static str {
        match self {
            DriverType::Gpu => "gpu",
            DriverType::Vgpu => "vgpu",
            DriverType::VgpuHostManager => "vgpu-host-manager",
        }
    }
}

/// `gds` / `gdrcopy` inside an NVIDIADriver.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriverAddon {
    /// Deploy this container in the driver pod (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Registry and path of the image, for example nvcr.io/nvidia/cloud-native.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// Image name; alone (no repository/version) it is used verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Tag, or a sha256: digest (the node's OS is appended to tags).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Always, Never or IfNotPresent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,
    /// Names of Secrets used to pull the image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_secrets: Option<Vec<String>>,
    /// Extra arguments of the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    /// Extra environment of the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<EnvVar>>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `licensingConfig` of an NVIDIADriver (nlsEnabled nil ⇒ true here).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriverLicensingConfig {
    /// Secret with the vGPU client licensing configuration (gridd.conf, client token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_name: Option<String>,
    /// Deprecated ConfigMap name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// License through NVIDIA License System (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nls_enabled: Option<bool>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Spec of an [`NVIDIADriver`].
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    derive = "PartialEq",
    group = "nvidia.com",
    version = "v1alpha1",
    kind = "NVIDIADriver",
    plural = "nvidiadrivers",
    singular = "nvidiadriver",
    shortname = "nvd",
    shortname = "nvdriver",
    shortname = "nvdrivers",
    status = "NVIDIADriverStatus",
    doc = "NVIDIADriver manages the GPU driver of one pool of nodes.",
    printcolumn = r#"{"name":"Status","type":"string","jsonPath":".status.state"}"#,
    printcolumn = r#"{"name":"Default","type":"boolean","jsonPath":".spec.default"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NVIDIADriverSpec {
    /// The CR used for GPU nodes that no other CR selects. Must not set `nodeSelector`.
    /// Absent means false (upstream's schema default, which the API server fills in).
    #[serde(default)]
    pub default: bool,
    /// `gpu` (default), `vgpu` or `vgpu-host-manager`. Immutable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_type: Option<DriverType>,
    /// Use a precompiled driver image for the node's kernel (immutable once set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_precompiled: Option<bool>,
    /// Deprecated: use kernelModuleType open instead.
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
    /// GPUDirect Storage (nvidia-fs) container in the driver pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gds: Option<DriverAddon>,
    /// GDRCopy (gdrdrv) container in the driver pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gdrcopy: Option<DriverAddon>,
    /// Registry and path of the driver image, for example nvcr.io/nvidia.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// Image (default `nvcr.io/nvidia/driver`).
    #[serde(default = "default_image")]
    pub image: String,
    /// Driver version tag, or a sha256: digest (the node's OS is appended to tags).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Always, Never or IfNotPresent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,
    /// Names of Secrets used to pull the image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_secrets: Option<Vec<String>>,
    /// The k8s-driver-manager init container, which prepares nodes for driver install and upgrade.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manager: Option<DriverManagerSpec>,
    /// Compute resources of the driver container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,
    /// Extra arguments of the driver container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    /// Extra environment of the driver container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<EnvVar>>,
    /// ConfigMap with package repository files mounted into the driver container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo_config: Option<NameRef>,
    /// ConfigMap with SSL certificates for the driver container's package repositories.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_config: Option<NameRef>,
    /// vGPU guest driver licensing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub licensing_config: Option<DriverLicensingConfig>,
    /// ConfigMap with a virtual topology daemon config for vGPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_topology_config: Option<NameRef>,
    /// ConfigMap with kernel module parameters for the driver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_module_config: Option<NameRef>,
    /// Secret whose keys become environment variables of the driver container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_env: Option<String>,
    /// How driver upgrades roll through the nodes (parallelism, waiting, pod deletion, drain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_policy: Option<UpgradePolicy>,
    /// Nodes this CR manages; absent ⇒ `nvidia.com/gpu.present=true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Node affinity of the driver pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_affinity: Option<NodeAffinity>,
    /// Labels added to the driver pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations added to the driver pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Tolerations of the driver pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// PriorityClass of the driver pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Pod security context of the driver pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_security_context: Option<PodSecurityContext>,
    /// Run the driver pods in the host network namespace (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_network: Option<bool>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `status.state` of an NVIDIADriver.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum NVIDIADriverState {
    Ignored,
    Ready,
    #[default]
    NotReady,
    Disabled,
}

/// Status of an [`NVIDIADriver`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NVIDIADriverStatus {
    /// ready or notReady.
    pub state: NVIDIADriverState,
    /// Namespace the driver pods run in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Ready and Error conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

impl NVIDIADriverSpec {
    pub fn driver_type(&self) -> DriverType {
        self.driver_type.unwrap_or_default()
    }
    pub fn use_precompiled(&self) -> bool {
        flag(self.use_precompiled, false)
    }
    pub fn kernel_module_type(&self) -> KernelModuleType {
        self.kernel_module_type.unwrap_or_default()
    }
    /// `licensingConfig.nlsEnabled` (nil ⇒ true for NVIDIADriver).
    pub fn nls_enabled(&self) -> bool {
        flag(
            self.licensing_config.as_ref().and_then(|l| l.nls_enabled),
            true,
        )
    }
    /// Upgrade policy with NVIDIADriver defaults (autoUpgrade ⇒ true); `None` when absent.
    pub fn upgrade_policy(&self) -> Option<EffectiveUpgradePolicy> {
        self.upgrade_policy.as_ref().map(|p| p.effective(true))
    }
    pub fn image_or_default(&self) -> &str {
        if self.image.is_empty() {
            DEFAULT_DRIVER_IMAGE
        } else {
            &self.image
        }
    }
    /// The node selector with its default (`nvidia.com/gpu.present=true`).
    pub fn effective_node_selector(&self) -> BTreeMap<String, String> {
        match &self.node_selector {
            Some(s) if !s.is_empty() => s.clone(),
            _ => BTreeMap::from([(names::LABEL_GPU_PRESENT.to_string(), "true".to_string())]),
        }
    }

    /// Semantic checks beyond the schema, as (path, message) pairs.
    pub fn validate(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let has_selector = self.node_selector.as_ref().is_some_and(|s| !s.is_empty());
        if self.default && has_selector {
            out.push((
                "spec.nodeSelector".into(),
                "must not be set when spec.default is true".into(),
            ));
        }
        if self
            .node_selector
            .as_ref()
            .is_some_and(|s| s.contains_key(names::LABEL_DRIVER_OWNER))
        {
            out.push((
                format!("spec.nodeSelector.{}", names::LABEL_DRIVER_OWNER),
                "is a reserved key the operator sets".into(),
            ));
        }
        if self.use_precompiled()
            && self
                .version
                .as_deref()
                .is_some_and(|v| v.starts_with("sha256:"))
        {
            out.push((
                "spec.version".into(),
                "a digest cannot be used with usePrecompiled: true".into(),
            ));
        }
        if let Some(m) = self
            .upgrade_policy
            .as_ref()
            .and_then(|p| p.max_unavailable.as_ref())
            && let Some(msg) = crate::common::check_int_or_percent(m)
        {
            out.push(("spec.upgradePolicy.maxUnavailable".into(), msg));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_differ_from_cluster_policy() {
        let s = NVIDIADriverSpec {
            upgrade_policy: Some(UpgradePolicy::default()),
            ..Default::default()
        };
        assert!(s.upgrade_policy().is_some_and(|p| p.auto_upgrade));
        assert!(s.nls_enabled());
        assert_eq!(s.driver_type(), DriverType::Gpu);
        assert_eq!(s.image_or_default(), DEFAULT_DRIVER_IMAGE);
        assert_eq!(
            s.effective_node_selector()
                .get(names::LABEL_GPU_PRESENT)
                .map(String::as_str),
            Some("true")
        );
    }

    #[test]
    fn upstream_sample_parses_with_schema_defaults() {
        let cr: NVIDIADriver = serde_yaml::from_str(include_str!(
            "../tests/fixtures/nvidiadriver-upstream-sample.yaml"
        ))
        .expect("upstream's sample parses");
        assert!(!cr.spec.default);
        assert!(cr.spec.validate().is_empty());
        assert_eq!(cr.spec.effective_node_selector().len(), 1);
        let bare: NVIDIADriverSpec = serde_yaml::from_str("{version: '1'}").expect("parses");
        assert_eq!(bare.image_or_default(), DEFAULT_DRIVER_IMAGE);
    }

    #[test]
    fn default_cr_must_not_select() {
        let s = NVIDIADriverSpec {
            default: true,
            node_selector: Some(BTreeMap::from([("pool".into(), "a".into())])),
            ..Default::default()
        };
        assert_eq!(s.validate()[0].0, "spec.nodeSelector");
    }
}
