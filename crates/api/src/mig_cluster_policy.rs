//! `MigClusterPolicy` (nvidia.com/v1alpha1, cluster-scoped): Gantry's declarative,
//! cluster-wide MIG layouts. It selects nodes (label selector and/or GPU product) and names
//! a layout; the operator turns it into each selected node's `nvidia.com/mig.config` label
//! (and, for an inline layout, a config in the mig-parted ConfigMap), rolling out at most
//! `maxUnavailable` nodes at a time.
//!
//! ```yaml
//! apiVersion: nvidia.com/v1alpha1
//! kind: MigClusterPolicy
//! metadata: {name: a100-slices}
//! spec:
//!   gpuProducts: [NVIDIA-A100-SXM4-80GB]
//!   layout: {config: all-1g.10gb}
//!   maxUnavailable: 1
//!   gpuPodPolicy: wait
//! ```

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use gantry_k8s_rules::Selector;
use gantry_k8s_rules::names::is_label_value;

use crate::common::{Extra, check_int_or_percent, scaled_int_or_percent};
use crate::mig_parted::{self, MigConfigEntry};
use crate::names;

/// What to do on a selected node whose GPUs are in use by pods when its layout must change.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum GpuPodPolicy {
    /// Leave the node alone until its GPU pods finish (default).
    #[default]
    Wait,
    /// Evict the node's GPU pods, then repartition.
    Evict,
}

/// The wanted MIG layout: exactly one of `config` or `custom`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct MigLayout {
    /// Name of a config in the mig-parted ConfigMap, e.g. `all-1g.10gb` or `all-balanced`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
    /// An inline mig-parted layout: the entries of one `mig-configs` item, in mig-parted's own
    /// keys (`devices`, `mig-enabled`, `mig-devices`, `device-filter`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom: Option<Vec<MigConfigEntry>>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Spec of a [`MigClusterPolicy`].
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    derive = "PartialEq",
    group = "nvidia.com",
    version = "v1alpha1",
    kind = "MigClusterPolicy",
    plural = "migclusterpolicies",
    singular = "migclusterpolicy",
    shortname = "mcp",
    status = "MigClusterPolicyStatus",
    doc = "MigClusterPolicy partitions the GPUs of the selected nodes into a MIG layout, a few nodes at a time.",
    printcolumn = r#"{"name":"Layout","type":"string","jsonPath":".spec.layout.config"}"#,
    printcolumn = r#"{"name":"Selected","type":"integer","jsonPath":".status.selectedNodes"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyNodes"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct MigClusterPolicySpec {
    /// Nodes to partition, by label. Combined with `gpuProducts` by AND when both are set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// GPU products (the `nvidia.com/gpu.product` label, e.g. `NVIDIA-A100-SXM4-80GB`).
    /// `-SHARED` and `-MIG-<profile>` suffixes GFD adds are ignored when matching.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_products: Option<Vec<String>>,
    /// The layout to apply.
    pub layout: MigLayout,
    /// Nodes repartitioned at once: a count or a percentage of the selected nodes (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
    /// `wait` (default) or `evict`: what to do with running GPU pods on a node to repartition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_pod_policy: Option<GpuPodPolicy>,
    /// On deletion, set the policy's nodes back to `all-disabled` (default false: leave them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reset_on_delete: Option<bool>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Per-node rollout status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigNodeStatus {
    /// Node name.
    pub name: String,
    /// The `nvidia.com/mig.config` value this policy wants on the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wanted_config: Option<String>,
    /// The node's current `nvidia.com/mig.config.state` (`pending`, `success`, `failed`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Why the node failed or is held back (e.g. layout does not fit, pods still running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When the node's state last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
}

/// Status of a [`MigClusterPolicy`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MigClusterPolicyStatus {
    /// The spec generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Number of nodes the policy selects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected_nodes: Option<i32>,
    /// Number of selected nodes whose GPUs have the layout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_nodes: Option<i32>,
    /// One entry per selected node, sorted by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<MigNodeStatus>>,
    /// `Ready`, `Progressing`, `Conflict` (nodes owned by an older policy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Condition types of a MigClusterPolicy.
pub mod condition {
    pub const READY: &str = "Ready";
    pub const PROGRESSING: &str = "Progressing";
    pub const CONFLICT: &str = "Conflict";
}

impl MigClusterPolicySpec {
    pub fn gpu_pod_policy(&self) -> GpuPodPolicy {
        self.gpu_pod_policy.unwrap_or_default()
    }
    pub fn reset_on_delete(&self) -> bool {
        self.reset_on_delete.unwrap_or(false)
    }
    /// How many of `selected` nodes may be in flight at once (default 1, at least 1).
    pub fn max_unavailable(&self, selected: u32) -> u32 {
        let v = self.max_unavailable.clone().unwrap_or(IntOrString::Int(1));
        scaled_int_or_percent(&v, selected).unwrap_or(1).max(1)
    }
    /// Whether a node with these labels is selected by this policy.
    pub fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        let by_labels = self
            .node_selector
            .as_ref()
            .is_none_or(|s| Selector::from_label_selector(s).is_ok_and(|s| s.matches(labels)));
        let by_product = match &self.gpu_products {
            None => true,
            Some(list) => labels
                .get(names::LABEL_GPU_PRODUCT)
                .map(|p| base_product(p))
                .is_some_and(|p| list.iter().any(|want| base_product(want) == p)),
        };
        by_labels && by_product
    }

    /// Semantic checks, as (path, message) pairs.
    pub fn validate(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if self.node_selector.is_none() && self.gpu_products.as_ref().is_none_or(Vec::is_empty) {
            out.push((
                "spec".into(),
                "set nodeSelector and/or gpuProducts to choose nodes".into(),
            ));
        }
        match (&self.layout.config, &self.layout.custom) {
            (Some(_), Some(_)) => out.push((
                "spec.layout".into(),
                "set exactly one of config or custom, not both".into(),
            )),
            (None, None) => out.push(("spec.layout".into(), "set one of config or custom".into())),
            (Some(c), None) if !is_label_value(c) || c.is_empty() => out.push((
                "spec.layout.config".into(),
                format!(
                    "must be a valid label value (it becomes nvidia.com/mig.config), got {c:?}"
                ),
            )),
            (None, Some(entries)) => {
                if entries.is_empty() {
                    out.push((
                        "spec.layout.custom".into(),
                        "must have at least one entry".into(),
                    ));
                }
                for (i, e) in entries.iter().enumerate() {
                    for p in e.validate() {
                        out.push((format!("spec.layout.custom[{i}].{}", p.path), p.message));
                    }
                }
            }
            _ => {}
        }
        if let Some(m) = &self.max_unavailable {
            if let Some(msg) = check_int_or_percent(m) {
                out.push(("spec.maxUnavailable".into(), msg));
            } else if matches!(m, IntOrString::Int(0))
                || matches!(m, IntOrString::String(s) if s.trim_end_matches('%').trim() == "0")
            {
                out.push((
                    "spec.maxUnavailable".into(),
                    "must be at least 1 (0 would never roll out)".into(),
                ));
            }
        }
        if let Some(sel) = &self.node_selector
            && let Err(e) = Selector::from_label_selector(sel)
        {
            out.push((format!("spec.nodeSelector.{}", e.input), e.reason));
        }
        out
    }
}

impl MigClusterPolicy {
    /// The `nvidia.com/mig.config` value this policy puts on its nodes: the named config, or
    /// for an inline layout `gantry-mcp-<policy name>` (the config the operator adds to the
    /// mig-parted ConfigMap).
    pub fn wanted_config(&self) -> String {
        match &self.spec.layout.config {
            Some(c) => c.clone(),
            None => format!(
                "{}{}",
                names::MIG_CLUSTER_POLICY_CONFIG_PREFIX,
                self.metadata.name.as_deref().unwrap_or_default()
            ),
        }
    }
    /// Among `policies`, the index of the one that owns a node with `labels`: the oldest
    /// selecting policy (creationTimestamp, then name), so overlaps resolve deterministically.
    pub fn owner_of(
        policies: &[MigClusterPolicy],
        labels: &BTreeMap<String, String>,
    ) -> Option<usize> {
        (0..policies.len())
            .filter(|&i| {
                policies[i].metadata.deletion_timestamp.is_none()
                    && policies[i].spec.selects(labels)
            })
            .min_by_key(|&i| {
                let m = &policies[i].metadata;
                (
                    m.creation_timestamp.is_none(),
                    m.creation_timestamp.as_ref().map(|t| t.0),
                    m.name.clone(),
                )
            })
    }
}

/// The product name without the suffixes GFD adds for sharing and MIG (single strategy).
pub fn base_product(p: &str) -> &str {
    let p = p.strip_suffix("-SHARED").unwrap_or(p);
    match p.find("-MIG-") {
        Some(i) => &p[..i],
        None => p,
    }
}

/// Checks the named layout against known mig-parted configs, when the caller has them.
pub fn config_is_known(name: &str, file: &mig_parted::MigPartedConfig) -> bool {
    file.mig_configs.contains_key(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn product_match_ignores_gfd_suffixes() {
        let s = MigClusterPolicySpec {
            gpu_products: Some(vec!["NVIDIA-A100-SXM4-80GB".into()]),
            layout: MigLayout {
                config: Some("all-1g.10gb".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(s.selects(&labels(&[(
            names::LABEL_GPU_PRODUCT,
            "NVIDIA-A100-SXM4-80GB"
        )])));
        assert!(s.selects(&labels(&[(
            names::LABEL_GPU_PRODUCT,
            "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"
        )])));
        assert!(s.selects(&labels(&[(
            names::LABEL_GPU_PRODUCT,
            "NVIDIA-A100-SXM4-80GB-SHARED"
        )])));
        assert!(!s.selects(&labels(&[(
            names::LABEL_GPU_PRODUCT,
            "NVIDIA-H100-80GB-HBM3"
        )])));
        assert!(!s.selects(&labels(&[])));
        assert!(s.validate().is_empty());
    }

    #[test]
    fn selector_and_products_combine() {
        let s = MigClusterPolicySpec {
            node_selector: Some(LabelSelector {
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "pool".into(),
                    operator: "In".into(),
                    values: Some(vec!["train".into()]),
                }]),
                ..Default::default()
            }),
            gpu_products: Some(vec!["NVIDIA-H100-80GB-HBM3".into()]),
            ..Default::default()
        };
        let node = labels(&[
            ("pool", "train"),
            (names::LABEL_GPU_PRODUCT, "NVIDIA-H100-80GB-HBM3"),
        ]);
        assert!(s.selects(&node));
        assert!(!s.selects(&labels(&[
            ("pool", "infer"),
            (names::LABEL_GPU_PRODUCT, "NVIDIA-H100-80GB-HBM3")
        ])));
    }

    #[test]
    fn rollout_bound() {
        let mut s = MigClusterPolicySpec::default();
        assert_eq!(s.max_unavailable(10), 1);
        s.max_unavailable = Some(IntOrString::String("25%".into()));
        assert_eq!(s.max_unavailable(10), 3);
        s.max_unavailable = Some(IntOrString::String("1%".into()));
        assert_eq!(s.max_unavailable(2), 1);
        s.max_unavailable = Some(IntOrString::Int(0));
        assert!(s.validate().iter().any(|(p, _)| p == "spec.maxUnavailable"));
    }

    #[test]
    fn oldest_selecting_policy_owns_the_node() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let mk = |name: &str, secs: i64, product: &str| {
            let mut p = MigClusterPolicy::new(
                name,
                MigClusterPolicySpec {
                    gpu_products: Some(vec![product.into()]),
                    layout: MigLayout {
                        config: Some("all-1g.10gb".into()),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            );
            p.metadata.creation_timestamp = Some(Time(
                k8s_openapi::jiff::Timestamp::from_second(secs).unwrap_or_default(),
            ));
            p
        };
        let policies = vec![
            mk("newer", 200, "NVIDIA-A100-SXM4-80GB"),
            mk("older", 100, "NVIDIA-A100-SXM4-80GB"),
            mk("other", 50, "NVIDIA-H100-80GB-HBM3"),
        ];
        let node = labels(&[(names::LABEL_GPU_PRODUCT, "NVIDIA-A100-SXM4-80GB")]);
        assert_eq!(MigClusterPolicy::owner_of(&policies, &node), Some(1));
        let none = labels(&[(names::LABEL_GPU_PRODUCT, "NVIDIA-L4")]);
        assert_eq!(MigClusterPolicy::owner_of(&policies, &none), None);
    }

    #[test]
    fn layout_rules() {
        let s = MigClusterPolicySpec {
            gpu_products: Some(vec!["x".into()]),
            ..Default::default()
        };
        assert!(s.validate().iter().any(|(p, _)| p == "spec.layout"));
        let mut p = MigClusterPolicy::new("split", MigClusterPolicySpec::default());
        p.spec.layout.custom = Some(vec![]);
        assert_eq!(p.wanted_config(), "gantry-mcp-split");
    }
}
