//! Building blocks shared by the NVIDIA CRDs: image and container settings, probes,
//! ServiceMonitor settings, the driver upgrade policy, and the catch-all map that keeps
//! fields Gantry does not model so a round trip never loses anything.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::EnvVar;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Keys of a section that Gantry has no typed field for. Flattened into every section so
/// that parse -> serialize keeps them; left out of the CRD schema on purpose (see `crds`).
pub type Extra = BTreeMap<String, serde_json::Value>;

/// Resolve a `*bool` with a component default: nil means the default, not false.
pub fn flag(v: Option<bool>, default: bool) -> bool {
    v.unwrap_or(default)
}

/// Image coordinates: `repository/image:version` (or `@sha256:…` when `version` is a digest).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageSpec {
    /// Registry and path, e.g. `nvcr.io/nvidia`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// Image name, e.g. `driver`. Alone (no repository/version) it is used verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"[a-zA-Z0-9\-]+"))]
    pub image: Option<String>,
    /// Tag, or a `sha256:` digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `Always`, `Never` or `IfNotPresent` (anything else is treated as `IfNotPresent`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,
    /// Names of Secrets used to pull the image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_secrets: Option<Vec<String>>,
}

impl ImageSpec {
    /// The full image reference per upstream's rules, or `None` when the CR does not fully
    /// specify one (the caller then falls back to the operator's env var).
    pub fn reference(&self) -> Option<String> {
        fn nonempty(s: &Option<String>) -> Option<&str> {
            s.as_deref().filter(|v| !v.is_empty())
        }
        match (
            nonempty(&self.repository),
            nonempty(&self.image),
            nonempty(&self.version),
        ) {
            (None, Some(image), None) => Some(image.to_string()),
            (Some(repo), Some(image), Some(version)) if version.starts_with("sha256:") => {
                Some(format!("{repo}/{image}@{version}"))
            }
            (Some(repo), Some(image), Some(version)) => Some(format!("{repo}/{image}:{version}")),
            _ => None,
        }
    }

    /// The pull policy with upstream's fallback: unknown or empty values mean `IfNotPresent`.
    pub fn pull_policy(&self) -> &str {
        match self.image_pull_policy.as_deref() {
            Some(p @ ("Always" | "Never" | "IfNotPresent")) => p,
            _ => "IfNotPresent",
        }
    }
}

/// Compute resources of an operand container.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct Resources {
    /// Maximum compute resources (cpu, memory ...) of the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<BTreeMap<String, Quantity>>,
    /// Compute resources (cpu, memory ...) the container is scheduled with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<BTreeMap<String, Quantity>>,
}

/// Settings every operand container takes: resources, extra args and env.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerSettings {
    /// Compute resource requests and limits of the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,
    /// Extra arguments of the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,
    /// Extra environment variables of the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<EnvVar>>,
    /// Run the operand pod in the host network namespace (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_network: Option<bool>,
}

impl ContainerSettings {
    /// Value of an env var set on the component, if any.
    pub fn env_value(&self, name: &str) -> Option<&str> {
        self.env
            .as_ref()?
            .iter()
            .find(|e| e.name == name)?
            .value
            .as_deref()
    }
}

/// A `{name}` reference to a ConfigMap or Secret.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct NameRef {
    /// Name of the object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Env-only block (validator per-check settings).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct EnvOnly {
    /// Environment variables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<EnvVar>>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// A `{enabled}` toggle block.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct EnabledOnly {
    /// Whether the feature is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Container probe timings (`startupProbe`, `livenessProbe`, `readinessProbe`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerProbeSpec {
    /// Seconds after the container starts before the probe runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_delay_seconds: Option<i32>,
    /// Seconds after which one probe times out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub timeout_seconds: Option<i32>,
    /// Seconds between probes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub period_seconds: Option<i32>,
    /// Consecutive successes after a failure for the probe to pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub success_threshold: Option<i32>,
    /// Consecutive failures for the probe to fail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub failure_threshold: Option<i32>,
}

/// Prometheus Operator ServiceMonitor settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceMonitorConfig {
    /// nil means false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Scrape interval (Prometheus duration, e.g. `15s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// Scrape timeout (Prometheus duration, for example 10s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scrape_timeout: Option<String>,
    /// Keep the target's labels when they clash with Prometheus's (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub honor_labels: Option<bool>,
    /// Labels added to the ServiceMonitor (your Prometheus selects monitors by them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_labels: Option<BTreeMap<String, String>>,
    /// Relabeling rules applied to the scraped target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relabelings: Option<Vec<RelabelConfig>>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

impl ServiceMonitorConfig {
    pub fn is_enabled(&self) -> bool {
        flag(self.enabled, false)
    }
}

/// One Prometheus relabeling rule.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RelabelConfig {
    /// Labels whose values are joined and matched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_labels: Option<Vec<String>>,
    /// Separator between the joined source label values (default ;).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub separator: Option<String>,
    /// Label the result is written to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_label: Option<String>,
    /// Regular expression matched against the joined value (default (.*)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub regex: Option<String>,
    /// Modulus for the hashmod action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modulus: Option<i64>,
    /// Replacement value; regex groups as $1 (default $1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replacement: Option<String>,
    /// replace, keep, drop, hashmod, labelmap, labeldrop or labelkeep (default replace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
}

/// Driver upgrade policy (`driver.upgradePolicy`, NVIDIADriver `upgradePolicy`).
/// Defaults differ between ClusterPolicy and NVIDIADriver; use [`UpgradePolicy::effective`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradePolicy {
    /// Let the operator upgrade drivers node by node when the driver spec changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_upgrade: Option<bool>,
    /// 0 means unlimited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_parallel_upgrades: Option<i32>,
    /// Int or percent (`25%`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// Wait for selected jobs to finish on a node before upgrading its driver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for_completion: Option<WaitForCompletionSpec>,
    /// Deletion of the pods that use GPUs before the driver restarts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_deletion: Option<PodDeletionSpec>,
    /// Node drain before the driver restarts, when deleting GPU pods is not enough.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<DrainSpec>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaitForCompletionSpec {
    /// Label selector of the pods to wait for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<String>,
    /// 0 waits forever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub timeout_seconds: Option<i32>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodDeletionSpec {
    /// Delete pods not managed by a controller too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
    /// Seconds to wait for the deletion (0: forever).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub timeout_seconds: Option<i32>,
    /// Delete pods with emptyDir volumes too (their data is lost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_empty_dir: Option<bool>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrainSpec {
    /// Drain the node before upgrading its driver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable: Option<bool>,
    /// Delete pods not managed by a controller too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
    /// Label selector of the pods to evict (empty: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<String>,
    /// Seconds to wait for the drain (0: forever).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub timeout_seconds: Option<i32>,
    /// Evict pods with emptyDir volumes too (their data is lost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_empty_dir: Option<bool>,
}

/// An upgrade policy with every default applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EffectiveUpgradePolicy {
    pub auto_upgrade: bool,
    /// 0 = unlimited.
    pub max_parallel_upgrades: i32,
    pub max_unavailable: IntOrString,
    pub wait_for_completion_pod_selector: String,
    pub wait_for_completion_timeout_seconds: i32,
    pub pod_deletion_force: bool,
    pub pod_deletion_timeout_seconds: i32,
    pub pod_deletion_delete_empty_dir: bool,
    pub drain_enable: bool,
    pub drain_force: bool,
    pub drain_pod_selector: String,
    pub drain_timeout_seconds: i32,
    pub drain_delete_empty_dir: bool,
}

impl UpgradePolicy {
    /// Apply defaults. `auto_upgrade_default` is false for ClusterPolicy, true for NVIDIADriver.
    pub fn effective(&self, auto_upgrade_default: bool) -> EffectiveUpgradePolicy {
        let w = self.wait_for_completion.clone().unwrap_or_default();
        let p = self.pod_deletion.clone().unwrap_or_default();
        let d = self.drain.clone().unwrap_or_default();
        EffectiveUpgradePolicy {
            auto_upgrade: flag(self.auto_upgrade, auto_upgrade_default),
            max_parallel_upgrades: self.max_parallel_upgrades.unwrap_or(1),
            max_unavailable: self
                .max_unavailable
                .clone()
                .unwrap_or_else(|| IntOrString::String("25%".into())),
            wait_for_completion_pod_selector: w.pod_selector.unwrap_or_default(),
            wait_for_completion_timeout_seconds: w.timeout_seconds.unwrap_or(0),
            pod_deletion_force: flag(p.force, false),
            pod_deletion_timeout_seconds: p.timeout_seconds.unwrap_or(300),
            pod_deletion_delete_empty_dir: flag(p.delete_empty_dir, false),
            drain_enable: flag(d.enable, false),
            drain_force: flag(d.force, false),
            drain_pod_selector: d.pod_selector.unwrap_or_default(),
            drain_timeout_seconds: d.timeout_seconds.unwrap_or(300),
            drain_delete_empty_dir: flag(d.delete_empty_dir, false),
        }
    }
}

/// Resolve an int-or-percent against a total, rounding up (as upstream's `maxUnavailable`).
/// Returns `None` for a malformed value (e.g. `abc%`, negative).
pub fn scaled_int_or_percent(v: &IntOrString, total: u32) -> Option<u32> {
    match v {
        IntOrString::Int(i) => u32::try_from(*i).ok(),
        IntOrString::String(s) => {
            if let Some(p) = s.strip_suffix('%') {
                let p: u64 = p.trim().parse().ok()?;
                Some(((p * u64::from(total)).div_ceil(100)).min(u64::from(u32::MAX)) as u32)
            } else {
                s.trim().parse().ok()
            }
        }
    }
}

/// Check an int-or-percent for validation: returns the problem text if malformed.
pub fn check_int_or_percent(v: &IntOrString) -> Option<String> {
    match v {
        IntOrString::Int(i) if *i < 0 => Some(format!("must be >= 0, got {i}")),
        IntOrString::Int(_) => None,
        IntOrString::String(s) => {
            let num = s.strip_suffix('%').unwrap_or(s);
            match num.trim().parse::<i64>() {
                Ok(n) if n >= 0 && (!s.ends_with('%') || n <= 100) => None,
                _ => Some(format!(
                    "must be a non-negative integer or a percentage like \"25%\", got {s:?}"
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_reference_rules() {
        let mut i = ImageSpec {
            repository: Some("nvcr.io/nvidia".into()),
            image: Some("driver".into()),
            version: Some("595.91.07".into()),
            ..Default::default()
        };
        assert_eq!(
            i.reference().as_deref(),
            Some("nvcr.io/nvidia/driver:595.91.07")
        );
        i.version = Some("sha256:abc".into());
        assert_eq!(
            i.reference().as_deref(),
            Some("nvcr.io/nvidia/driver@sha256:abc")
        );
        let only = ImageSpec {
            image: Some("reg/x@sha256:1".into()),
            ..Default::default()
        };
        assert_eq!(only.reference().as_deref(), Some("reg/x@sha256:1"));
        let partial = ImageSpec {
            repository: Some("r".into()),
            image: Some("x".into()),
            ..Default::default()
        };
        assert_eq!(partial.reference(), None);
        assert_eq!(partial.pull_policy(), "IfNotPresent");
    }

    #[test]
    fn upgrade_policy_defaults() {
        let e = UpgradePolicy::default().effective(false);
        assert!(!e.auto_upgrade);
        assert_eq!(e.max_parallel_upgrades, 1);
        assert_eq!(e.max_unavailable, IntOrString::String("25%".into()));
        assert_eq!(e.pod_deletion_timeout_seconds, 300);
        assert_eq!(e.drain_timeout_seconds, 300);
        assert!(UpgradePolicy::default().effective(true).auto_upgrade);
    }

    #[test]
    fn int_or_percent() {
        assert_eq!(
            scaled_int_or_percent(&IntOrString::String("25%".into()), 10),
            Some(3)
        );
        assert_eq!(scaled_int_or_percent(&IntOrString::Int(2), 10), Some(2));
        assert_eq!(
            scaled_int_or_percent(&IntOrString::String("x%".into()), 10),
            None
        );
        assert!(check_int_or_percent(&IntOrString::String("150%".into())).is_some());
        assert!(check_int_or_percent(&IntOrString::Int(-1)).is_some());
        assert!(check_int_or_percent(&IntOrString::String("3".into())).is_none());
    }
}
