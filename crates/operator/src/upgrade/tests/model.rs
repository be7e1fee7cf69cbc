//! Model-based property test: whole upgrades of a toy cluster the plan's actions are applied to.

use proptest::prelude::*;

use super::*;

/// A toy cluster the plan's actions are applied to: driver pods are recreated on the new
/// revision one round after deletion, and become ready unless the node's driver is broken.
#[derive(Debug, Clone)]
struct Model {
    nodes: Vec<NodeView>,
    drivers: BTreeMap<String, DriverPod>,
    /// Nodes whose driver pod was deleted this round (recreated next round).
    recreating: Vec<String>,
    pods: Vec<PodView>,
    broken: Vec<bool>,
    initially_cordoned: Vec<bool>,
}

impl Model {
    fn new(cordoned: &[bool], broken: &[bool], gpu_pods: &[u8], states: &[bool]) -> Model {
        let mut nodes = Vec::new();
        let mut drivers = BTreeMap::new();
        let mut pods = Vec::new();
        for (i, c) in cordoned.iter().enumerate() {
            let name = format!("n{i}");
            let mut n = node(&name, if states[i] { UpgradeDone } else { Unknown });
            n.unschedulable = *c;
            nodes.push(n);
            drivers.insert(name.clone(), driver(&name, false, true));
            for j in 0..gpu_pods[i] {
                pods.push(pod(&name, &format!("{name}-w{j}")));
            }
        }
        Model {
            nodes,
            drivers,
            recreating: Vec::new(),
            pods,
            broken: broken.to_vec(),
            initially_cordoned: cordoned.to_vec(),
        }
    }

    fn view(&self) -> ClusterView {
        ClusterView {
            nodes: self.nodes.clone(),
            driver_pods: self.drivers.values().cloned().collect(),
            pods: self.pods.clone(),
            driver_pods_complete: self.drivers.len() == self.nodes.len(),
            validator_expected: false,
        }
    }

    fn node_mut(&mut self, name: &str) -> &mut NodeView {
        let i = self.nodes.iter().position(|n| n.name == name).unwrap();
        &mut self.nodes[i]
    }

    fn apply(&mut self, actions: &[Action]) {
        // The DaemonSet controller and kubelet act between rounds.
        for name in std::mem::take(&mut self.recreating) {
            let i: usize = name[1..].parse().unwrap();
            let mut d = driver(&name, true, !self.broken[i]);
            d.created = 500;
            self.drivers.insert(name, d);
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if let Some(d) = self.drivers.get_mut(&n.name)
                && d.in_sync
                && self.broken[i]
            {
                d.restarts += 1;
            }
        }
        for a in actions {
            match a {
                Action::SetState { node, state } => {
                    self.node_mut(node)
                        .labels
                        .insert(names::LABEL_UPGRADE_STATE.into(), state.label().into());
                }
                Action::ClearState { node } => {
                    self.node_mut(node)
                        .labels
                        .remove(names::LABEL_UPGRADE_STATE);
                }
                Action::Annotate { node, key, value } => {
                    let n = self.node_mut(node);
                    match value {
                        Some(v) => n.annotations.insert(key.to_string(), v.clone()),
                        None => n.annotations.remove(*key),
                    };
                }
                Action::Cordon { node } => self.node_mut(node).unschedulable = true,
                Action::Uncordon { node } => self.node_mut(node).unschedulable = false,
                Action::Evict { pod, .. } => self.pods.retain(|p| p.key != *pod),
                Action::DeletePod { node, pod } => {
                    if self.drivers.get(node).is_some_and(|d| d.key == *pod) {
                        self.drivers.remove(node);
                        self.recreating.push(node.clone());
                    }
                }
                Action::Event { .. } => {}
            }
        }
    }

    fn state(&self, i: usize) -> UpgradeState {
        UpgradeState::parse(
            self.nodes[i]
                .label(names::LABEL_UPGRADE_STATE)
                .unwrap_or(""),
        )
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Whatever the mix of pre-cordoned nodes, GPU pods and broken drivers: never more than
    /// `maxParallelUpgrades` schedulable-before nodes in flight, every healthy node ends
    /// `upgrade-done` on the new driver, broken ones `upgrade-failed`, and only nodes cordoned
    /// before the upgrade (or failed ones) end cordoned.
    #[test]
    fn upgrades_respect_parallelism_and_leave_no_cordon_behind(
        spec in prop::collection::vec((any::<bool>(), prop::bool::weighted(0.2), 0u8..3, any::<bool>()), 1..7),
        parallel in 0i32..4,
        drain in any::<bool>(),
    ) {
        let cordoned: Vec<bool> = spec.iter().map(|s| s.0).collect();
        let broken: Vec<bool> = spec.iter().map(|s| s.1).collect();
        let gpu: Vec<u8> = spec.iter().map(|s| s.2).collect();
        let done: Vec<bool> = spec.iter().map(|s| s.3).collect();
        let mut m = Model::new(&cordoned, &broken, &gpu, &done);
        let mut p = policy();
        p.max_parallel_upgrades = parallel;
        p.drain_enable = drain;
        let cfg = Config { validation_timeout_s: 600, max_driver_restarts: 2 };
        let mut quiet = 0;
        for round in 0..400i64 {
            let actions = plan(&m.view(), &p, &at(), &cfg, NOW + round).unwrap().actions;
            m.apply(&actions);
            if parallel > 0 {
                let flying = (0..m.nodes.len())
                    .filter(|&i| m.state(i).in_flight() && !m.initially_cordoned[i])
                    .count();
                prop_assert!(flying <= parallel as usize, "round {round}: {flying} in flight");
            }
            quiet = if actions.is_empty() && m.recreating.is_empty() { quiet + 1 } else { 0 };
            if quiet >= 6 {
                break;
            }
        }
        prop_assert!(quiet >= 6, "never settled");
        for i in 0..m.nodes.len() {
            let n = &m.nodes[i];
            if broken[i] {
                prop_assert_eq!(m.state(i), UpgradeFailed, "{}", n.name);
            } else {
                prop_assert_eq!(m.state(i), UpgradeDone, "{}", n.name);
                prop_assert!(m.drivers[&n.name].in_sync);
                prop_assert_eq!(n.unschedulable, cordoned[i], "{} cordon", n.name);
                prop_assert!(n.annotations.is_empty(), "{}: {:?}", n.name, n.annotations);
            }
        }
        prop_assert!(m.pods.is_empty(), "GPU pods left: {:?}", m.pods);
    }
}
