//! The pure core of the MigClusterPolicy reconciler: from the policies, the nodes (labels, the
//! MIG manager's error annotation, their running GPU pods) decide which nodes to move to their
//! wanted `nvidia.com/mig.config` now, which pods to evict, and every policy's status.
//!
//! Rollout rule: a node is in flight while its `nvidia.com/mig.config.state` is `pending` (or
//! `rebooting`); the reconciler sets the config label together with `pending`, so a policy never
//! has more than its `maxUnavailable` nodes in flight. A node whose GPU pods must go first is
//! claimed (`pending`) before its pods are evicted, so it counts from the start.

use std::collections::BTreeMap;

use gantry_api::mig_cluster_policy::{
    GpuPodPolicy, MigClusterPolicy, MigClusterPolicyStatus, MigNodeStatus, condition,
};
use gantry_api::names::{self, mig_config_state};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// What the reconciler knows about one node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeView {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// The MIG manager's error for a `failed` config (annotation).
    pub error: Option<String>,
    /// Running GPU pods on the node, `namespace/name`.
    pub gpu_pods: Vec<String>,
}

impl NodeView {
    fn config(&self) -> Option<&str> {
        self.labels.get(names::LABEL_MIG_CONFIG).map(String::as_str)
    }
    fn state(&self) -> Option<&str> {
        self.labels
            .get(names::LABEL_MIG_CONFIG_STATE)
            .map(String::as_str)
    }
    fn in_flight(&self) -> bool {
        matches!(
            self.state(),
            Some(mig_config_state::PENDING | mig_config_state::REBOOTING)
        )
    }
}

/// A write the shell carries out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Set `nvidia.com/mig.config=config` and `nvidia.com/mig.config.state=pending`.
    SetConfig { node: String, config: String },
    /// Set `nvidia.com/mig.config.state=pending` only: the node is taken while its pods go.
    Claim { node: String },
    /// Evict these pods (`namespace/name`).
    Evict { node: String, pods: Vec<String> },
}

/// Everything one reconcile decides.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decision {
    pub actions: Vec<Action>,
    /// Policy name → its new status.
    pub statuses: BTreeMap<String, MigClusterPolicyStatus>,
    /// Policies being deleted whose finalizer can go.
    pub finalize: Vec<String>,
}

/// Decide for every policy. `now` stamps conditions that change.
pub fn decide(policies: &[MigClusterPolicy], nodes: &[NodeView], now: &Time) -> Decision {
    let mut out = Decision::default();
    let owners = owners(policies, nodes);
    for (pi, p) in policies.iter().enumerate() {
        let name = p.metadata.name.clone().unwrap_or_default();
        if p.metadata.deletion_timestamp.is_some() {
            if reset_on_delete(p, nodes, &owners, &mut out.actions) == Some(true) {
                out.finalize.push(name);
            }
            continue;
        }
        let status = decide_policy(policies, pi, nodes, &owners, now, &mut out.actions);
        out.statuses.insert(name, status);
    }
    out
}

/// Each node's owner: the oldest *valid* live policy selecting it. An invalid policy changes
/// no node, so it owns none: it must not keep a valid one off the nodes both select.
fn owners(policies: &[MigClusterPolicy], nodes: &[NodeView]) -> Vec<Option<usize>> {
    let valid: Vec<usize> = (0..policies.len())
        .filter(|&i| policies[i].spec.validate().is_empty())
        .collect();
    let candidates: Vec<MigClusterPolicy> = valid.iter().map(|&i| policies[i].clone()).collect();
    nodes
        .iter()
        .map(|n| MigClusterPolicy::owner_of(&candidates, &n.labels).map(|j| valid[j]))
        .collect()
}

fn decide_policy(
    policies: &[MigClusterPolicy],
    pi: usize,
    nodes: &[NodeView],
    owners: &[Option<usize>],
    now: &Time,
    actions: &mut Vec<Action>,
) -> MigClusterPolicyStatus {
    let p = &policies[pi];
    let prev = p.status.as_ref();
    let mut status = MigClusterPolicyStatus {
        observed_generation: p.metadata.generation,
        ..Default::default()
    };
    let problems = p.spec.validate();
    if !problems.is_empty() {
        let msg = problems
            .iter()
            .map(|(path, m)| format!("{path}: {m}"))
            .collect::<Vec<_>>()
            .join("; ");
        status.conditions = Some(vec![
            cond(prev, condition::READY, false, "InvalidSpec", &msg, now),
            cond(
                prev,
                condition::PROGRESSING,
                false,
                "InvalidSpec",
                &msg,
                now,
            ),
        ]);
        return status;
    }
    let wanted = p.wanted_config();
    let selected: Vec<usize> = (0..nodes.len())
        .filter(|&i| p.spec.selects(&nodes[i].labels))
        .collect();
    let owned: Vec<usize> = selected
        .iter()
        .copied()
        .filter(|&i| owners[i] == Some(pi))
        .collect();
    let budget = p.spec.max_unavailable(owned.len() as u32) as usize;
    let owned_nodes: Vec<&NodeView> = owned.iter().map(|&i| &nodes[i]).collect();
    let mut entries = rollout(
        &owned_nodes,
        &wanted,
        budget,
        p.spec.gpu_pod_policy(),
        actions,
    );
    let mut conflicts = Vec::new();
    for &i in selected.iter().filter(|&&i| owners[i] != Some(pi)) {
        let n = &nodes[i];
        let other = owners[i]
            .and_then(|o| policies.get(o))
            .and_then(|o| o.metadata.name.clone())
            .unwrap_or_default();
        conflicts.push(n.name.clone());
        entries.push(MigNodeStatus {
            name: n.name.clone(),
            wanted_config: Some(wanted.clone()),
            state: n.state().map(str::to_string),
            error: Some(format!(
                "owned by the older MigClusterPolicy {other:?}; this policy leaves the node alone"
            )),
            last_transition_time: None,
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    let ready = owned_nodes
        .iter()
        .filter(|n| {
            n.config() == Some(wanted.as_str()) && n.state() == Some(mig_config_state::SUCCESS)
        })
        .count();
    let done = owned_nodes.iter().all(|n| {
        n.config() == Some(wanted.as_str())
            && matches!(
                n.state(),
                Some(mig_config_state::SUCCESS | mig_config_state::FAILED)
            )
    });
    let failed: Vec<&str> = owned_nodes
        .iter()
        .filter(|n| {
            n.config() == Some(wanted.as_str()) && n.state() == Some(mig_config_state::FAILED)
        })
        .map(|n| n.name.as_str())
        .collect();
    status.selected_nodes = Some(selected.len() as i32);
    status.ready_nodes = Some(ready as i32);
    status.nodes = Some(entries);
    let mut conds = Vec::new();
    conds.push(if ready == owned_nodes.len() && conflicts.is_empty() {
        cond(
            prev,
            condition::READY,
            true,
            "Applied",
            &format!("{ready} node(s) at MIG config {wanted:?}"),
            now,
        )
    } else if !failed.is_empty() {
        cond(
            prev,
            condition::READY,
            false,
            "Failed",
            &format!(
                "MIG config {wanted:?} failed on {}; see status.nodes",
                failed.join(", ")
            ),
            now,
        )
    } else if ready == owned_nodes.len() {
        // Done where it may act, but some selected nodes keep another policy's layout.
        cond(
            prev,
            condition::READY,
            false,
            "OwnedByOlderPolicy",
            &format!(
                "{ready} of {} selected node(s) at MIG config {wanted:?}; the others are owned by an older MigClusterPolicy: {}",
                selected.len(),
                conflicts.join(", ")
            ),
            now,
        )
    } else {
        cond(
            prev,
            condition::READY,
            false,
            "RollingOut",
            &format!("{ready} of {} node(s) done", owned_nodes.len()),
            now,
        )
    });
    conds.push(cond(
        prev,
        condition::PROGRESSING,
        !done,
        if done { "Done" } else { "RollingOut" },
        &format!("at most {budget} node(s) at a time"),
        now,
    ));
    conds.push(cond(
        prev,
        condition::CONFLICT,
        !conflicts.is_empty(),
        if conflicts.is_empty() {
            "NoConflict"
        } else {
            "OwnedByOlderPolicy"
        },
        &if conflicts.is_empty() {
            "no selected node is owned by another policy".to_string()
        } else {
            format!(
                "node(s) owned by an older MigClusterPolicy: {}",
                conflicts.join(", ")
            )
        },
        now,
    ));
    status.conditions = Some(conds);
    status
}

/// Move `nodes` toward `wanted`, at most `budget` in flight. Returns their status entries.
fn rollout(
    nodes: &[&NodeView],
    wanted: &str,
    budget: usize,
    pod_policy: GpuPodPolicy,
    actions: &mut Vec<Action>,
) -> Vec<MigNodeStatus> {
    let mut in_flight = nodes.iter().filter(|n| n.in_flight()).count();
    let mut out = Vec::new();
    for n in nodes {
        let mut entry = MigNodeStatus {
            name: n.name.clone(),
            wanted_config: Some(wanted.to_string()),
            state: n.state().map(str::to_string),
            ..Default::default()
        };
        let at_wanted = n.config() == Some(wanted);
        if at_wanted {
            if n.state() == Some(mig_config_state::FAILED) {
                entry.error = Some(n.error.clone().unwrap_or_else(|| {
                    "the MIG manager reported failed; see the Node's events".to_string()
                }));
            }
            out.push(entry);
            continue;
        }
        // Not at the wanted config yet.
        if n.in_flight() {
            // Claimed by us (or busy with an earlier change): finish draining, then switch.
            if n.gpu_pods.is_empty() {
                actions.push(Action::SetConfig {
                    node: n.name.clone(),
                    config: wanted.to_string(),
                });
                entry.state = Some(mig_config_state::PENDING.to_string());
            } else if pod_policy == GpuPodPolicy::Evict {
                actions.push(Action::Evict {
                    node: n.name.clone(),
                    pods: n.gpu_pods.clone(),
                });
                entry.error = Some(waiting(n, "being evicted"));
            } else {
                entry.error = Some(waiting(n, "running"));
            }
            out.push(entry);
            continue;
        }
        if in_flight >= budget {
            out.push(entry);
            continue;
        }
        if !n.gpu_pods.is_empty() {
            match pod_policy {
                GpuPodPolicy::Wait => {
                    entry.error = Some(waiting(n, "running; gpuPodPolicy is wait"));
                    out.push(entry);
                    continue;
                }
                GpuPodPolicy::Evict => {
                    actions.push(Action::Claim {
                        node: n.name.clone(),
                    });
                    actions.push(Action::Evict {
                        node: n.name.clone(),
                        pods: n.gpu_pods.clone(),
                    });
                    entry.error = Some(waiting(n, "being evicted"));
                }
            }
        } else {
            actions.push(Action::SetConfig {
                node: n.name.clone(),
                config: wanted.to_string(),
            });
        }
        entry.state = Some(mig_config_state::PENDING.to_string());
        in_flight += 1;
        out.push(entry);
    }
    out
}

fn waiting(n: &NodeView, how: &str) -> String {
    format!(
        "waiting for {} GPU pod(s) {how}: {}",
        n.gpu_pods.len(),
        n.gpu_pods.join(", ")
    )
}

/// For a policy being deleted: `None` when it has nothing to do (no finalizer of ours);
/// `Some(done)` otherwise, pushing the reset steps (to `all-disabled`, same rollout bound).
fn reset_on_delete(
    p: &MigClusterPolicy,
    nodes: &[NodeView],
    owners: &[Option<usize>],
    actions: &mut Vec<Action>,
) -> Option<bool> {
    let ours = p
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == names::FINALIZER_MIG_CLUSTER_POLICY);
    if !ours {
        return None;
    }
    if !p.spec.reset_on_delete() {
        return Some(true);
    }
    let old = p.wanted_config();
    let target = names::MIG_CONFIG_ALL_DISABLED;
    // Nodes still on this policy's layout (or being reset by it) that no live policy owns.
    let affected: Vec<&NodeView> = nodes
        .iter()
        .zip(owners)
        .filter(|(n, owner)| {
            owner.is_none()
                && p.spec.selects(&n.labels)
                && (n.config() == Some(old.as_str())
                    || (n.config() == Some(target) && n.in_flight()))
        })
        .map(|(n, _)| n)
        .collect();
    let budget = p.spec.max_unavailable(affected.len() as u32) as usize;
    rollout(&affected, target, budget, p.spec.gpu_pod_policy(), actions);
    let done = affected.iter().all(|n| {
        n.config() == Some(target)
            && matches!(
                n.state(),
                Some(mig_config_state::SUCCESS | mig_config_state::FAILED)
            )
    });
    Some(done)
}

/// A condition, keeping the previous transition time when its status did not change.
fn cond(
    prev: Option<&MigClusterPolicyStatus>,
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    now: &Time,
) -> Condition {
    let status = if ok { "True" } else { "False" };
    let since = prev
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == type_))
        .filter(|c| c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| now.clone());
    Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        last_transition_time: since,
        observed_generation: None,
    }
}

#[cfg(test)]
mod tests;
