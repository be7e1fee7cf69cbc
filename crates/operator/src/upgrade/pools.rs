//! Pure: the driver upgrade with NVIDIADriver CRs — each CR's pool (the nodes carrying its
//! owner label) is planned on its own, under that CR's upgrade policy.

use std::collections::BTreeSet;

use gantry_api::common::EffectiveUpgradePolicy;
use gantry_api::names;

use super::plan::{self, Config, Plan, PolicyAt};
use super::view::ClusterView;

/// Plan each NVIDIADriver pool (the nodes carrying its owner label) under its own policy: a
/// version change in one CR walks only its nodes, at its own pace. Nodes no CR owns get their
/// state label cleared. A pool whose policy is invalid is skipped (logged) and the rest go on.
pub fn plan_pools(
    v: &ClusterView,
    pools: &[(String, EffectiveUpgradePolicy)],
    cfg: &Config,
    now: i64,
) -> Plan {
    let mut out = Plan::default();
    let mut waiting = Vec::new();
    let mut owned: BTreeSet<&str> = BTreeSet::new();
    for (owner, up) in pools {
        let nodes: BTreeSet<&str> = v
            .nodes
            .iter()
            .filter(|n| n.label(names::LABEL_DRIVER_OWNER) == Some(owner.as_str()))
            .map(|n| n.name.as_str())
            .collect();
        owned.extend(nodes.iter().copied());
        let sub = v.restrict(&nodes);
        let p = if up.auto_upgrade {
            match plan::plan(&sub, up, &PolicyAt::nvidia_driver(owner), cfg, now) {
                Ok(p) => p,
                Err(e) => {
                    tracing::warn!(nvidiadriver = %owner, "driver upgrade of this pool skipped: {e}");
                    continue;
                }
            }
        } else {
            plan::disable(&sub)
        };
        out.actions.extend(p.actions);
        waiting.extend(p.waiting.map(|w| format!("NVIDIADriver {owner}: {w}")));
    }
    let rest: BTreeSet<&str> = v
        .nodes
        .iter()
        .map(|n| n.name.as_str())
        .filter(|n| !owned.contains(n))
        .collect();
    out.actions
        .extend(plan::disable(&v.restrict(&rest)).actions);
    if out.actions.is_empty() && !waiting.is_empty() {
        out.waiting = Some(waiting.join("; "));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use gantry_api::common::UpgradePolicy;

    use super::*;
    use crate::upgrade::plan::Action;
    use crate::upgrade::state::UpgradeState;
    use crate::upgrade::view::{DriverPod, NodeView};

    fn node(name: &str, owner: &str) -> NodeView {
        NodeView {
            name: name.into(),
            labels: BTreeMap::from([(names::LABEL_DRIVER_OWNER.to_string(), owner.to_string())]),
            ready: true,
            ..Default::default()
        }
    }

    fn driver(node: &str, in_sync: bool) -> DriverPod {
        crate::upgrade::tests::driver(node, in_sync, true)
    }

    /// Nodes the plan walks: any action but marking an up-to-date node `upgrade-done`.
    fn touched(p: &Plan) -> BTreeSet<String> {
        p.actions
            .iter()
            .filter(|a| {
                !matches!(a, Action::SetState { state, .. } if *state == UpgradeState::UpgradeDone)
            })
            .map(|a| a.node().to_string())
            .collect()
    }

    #[test]
    fn only_the_changed_pool_walks_at_its_own_pace() {
        // a100's driver changed (its pods are out of sync); h100's did not.
        let v = ClusterView {
            nodes: vec![
                node("a-0", "a100"),
                node("a-1", "a100"),
                node("a-2", "a100"),
                node("h-0", "h100"),
            ],
            driver_pods: vec![
                driver("a-0", false),
                driver("a-1", false),
                driver("a-2", false),
                driver("h-0", true),
            ],
            driver_pods_complete: true,
            ..Default::default()
        };
        let mut a100 = UpgradePolicy::default().effective(true);
        a100.max_parallel_upgrades = 2;
        a100.max_unavailable =
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("100%".into());
        let h100 = UpgradePolicy::default().effective(true);
        let pools = [("a100".to_string(), a100), ("h100".to_string(), h100)];
        let p = plan_pools(&v, &pools, &Config::default(), 10);
        assert_eq!(
            touched(&p),
            BTreeSet::from(["a-0".into(), "a-1".into(), "a-2".into()])
        );
        // Every node of the changed pool is marked for the walk; none of the other pool.
        let states = |s: UpgradeState| {
            p.actions
                .iter()
                .filter(|a| matches!(a, Action::SetState { state, .. } if *state == s))
                .count()
        };
        assert_eq!(states(UpgradeState::UpgradeRequired), 3, "{p:?}");

        // The same change with h100's policy turning auto-upgrade off: h100's nodes are left.
        let mut off = pools.clone();
        off[1].1.auto_upgrade = false;
        let p2 = plan_pools(&v, &off, &Config::default(), 10);
        assert_eq!(touched(&p2), touched(&p));
    }

    #[test]
    fn unowned_nodes_lose_their_state_label() {
        let mut n = node("x", "gone");
        n.labels.insert(
            names::LABEL_UPGRADE_STATE.into(),
            UpgradeState::UpgradeRequired.label().into(),
        );
        let v = ClusterView {
            nodes: vec![n],
            driver_pods_complete: true,
            ..Default::default()
        };
        let pools = [("a100".to_string(), UpgradePolicy::default().effective(true))];
        let p = plan_pools(&v, &pools, &Config::default(), 10);
        assert_eq!(p.actions, vec![Action::ClearState { node: "x".into() }]);
    }
}
