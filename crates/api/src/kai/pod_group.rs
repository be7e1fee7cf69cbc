//! KAI `PodGroup` (scheduling.run.ai/v2alpha2, namespaced, short name `pg`): a gang of pods
//! scheduled together, optionally split into a tree of SubGroups.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::go_duration_problem;
use super::is_dns_label;
use crate::common::Extra;
use crate::names;
use gantry_k8s_rules::parse_go_duration;

/// Whether the scheduler may preempt a workload.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Preemptibility {
    Preemptible,
    NonPreemptible,
}

impl Preemptibility {
    /// Upstream's rule when nothing is set: priority < 100 ⇒ preemptible.
    pub fn from_priority(priority: i32) -> Self {
        if priority < names::NON_PREEMPTIBLE_PRIORITY_THRESHOLD {
            Preemptibility::Preemptible
        } else {
            Preemptibility::NonPreemptible
        }
    }
    /// Parse the `kai.scheduler/preemptibility` label value.
    pub fn from_label(v: &str) -> Option<Self> {
        match v {
            names::PREEMPTIBLE => Some(Self::Preemptible),
            names::NON_PREEMPTIBLE => Some(Self::NonPreemptible),
            _ => None,
        }
    }
}

/// Topology placement constraint.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TopologyConstraint {
    /// Name of the `Topology` object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<String>,
    /// Topology level (a node label key of the Topology) all pods must share; the group is not scheduled when no domain at this level fits it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_topology_level: Option<String>,
    /// Topology level the scheduler tries to keep the pods within; falls back to wider levels when no domain fits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_topology_level: Option<String>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// One node of the SubGroup tree.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubGroup {
    /// RFC 1123 label; pods join via label `kai.scheduler/subgroup-name`.
    pub name: String,
    /// Leaf SubGroups only: pods that must be placed together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_member: Option<i32>,
    /// Mid-level SubGroups only: children that must be satisfiable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_sub_group: Option<i32>,
    /// Parent SubGroup name; absent ⇒ a root SubGroup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Topology placement of this sub-group's pods (defaults to the PodGroup's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_constraint: Option<TopologyConstraint>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Spec of a [`PodGroup`].
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    derive = "PartialEq",
    group = "scheduling.run.ai",
    version = "v2alpha2",
    kind = "PodGroup",
    plural = "podgroups",
    singular = "podgroup",
    shortname = "pg",
    namespaced,
    status = "PodGroupStatus",
    // KAI's CRD has none; these make `kubectl get podgroups` say which queue and gang size.
    printcolumn = r#"{"name":"Queue","type":"string","jsonPath":".spec.queue"}"#,
    printcolumn = r#"{"name":"MinMember","type":"integer","jsonPath":".spec.minMember"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    doc = "PodGroup is a gang of pods the KAI scheduler places together."
)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSpec {
    /// Gang size; omitted ⇒ 1; 0 ⇒ no gang (all pods elastic). Exclusive with `minSubGroup`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_member: Option<i32>,
    /// Root SubGroups that must be satisfiable; only with `subGroups`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_sub_group: Option<i32>,
    /// Leaf queue name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<String>,
    /// PriorityClass of the group: its priority and whether it is preemptible (KAI: train, build, inference ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// Omitted ⇒ derived from priority (< 100 preemptible).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemptibility: Option<Preemptibility>,
    /// Mark the group's pods Unschedulable when the group cannot be scheduled (lets the cluster autoscaler react).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mark_unschedulable: Option<bool>,
    /// Cycles before marking `UnschedulableOnNodePool`; only -1 and 1 are supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_backoff: Option<i32>,
    /// Topology placement of the group's pods (required and preferred levels of a Topology).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_constraint: Option<TopologyConstraint>,
    /// Sub-groups with their own minMember and topology, scheduled as parts of this gang.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_groups: Option<Vec<SubGroup>>,
    /// Go duration a running job is protected from preemption.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_delay: Option<String>,
    /// Go duration a job may stay below its gang size; negative disables stale eviction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staleness_grace_period: Option<String>,
    /// Pods that try to run at any instant (KAI's field; set by its pod grouper for Jobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<i32>,
    /// Successful pods that move the PodGroup to the `Successful` phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completions: Option<i32>,
    /// Failed pods that move the PodGroup to the `Failed` phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<i32>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

impl PodGroupSpec {
    /// `minMember` with its default (1).
    pub fn min_member(&self) -> i32 {
        self.min_member.unwrap_or(1)
    }
    /// Whether all-or-nothing placement applies (minMember > 0 or SubGroups present).
    pub fn is_gang(&self) -> bool {
        self.min_member() > 0 || self.min_sub_group.is_some()
    }
    /// Explicit preemptibility, else derived from the resolved priority.
    pub fn preemptibility(&self, priority: i32) -> Preemptibility {
        self.preemptibility
            .unwrap_or_else(|| Preemptibility::from_priority(priority))
    }
    /// `markUnschedulable` (omitted ⇒ true).
    pub fn mark_unschedulable(&self) -> bool {
        self.mark_unschedulable.unwrap_or(true)
    }
    /// The queue, `None` when omitted or empty.
    pub fn queue(&self) -> Option<&str> {
        self.queue.as_deref().filter(|q| !q.is_empty())
    }
    pub fn sub_groups(&self) -> &[SubGroup] {
        self.sub_groups.as_deref().unwrap_or(&[])
    }
    /// SubGroups whose parent is `parent` (`None` ⇒ roots), in spec order.
    pub fn children_of(&self, parent: Option<&str>) -> Vec<&SubGroup> {
        self.sub_groups()
            .iter()
            .filter(|s| s.parent.as_deref().filter(|p| !p.is_empty()) == parent)
            .collect()
    }
    /// Whether a SubGroup has no children.
    pub fn is_leaf(&self, name: &str) -> bool {
        self.children_of(Some(name)).is_empty()
    }
    /// `preemptionDelay` in nanoseconds.
    pub fn preemption_delay_nanos(&self) -> Option<i64> {
        parse_go_duration(self.preemption_delay.as_deref()?).ok()
    }
    /// `stalenessGracePeriod` in nanoseconds (negative ⇒ stale eviction disabled).
    pub fn staleness_grace_period_nanos(&self) -> Option<i64> {
        parse_go_duration(self.staleness_grace_period.as_deref()?).ok()
    }

    /// Upstream's webhook rules plus value checks, as (path, message) pairs.
    pub fn validate(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut push = |p: String, m: String| out.push((p, m));
        if let Some(m) = self.min_member
            && m < 0
        {
            push("spec.minMember".into(), format!("must be >= 0, got {m}"));
        }
        if self.min_member.is_some() && self.min_sub_group.is_some() {
            push(
                "spec.minSubGroup".into(),
                "cannot be set together with spec.minMember".into(),
            );
        }
        if let Some(b) = self.scheduling_backoff
            && b != -1
            && b != 1
        {
            push(
                "spec.schedulingBackoff".into(),
                format!("only -1 and 1 are supported, got {b}"),
            );
        }
        for (f, v) in [
            ("preemptionDelay", &self.preemption_delay),
            ("stalenessGracePeriod", &self.staleness_grace_period),
        ] {
            if let Some(v) = v
                && let Err(e) = parse_go_duration(v)
            {
                push(format!("spec.{f}"), go_duration_problem(&e));
            }
        }
        let subs = self.sub_groups();
        let roots = self.children_of(None).len();
        if let Some(m) = self.min_sub_group {
            if subs.is_empty() {
                push("spec.minSubGroup".into(), "requires spec.subGroups".into());
            } else if m < 0 || m as usize > roots {
                push(
                    "spec.minSubGroup".into(),
                    format!(
                        "must be between 0 and the number of root SubGroups ({roots}), got {m}"
                    ),
                );
            }
        }
        let names: BTreeMap<&str, usize> = subs
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.as_str(), i))
            .collect();
        let mut seen = BTreeSet::new();
        for (i, s) in subs.iter().enumerate() {
            let p = format!("spec.subGroups[{i}]");
            if !is_dns_label(&s.name) {
                push(
                    format!("{p}.name"),
                    format!("must be an RFC 1123 DNS label, got {:?}", s.name),
                );
            }
            if !seen.insert(s.name.as_str()) {
                push(
                    format!("{p}.name"),
                    format!("duplicate SubGroup name {:?}", s.name),
                );
            }
            if let Some(parent) = s.parent.as_deref().filter(|p| !p.is_empty()) {
                if !names.contains_key(parent) {
                    push(
                        format!("{p}.parent"),
                        format!("names no SubGroup of this PodGroup: {parent:?}"),
                    );
                } else if !is_dns_label(parent) {
                    push(
                        format!("{p}.parent"),
                        format!("must be an RFC 1123 DNS label, got {parent:?}"),
                    );
                }
            }
            let children = self.children_of(Some(&s.name)).len();
            if children == 0 {
                if s.min_member.is_none() {
                    push(
                        format!("{p}.minMember"),
                        "is required on a leaf SubGroup".into(),
                    );
                }
                if s.min_sub_group.is_some() {
                    push(
                        format!("{p}.minSubGroup"),
                        "is not allowed on a leaf SubGroup".into(),
                    );
                }
            } else {
                if s.min_member.is_some() {
                    push(
                        format!("{p}.minMember"),
                        "is not allowed on a SubGroup with children (use minSubGroup)".into(),
                    );
                }
                if let Some(m) = s.min_sub_group
                    && (m < 0 || m as usize > children)
                {
                    push(
                        format!("{p}.minSubGroup"),
                        format!(
                            "must be between 0 and the number of child SubGroups ({children}), got {m}"
                        ),
                    );
                }
            }
            if let Some(m) = s.min_member
                && m < 0
            {
                push(format!("{p}.minMember"), format!("must be >= 0, got {m}"));
            }
        }
        // Cycle check: walking parents from any node must end at a root within |subs| steps.
        for (i, s) in subs.iter().enumerate() {
            let mut cur = s.parent.as_deref().filter(|p| !p.is_empty());
            let mut steps = 0;
            while let Some(c) = cur {
                steps += 1;
                if steps > subs.len() {
                    push(
                        format!("spec.subGroups[{i}].parent"),
                        format!("SubGroup {:?} is part of a parent cycle", s.name),
                    );
                    break;
                }
                cur = names
                    .get(c)
                    .and_then(|&j| subs[j].parent.as_deref())
                    .filter(|p| !p.is_empty());
            }
        }
        out
    }
}

/// `status.conditions[]` of a PodGroup.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupCondition {
    /// Condition type (e.g. Unschedulable).
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Scheduling cycle in which the condition was set.
    #[serde(
        rename = "transitionID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub transition_id: Option<String>,
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

/// Queue numbers attached to an unschedulable explanation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueDetails {
    /// Name of the queue the group waits in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Resources all of the queue's jobs request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_requested_resources: Option<BTreeMap<String, Quantity>>,
    /// The queue's fair share at the time of the decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_deserved_resources: Option<BTreeMap<String, Quantity>>,
    /// Resources allocated to the queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_allocated_resources: Option<BTreeMap<String, Quantity>>,
    /// Resources allocated to the queue's non-preemptible jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_allocated_non_preemptible_resources: Option<BTreeMap<String, Quantity>>,
    /// The queue's limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_resource_limits: Option<BTreeMap<String, Quantity>>,
    /// Resources this group requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_group_requested_resources: Option<BTreeMap<String, Quantity>>,
    /// Non-preemptible resources this group requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_group_requested_non_preemptible_resources: Option<BTreeMap<String, Quantity>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UnschedulableDetails {
    /// The queue figures behind a quota or fair-share refusal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_details: Option<QueueDetails>,
}

/// One reason a PodGroup cannot be placed (`OverLimit`, `NonPreemptibleOverQuota`, …).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct UnschedulableReason {
    /// Machine-readable reason (e.g. OverLimit, NonPreemptibleOverQuota).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Human-readable explanation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Structured details of the reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<UnschedulableDetails>,
}

/// `status.schedulingConditions[]`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingCondition {
    /// Condition type (Unschedulable on a node pool).
    #[serde(rename = "type")]
    pub type_: String,
    /// Node pool the scheduling attempt was made in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_pool: Option<String>,
    /// Why the group could not be scheduled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasons: Option<Vec<UnschedulableReason>>,
    /// Deprecated: see `reasons`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Deprecated: see `reasons`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Scheduling cycle in which the condition was set.
    #[serde(
        rename = "transitionID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub transition_id: Option<String>,
    /// When the condition last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// True, False or Unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

/// `status.resourcesStatus`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupResourcesStatus {
    /// Resources allocated to the group's pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated: Option<BTreeMap<String, Quantity>>,
    /// Allocated resources that are non-preemptible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated_non_preemptible: Option<BTreeMap<String, Quantity>>,
    /// Resources the group's pods request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested: Option<BTreeMap<String, Quantity>>,
}

/// Status of a [`PodGroup`].
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupStatus {
    /// Conditions of the group (e.g. Unschedulable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<PodGroupCondition>>,
    /// Per node pool, why the last scheduling attempt failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_conditions: Option<Vec<SchedulingCondition>>,
    /// Requested and allocated resources of the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources_status: Option<PodGroupResourcesStatus>,
    /// KAI's phase and pod counts (its pod-group controller writes them; Gantry keeps them so
    /// the API server does not prune them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Number of running pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<i32>,
    /// Number of pending pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<i32>,
    /// Number of succeeded pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<i32>,
    /// Number of failed pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<i32>,
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Scheduling condition type and reason values.
pub mod reason {
    pub const UNSCHEDULABLE_ON_NODE_POOL: &str = "UnschedulableOnNodePool";
    pub const NON_PREEMPTIBLE_OVER_QUOTA: &str = "NonPreemptibleOverQuota";
    pub const OVER_LIMIT: &str = "OverLimit";
    pub const QUEUE_DOES_NOT_EXIST: &str = "QueueDoesNotExist";
    pub const PREEMPTION_DELAY_NOT_ELAPSED: &str = "PreemptionDelayNotElapsed";
    pub const UNSCHEDULABLE: &str = "Unschedulable";
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sg(
        name: &str,
        parent: Option<&str>,
        min_member: Option<i32>,
        min_sub: Option<i32>,
    ) -> SubGroup {
        SubGroup {
            name: name.into(),
            parent: parent.map(Into::into),
            min_member,
            min_sub_group: min_sub,
            ..Default::default()
        }
    }

    #[test]
    fn min_member_defaults() {
        let s = PodGroupSpec::default();
        assert_eq!(s.min_member(), 1);
        assert!(s.is_gang());
        let e = PodGroupSpec {
            min_member: Some(0),
            ..Default::default()
        };
        assert!(!e.is_gang());
        assert_eq!(s.preemptibility(50), Preemptibility::Preemptible);
        assert_eq!(s.preemptibility(100), Preemptibility::NonPreemptible);
    }

    #[test]
    fn valid_tree() {
        let s = PodGroupSpec {
            min_sub_group: Some(1),
            sub_groups: Some(vec![
                sg("workers", None, None, Some(2)),
                sg("a", Some("workers"), Some(2), None),
                sg("b", Some("workers"), Some(2), None),
                sg("leader", None, Some(1), None),
            ]),
            ..Default::default()
        };
        assert_eq!(s.validate(), vec![]);
        assert_eq!(s.children_of(None).len(), 2);
        assert!(s.is_leaf("a") && !s.is_leaf("workers"));
    }

    #[test]
    fn invalid_trees() {
        let s = PodGroupSpec {
            min_member: Some(2),
            min_sub_group: Some(3),
            sub_groups: Some(vec![
                sg("x", Some("y"), None, None),
                sg("y", Some("x"), Some(1), None),
                sg("Bad_Name", Some("nope"), Some(1), Some(1)),
            ]),
            ..Default::default()
        };
        let paths: Vec<String> = s.validate().into_iter().map(|(p, _)| p).collect();
        for want in [
            "spec.minSubGroup",
            "spec.subGroups[0].parent",
            "spec.subGroups[2].name",
            "spec.subGroups[2].parent",
            "spec.subGroups[2].minSubGroup",
        ] {
            assert!(
                paths.iter().any(|p| p == want),
                "missing {want} in {paths:?}"
            );
        }
    }
}
