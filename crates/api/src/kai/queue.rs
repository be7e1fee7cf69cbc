//! KAI `Queue` (scheduling.run.ai/v2, cluster-scoped): hierarchical quota, limit and
//! over-quota weight per resource. Omitted values follow upstream exactly: an omitted
//! `quota`, `limit` or `overQuotaWeight` is 0 — so an omitted `limit` means the queue may
//! not use that resource at all; `-1` means unlimited (limit) or "everything available"
//! (quota). The accessors return these effective values.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::Extra;
use crate::gofloat;
use gantry_k8s_rules::parse_go_duration;

/// Queue priority when `spec.priority` is omitted.
pub const DEFAULT_QUEUE_PRIORITY: i32 = 100;
/// The value meaning "unlimited" (limit) or "all available" (quota).
pub const UNLIMITED: f64 = -1.0;

/// Spec of a [`Queue`].
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    derive = "PartialEq",
    group = "scheduling.run.ai",
    version = "v2",
    kind = "Queue",
    plural = "queues",
    singular = "queue",
    status = "QueueStatus",
    doc = "Queue is a node of the KAI queue hierarchy: quota, limit and over-quota weight per resource.",
    printcolumn = r#"{"name":"Priority","type":"integer","jsonPath":".spec.priority"}"#,
    printcolumn = r#"{"name":"Parent","type":"string","jsonPath":".spec.parentQueue"}"#,
    printcolumn = r#"{"name":"Children","type":"string","jsonPath":".status.childQueues"}"#,
    printcolumn = r#"{"name":"DisplayName","type":"string","jsonPath":".spec.displayName"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct QueueSpec {
    /// Cosmetic name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Parent queue name; empty ⇒ top level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_queue: Option<String>,
    /// Orders queues for over-quota division (default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Minimum runtime (Go duration) before a job of this queue may be preempted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempt_min_runtime: Option<String>,
    /// Minimum runtime (Go duration) before a job of this queue may be reclaimed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim_min_runtime: Option<String>,
    /// Required by upstream's webhook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<QueueResources>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.resources`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct QueueResources {
    /// In GPUs (fractions allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<QueueResource>,
    /// In millicores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<QueueResource>,
    /// In MB (10^6 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<QueueResource>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// One resource's `quota`, `overQuotaWeight`, `limit`. Numbers keep Go's JSON form (an
/// integral value is written without a fraction).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueResource {
    /// Deserved amount, guaranteed to the queue (-1: unlimited, 0: none).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "gofloat::opt::serialize"
    )]
    pub quota: Option<f64>,
    /// Weight for sharing unused resources above quota among sibling queues.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "gofloat::opt::serialize"
    )]
    pub over_quota_weight: Option<f64>,
    /// Upper bound on what the queue may use (-1: no limit).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "gofloat::opt::serialize"
    )]
    pub limit: Option<f64>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Deserved amount of a resource.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Quota {
    /// `-1`: deserved equals everything available at that level.
    AllAvailable,
    Amount(f64),
}

/// Hard cap of a resource.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Limit {
    /// `-1`.
    Unlimited,
    /// At most this much; `Max(0.0)` (also the omitted value) forbids the resource.
    Max(f64),
}

impl Limit {
    /// Whether `amount` fits under the limit.
    pub fn allows(self, amount: f64) -> bool {
        match self {
            Limit::Unlimited => true,
            Limit::Max(m) => amount <= m,
        }
    }
}

/// The three numbers of one resource with omitted values resolved.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EffectiveQueueResource {
    pub quota: Quota,
    pub limit: Limit,
    pub over_quota_weight: f64,
}

/// The resources a Queue budgets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QueueResourceKind {
    Gpu,
    Cpu,
    Memory,
}

impl QueueResourceKind {
    pub const ALL: [QueueResourceKind; 3] = [Self::Gpu, Self::Cpu, Self::Memory];
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Gpu => "gpu",
            Self::Cpu => "cpu",
            Self::Memory => "memory",
        }
    }
}

impl QueueResource {
    /// Omitted ⇒ 0; `-1` ⇒ all available.
    pub fn quota(&self) -> Quota {
        match self.quota.unwrap_or(0.0) {
            q if q == UNLIMITED => Quota::AllAvailable,
            q => Quota::Amount(q),
        }
    }
    /// Omitted ⇒ 0 (no allocation at all); `-1` ⇒ unlimited.
    pub fn limit(&self) -> Limit {
        match self.limit.unwrap_or(0.0) {
            l if l == UNLIMITED => Limit::Unlimited,
            l => Limit::Max(l),
        }
    }
    /// Omitted ⇒ 0 (receives no surplus).
    pub fn over_quota_weight(&self) -> f64 {
        self.over_quota_weight.unwrap_or(0.0)
    }
    pub fn effective(&self) -> EffectiveQueueResource {
        EffectiveQueueResource {
            quota: self.quota(),
            limit: self.limit(),
            over_quota_weight: self.over_quota_weight(),
        }
    }
    /// A fully open resource as KAI's default queues set it: quota 0, limit -1, weight 1.
    pub fn open() -> Self {
        QueueResource {
            quota: Some(0.0),
            over_quota_weight: Some(1.0),
            limit: Some(UNLIMITED),
            extra: Extra::new(),
        }
    }
}

impl QueueSpec {
    /// `priority` (default 100).
    pub fn priority(&self) -> i32 {
        self.priority.unwrap_or(DEFAULT_QUEUE_PRIORITY)
    }
    /// Parent queue name; `None` for a top-level queue (omitted or empty).
    pub fn parent(&self) -> Option<&str> {
        self.parent_queue.as_deref().filter(|p| !p.is_empty())
    }
    /// Effective numbers for one resource; an omitted section is all zeros (no allocation).
    pub fn resource(&self, kind: QueueResourceKind) -> EffectiveQueueResource {
        let r = self.resources.as_ref().and_then(|r| match kind {
            QueueResourceKind::Gpu => r.gpu.as_ref(),
            QueueResourceKind::Cpu => r.cpu.as_ref(),
            QueueResourceKind::Memory => r.memory.as_ref(),
        });
        r.cloned().unwrap_or_default().effective()
    }
    /// `preemptMinRuntime` in nanoseconds (Go duration); `None` if omitted or malformed.
    pub fn preempt_min_runtime_nanos(&self) -> Option<i64> {
        parse_go_duration(self.preempt_min_runtime.as_deref()?).ok()
    }
    /// `reclaimMinRuntime` in nanoseconds (Go duration); `None` if omitted or malformed.
    pub fn reclaim_min_runtime_nanos(&self) -> Option<i64> {
        parse_go_duration(self.reclaim_min_runtime.as_deref()?).ok()
    }

    /// Semantic checks beyond the schema, as (path, message) pairs.
    pub fn validate(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        // KAI's CRD does not require `spec.resources`: a Queue with only `preemptMinRuntime`
        // is valid (it then budgets nothing of its own).
        match &self.resources {
            None => {}
            Some(r) => {
                for (kind, res) in [("gpu", &r.gpu), ("cpu", &r.cpu), ("memory", &r.memory)] {
                    let Some(res) = res else { continue };
                    for (field, v) in [("quota", res.quota), ("limit", res.limit)] {
                        if let Some(v) = v
                            && v < 0.0
                            && v != UNLIMITED
                        {
                            out.push((
                                format!("spec.resources.{kind}.{field}"),
                                format!("must be >= 0 or -1 (unlimited), got {v}"),
                            ));
                        }
                    }
                    if let Some(w) = res.over_quota_weight
                        && w < 0.0
                    {
                        out.push((
                            format!("spec.resources.{kind}.overQuotaWeight"),
                            format!("must be >= 0, got {w}"),
                        ));
                    }
                    if let (Some(q), Some(l)) = (res.quota, res.limit)
                        && q >= 0.0
                        && l >= 0.0
                        && q > l
                    {
                        out.push((
                            format!("spec.resources.{kind}.quota"),
                            format!("must not exceed limit ({l}), got {q}"),
                        ));
                    }
                }
            }
        }
        for (field, v) in [
            ("preemptMinRuntime", &self.preempt_min_runtime),
            ("reclaimMinRuntime", &self.reclaim_min_runtime),
        ] {
            if let Some(v) = v
                && let Err(e) = parse_go_duration(v)
            {
                out.push((format!("spec.{field}"), super::go_duration_problem(&e)));
            }
        }
        if let Some(p) = self.parent()
            && !super::is_dns_label(p)
            && !super::is_dns_subdomain(p)
        {
            out.push((
                "spec.parentQueue".into(),
                format!("must be a valid object name, got {p:?}"),
            ));
        }
        out
    }
}

/// `status.conditions[]` of a Queue (`Orphan`, `OverQuota`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueCondition {
    /// Condition type.
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: String,
    /// When the condition was last checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<String>,
    /// When the condition last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// Machine-readable reason for the condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Status of a [`Queue`], written by the queue controller.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueStatus {
    /// Conditions of the queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<QueueCondition>>,
    /// Names of queues naming this one as parent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_queues: Option<Vec<String>>,
    /// Resources of running jobs of this queue and its descendants (GPU in fractions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated: Option<BTreeMap<String, Quantity>>,
    /// Resources allocated to the queue's non-preemptible jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated_non_preemptible: Option<BTreeMap<String, Quantity>>,
    /// Running + pending requests of this queue and its descendants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested: Option<BTreeMap<String, Quantity>>,
    /// Gantry: the fair share the scheduler computed in its last cycle (same units as
    /// `allocated`): quota plus this queue's part of the surplus, divided down the tree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_share: Option<BTreeMap<String, Quantity>>,
    /// Gantry: the in-quota amount the queue is guaranteed right now (`quota`, with `-1`
    /// resolved to what its parent has), same units as `allocated`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deserved: Option<BTreeMap<String, Quantity>>,
    /// Gantry: the historical usage time-based fair share weighs (`usageDBConfig`), per
    /// resource, normalised to cluster capacity over the usage window (0.25: a quarter of
    /// the cluster's capacity), decayed by the configured half-life.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<BTreeMap<String, Quantity>>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn omitted_values_are_zero() {
        let s = QueueSpec {
            resources: Some(QueueResources::default()),
            ..Default::default()
        };
        let gpu = s.resource(QueueResourceKind::Gpu);
        assert_eq!(gpu.limit, Limit::Max(0.0));
        assert!(!gpu.limit.allows(0.5));
        assert_eq!(gpu.quota, Quota::Amount(0.0));
        assert_eq!(gpu.over_quota_weight, 0.0);
        assert_eq!(s.priority(), 100);
        assert_eq!(s.parent(), None);
    }

    #[test]
    fn minus_one_is_unlimited() {
        let r = QueueResource::open();
        assert_eq!(r.limit(), Limit::Unlimited);
        assert!(r.limit().allows(1e9));
        let q = QueueResource {
            quota: Some(-1.0),
            ..Default::default()
        };
        assert_eq!(q.quota(), Quota::AllAvailable);
    }

    #[test]
    fn validate_negative_values() {
        let s = QueueSpec {
            resources: Some(QueueResources {
                gpu: Some(QueueResource {
                    quota: Some(-2.0),
                    limit: Some(-1.0),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let p = s.validate();
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].0, "spec.resources.gpu.quota");
        let only_runtime = QueueSpec {
            preempt_min_runtime: Some("5m".into()),
            ..Default::default()
        };
        assert_eq!(only_runtime.validate(), vec![]);
    }
}
