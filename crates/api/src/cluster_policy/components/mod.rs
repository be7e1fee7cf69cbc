//! The sections of `ClusterPolicy.spec`, one type per upstream section. Every section keeps
//! keys it does not model in `extra` so that nothing is lost on a round trip.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EnvVar, PodSecurityContext, Toleration};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

mod driver;
mod node_agents;
mod sandbox;

pub use driver::*;
pub use node_agents::*;
pub use sandbox::*;

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
    /// Deprecated and ignored: an init container image upstream once ran before the operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_container: Option<ImageSpec>,
    /// Labels added to the operator's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations added to the operator's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// OpenShift only; nil means on.
    #[serde(
        rename = "use_ocp_driver_toolkit",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub use_ocp_driver_toolkit: Option<bool>,
    /// The operator's own metrics endpoint.
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
    /// ServiceMonitor for the operator's metrics (Prometheus Operator).
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
    /// Labels added to every operand DaemonSet's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations added to every operand DaemonSet's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// When non-empty, replaces the operands' default tolerations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// PriorityClass of the operand pods (default system-node-critical).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// `RollingUpdate` (default) or `OnDelete`; the driver DaemonSet is always `OnDelete`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<UpdateStrategy>,
    /// Rolling update settings when updateStrategy is RollingUpdate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_update: Option<RollingUpdateSpec>,
    /// Pod security context applied to the operand pods.
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

impl ComponentSpec {
    pub fn is_enabled(&self, default: bool) -> bool {
        flag(self.enabled, default)
    }
}
