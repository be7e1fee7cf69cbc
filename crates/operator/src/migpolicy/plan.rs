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
    let owners: Vec<Option<usize>> = nodes
        .iter()
        .map(|n| MigClusterPolicy::owner_of(policies, &n.labels))
        .collect();
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
    conds.push(if ready == owned_nodes.len() {
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
mod tests {
    use super::*;
    use gantry_api::mig_cluster_policy::{MigClusterPolicySpec, MigLayout};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use proptest::prelude::*;

    const A100: &str = "NVIDIA-A100-SXM4-80GB";
    const H100: &str = "NVIDIA-H100-80GB-HBM3";

    fn t(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).unwrap())
    }

    fn policy(name: &str, created: i64, product: &str, config: &str, max: i32) -> MigClusterPolicy {
        let mut p = MigClusterPolicy::new(
            name,
            MigClusterPolicySpec {
                gpu_products: Some(vec![product.into()]),
                layout: MigLayout {
                    config: Some(config.into()),
                    ..Default::default()
                },
                max_unavailable: Some(IntOrString::Int(max)),
                ..Default::default()
            },
        );
        p.metadata.creation_timestamp = Some(t(created));
        p
    }

    fn node(name: &str, product: &str, config: Option<&str>, state: Option<&str>) -> NodeView {
        let mut labels =
            BTreeMap::from([(names::LABEL_GPU_PRODUCT.to_string(), product.to_string())]);
        if let Some(c) = config {
            labels.insert(names::LABEL_MIG_CONFIG.into(), c.into());
        }
        if let Some(s) = state {
            labels.insert(names::LABEL_MIG_CONFIG_STATE.into(), s.into());
        }
        NodeView {
            name: name.into(),
            labels,
            ..Default::default()
        }
    }

    fn set(node: &str, config: &str) -> Action {
        Action::SetConfig {
            node: node.into(),
            config: config.into(),
        }
    }

    fn cond_of<'a>(s: &'a MigClusterPolicyStatus, ty: &str) -> &'a Condition {
        s.conditions
            .as_ref()
            .and_then(|c| c.iter().find(|c| c.type_ == ty))
            .unwrap()
    }

    #[test]
    fn one_node_at_a_time_and_other_products_untouched() {
        let p = policy("a100", 1, A100, "all-1g.10gb", 1);
        let mut nodes = vec![
            node("a-0", A100, None, None),
            node("a-1", A100, Some("all-disabled"), Some("success")),
            node("h-0", H100, None, None),
        ];
        let d = decide(std::slice::from_ref(&p), &nodes, &t(10));
        assert_eq!(d.actions, vec![set("a-0", "all-1g.10gb")]);
        let st = &d.statuses["a100"];
        assert_eq!(st.selected_nodes, Some(2));
        let listed: Vec<_> = st.nodes.iter().flatten().map(|n| n.name.as_str()).collect();
        assert_eq!(listed, ["a-0", "a-1"]);
        // a-0 in flight: nothing else moves.
        nodes[0] = node("a-0", A100, Some("all-1g.10gb"), Some("pending"));
        assert!(
            decide(std::slice::from_ref(&p), &nodes, &t(11))
                .actions
                .is_empty()
        );
        // a-0 done: a-1 next.
        nodes[0] = node("a-0", A100, Some("all-1g.10gb"), Some("success"));
        let d = decide(std::slice::from_ref(&p), &nodes, &t(12));
        assert_eq!(d.actions, vec![set("a-1", "all-1g.10gb")]);
        nodes[1] = node("a-1", A100, Some("all-1g.10gb"), Some("success"));
        let d = decide(std::slice::from_ref(&p), &nodes, &t(13));
        assert!(d.actions.is_empty());
        let st = &d.statuses["a100"];
        assert_eq!(st.ready_nodes, Some(2));
        assert_eq!(cond_of(st, condition::READY).status, "True");
        assert_eq!(cond_of(st, condition::PROGRESSING).status, "False");
    }

    #[test]
    fn failed_node_reports_the_managers_error_and_does_not_block() {
        let p = policy("a100", 1, A100, "all-1g.10gb", 1);
        let mut bad = node("a-0", A100, Some("all-1g.10gb"), Some("failed"));
        bad.error = Some("GPU 0 cannot hold it".into());
        let nodes = vec![bad, node("a-1", A100, None, None)];
        let d = decide(&[p], &nodes, &t(1));
        assert_eq!(d.actions, vec![set("a-1", "all-1g.10gb")]);
        let st = &d.statuses["a100"];
        let n0 = &st.nodes.as_ref().unwrap()[0];
        assert_eq!(n0.error.as_deref(), Some("GPU 0 cannot hold it"));
        assert_eq!(n0.state.as_deref(), Some("failed"));
        assert_eq!(cond_of(st, condition::READY).reason, "Failed");
    }

    #[test]
    fn oldest_policy_wins_and_the_other_reports_the_conflict() {
        let old = policy("old", 1, A100, "all-1g.10gb", 2);
        let new = policy("new", 5, A100, "all-balanced", 2);
        let nodes = vec![node("a-0", A100, None, None)];
        let d = decide(&[new, old], &nodes, &t(9));
        assert_eq!(d.actions, vec![set("a-0", "all-1g.10gb")]);
        let lost = &d.statuses["new"];
        let e = lost.nodes.as_ref().unwrap()[0].error.clone().unwrap();
        assert!(e.contains("\"old\""), "{e}");
        assert_eq!(cond_of(lost, condition::CONFLICT).status, "True");
        assert_eq!(
            cond_of(&d.statuses["old"], condition::CONFLICT).status,
            "False"
        );
    }

    #[test]
    fn gpu_pods_wait_or_are_evicted() {
        let mut p = policy("a100", 1, A100, "all-1g.10gb", 1);
        let mut n = node("a-0", A100, None, None);
        n.gpu_pods = vec!["team/train".into()];
        let d = decide(std::slice::from_ref(&p), std::slice::from_ref(&n), &t(1));
        assert!(d.actions.is_empty());
        let e = d.statuses["a100"].nodes.as_ref().unwrap()[0]
            .error
            .clone()
            .unwrap();
        assert!(e.contains("team/train"), "{e}");

        p.spec.gpu_pod_policy = Some(GpuPodPolicy::Evict);
        let d = decide(std::slice::from_ref(&p), std::slice::from_ref(&n), &t(2));
        assert_eq!(
            d.actions,
            vec![
                Action::Claim { node: "a-0".into() },
                Action::Evict {
                    node: "a-0".into(),
                    pods: vec!["team/train".into()]
                }
            ]
        );
        // Claimed (pending) and the pods gone: now the label.
        let mut claimed = node("a-0", A100, None, Some("pending"));
        let d = decide(
            std::slice::from_ref(&p),
            std::slice::from_ref(&claimed),
            &t(3),
        );
        assert_eq!(d.actions, vec![set("a-0", "all-1g.10gb")]);
        // A claimed node counts against the bound.
        claimed.gpu_pods = vec!["team/train".into()];
        let nodes = vec![claimed, node("a-1", A100, None, None)];
        let d = decide(&[p], &nodes, &t(4));
        assert!(
            !d.actions
                .iter()
                .any(|a| matches!(a, Action::SetConfig { node, .. } if node == "a-1"))
        );
    }

    #[test]
    fn invalid_spec_touches_nothing() {
        let mut p = policy("bad", 1, A100, "all-1g.10gb", 1);
        p.spec.gpu_products = None;
        let d = decide(&[p], &[node("a-0", A100, None, None)], &t(1));
        assert!(d.actions.is_empty());
        assert_eq!(
            cond_of(&d.statuses["bad"], condition::READY).reason,
            "InvalidSpec"
        );
    }

    #[test]
    fn delete_resets_only_with_reset_on_delete() {
        let mut p = policy("a100", 1, A100, "all-1g.10gb", 1);
        p.metadata.deletion_timestamp = Some(t(50));
        p.metadata.finalizers = Some(vec![names::FINALIZER_MIG_CLUSTER_POLICY.into()]);
        let nodes = vec![
            node("a-0", A100, Some("all-1g.10gb"), Some("success")),
            node("a-1", A100, Some("all-1g.10gb"), Some("success")),
        ];
        // Without resetOnDelete the finalizer just goes.
        let d = decide(std::slice::from_ref(&p), &nodes, &t(51));
        assert!(d.actions.is_empty());
        assert_eq!(d.finalize, ["a100"]);

        p.spec.reset_on_delete = Some(true);
        let d = decide(std::slice::from_ref(&p), &nodes, &t(52));
        assert_eq!(d.actions, vec![set("a-0", "all-disabled")]);
        assert!(d.finalize.is_empty());
        let done = vec![
            node("a-0", A100, Some("all-disabled"), Some("success")),
            node("a-1", A100, Some("all-disabled"), Some("success")),
        ];
        let d = decide(std::slice::from_ref(&p), &done, &t(53));
        assert!(d.actions.is_empty());
        assert_eq!(d.finalize, ["a100"]);
    }

    #[test]
    fn unchanged_conditions_keep_their_transition_time() {
        let mut p = policy("a100", 1, A100, "all-1g.10gb", 1);
        let nodes = vec![node("a-0", A100, Some("all-1g.10gb"), Some("success"))];
        let first = decide(std::slice::from_ref(&p), &nodes, &t(100)).statuses["a100"].clone();
        p.status = Some(first.clone());
        let second = decide(std::slice::from_ref(&p), &nodes, &t(200)).statuses["a100"].clone();
        assert_eq!(
            first, second,
            "a second round with nothing new writes nothing"
        );
    }

    proptest! {
        /// Whatever the starting states and however the MIG managers answer, a policy never has
        /// more than maxUnavailable nodes in flight because of its own writes, and it converges.
        #[test]
        fn rollout_respects_the_bound_and_converges(
            states in prop::collection::vec(0..4usize, 1..8),
            max in 1..4i32,
            finish in prop::collection::vec(any::<bool>(), 64),
        ) {
            let p = policy("a100", 1, A100, "all-1g.10gb", max);
            let mut nodes: Vec<NodeView> = states.iter().enumerate().map(|(i, s)| {
                let name = format!("a-{i}");
                match s {
                    0 => node(&name, A100, None, None),
                    1 => node(&name, A100, Some("all-disabled"), Some("success")),
                    2 => node(&name, A100, Some("all-1g.10gb"), Some("success")),
                    _ => node(&name, A100, Some("all-1g.10gb"), Some("pending")),
                }
            }).collect();
            let start_in_flight = nodes.iter().filter(|n| n.in_flight()).count();
            let bound = (max as usize).max(start_in_flight);
            let mut steps = finish.iter().cycle();
            for round in 0..200 {
                let d = decide(std::slice::from_ref(&p), &nodes, &t(round));
                for a in &d.actions {
                    if let Action::SetConfig { node: n, config } = a {
                        let v = nodes.iter_mut().find(|v| &v.name == n).unwrap();
                        v.labels.insert(names::LABEL_MIG_CONFIG.into(), config.clone());
                        v.labels.insert(names::LABEL_MIG_CONFIG_STATE.into(), "pending".into());
                    }
                }
                let in_flight = nodes.iter().filter(|n| n.in_flight()).count();
                prop_assert!(in_flight <= bound, "{in_flight} in flight, bound {bound}");
                // Some managers finish this round.
                for v in nodes.iter_mut().filter(|v| v.in_flight()) {
                    if *steps.next().unwrap() || round > 100 {
                        v.labels.insert(names::LABEL_MIG_CONFIG_STATE.into(), "success".into());
                    }
                }
                if d.statuses["a100"].ready_nodes == Some(nodes.len() as i32) {
                    return Ok(());
                }
            }
            prop_assert!(false, "did not converge");
        }
    }
}
