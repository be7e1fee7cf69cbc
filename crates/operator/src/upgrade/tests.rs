//! Unit tests of the planning core: every transition, the slot rules, and a model-based
//! proptest of whole upgrades.

use std::collections::BTreeMap;

use gantry_api::common::{EffectiveUpgradePolicy, UpgradePolicy};
use gantry_api::names;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use proptest::prelude::*;

use super::plan::{Action, Config, PlanError, disable, plan};
use super::state::UpgradeState::{self, *};
use super::view::{ClusterView, DriverPod, NodeView, PodKey, PodView};

const NOW: i64 = 1_000_000;

fn policy() -> EffectiveUpgradePolicy {
    let mut p = UpgradePolicy::default().effective(true);
    p.max_unavailable = IntOrString::String("100%".into());
    p
}

fn node(name: &str, state: UpgradeState) -> NodeView {
    let mut labels = BTreeMap::new();
    if state != Unknown {
        labels.insert(names::LABEL_UPGRADE_STATE.to_string(), state.label().into());
    }
    NodeView {
        name: name.into(),
        labels,
        annotations: BTreeMap::new(),
        unschedulable: state.in_flight() && state != CordonRequired,
        ready: true,
    }
}

fn driver(node: &str, in_sync: bool, ready: bool) -> DriverPod {
    DriverPod {
        key: PodKey {
            namespace: "gpu-operator".into(),
            name: format!("driver-{node}"),
        },
        node: node.into(),
        in_sync,
        ready,
        settling: false,
        restarts: 0,
        terminating: false,
        created: 100,
    }
}

fn pod(node: &str, name: &str) -> PodView {
    PodView {
        key: PodKey {
            namespace: "default".into(),
            name: name.into(),
        },
        node: node.into(),
        phase: "Running".into(),
        uses_gpu: true,
        controlled: true,
        ready: true,
        created: 50,
        ..Default::default()
    }
}

fn validator(node: &str, name: &str, created: i64, ready: bool) -> PodView {
    let mut p = pod(node, name);
    p.uses_gpu = false;
    p.daemonset = true;
    p.ready = ready;
    p.created = created;
    p.labels.insert(
        names::LABEL_APP.into(),
        names::app::OPERATOR_VALIDATOR.into(),
    );
    p
}

/// One node with its driver pod.
fn one(n: NodeView, d: DriverPod, pods: Vec<PodView>) -> ClusterView {
    ClusterView {
        nodes: vec![n],
        driver_pods: vec![d],
        pods,
        driver_pods_complete: true,
        validator_expected: false,
    }
}

fn run(v: &ClusterView, p: &EffectiveUpgradePolicy) -> Vec<Action> {
    plan(v, p, &Config::default(), NOW).unwrap().actions
}

fn to(node: &str, state: UpgradeState) -> Action {
    Action::SetState {
        node: node.into(),
        state,
    }
}

fn ann(node: &str, key: &'static str, value: Option<&str>) -> Action {
    Action::Annotate {
        node: node.into(),
        key,
        value: value.map(str::to_string),
    }
}

fn states(actions: &[Action]) -> Vec<(String, UpgradeState)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::SetState { node, state } => Some((node.clone(), *state)),
            _ => None,
        })
        .collect()
}

fn has_warning(actions: &[Action]) -> bool {
    actions
        .iter()
        .any(|a| matches!(a, Action::Event { warning: true, .. }))
}

// ---- "" / upgrade-done ------------------------------------------------------------------

#[test]
fn unknown_in_sync_becomes_done_and_done_stays_quiet() {
    let v = one(node("a", Unknown), driver("a", true, true), vec![]);
    assert_eq!(run(&v, &policy()), vec![to("a", UpgradeDone)]);
    let v = one(node("a", UpgradeDone), driver("a", true, true), vec![]);
    assert_eq!(run(&v, &policy()), vec![]);
}

#[test]
fn stale_driver_pod_requires_upgrade() {
    for s in [Unknown, UpgradeDone] {
        let v = one(node("a", s), driver("a", false, true), vec![]);
        assert_eq!(run(&v, &policy()), vec![to("a", UpgradeRequired)]);
    }
}

#[test]
fn requested_or_safe_load_annotation_requires_upgrade() {
    for key in [
        names::ANNOTATION_UPGRADE_REQUESTED,
        names::ANNOTATION_UPGRADE_WAIT_FOR_SAFE_LOAD,
    ] {
        let mut n = node("a", UpgradeDone);
        n.annotations.insert(key.into(), "true".into());
        let v = one(n, driver("a", true, true), vec![]);
        assert_eq!(run(&v, &policy()), vec![to("a", UpgradeRequired)]);
    }
}

#[test]
fn cordoned_node_remembers_it_was_cordoned() {
    let mut n = node("a", UpgradeDone);
    n.unschedulable = true;
    let v = one(n, driver("a", false, true), vec![]);
    assert_eq!(
        run(&v, &policy()),
        vec![
            ann(
                "a",
                names::ANNOTATION_UPGRADE_INITIAL_UNSCHEDULABLE,
                Some("true")
            ),
            to("a", UpgradeRequired)
        ]
    );
}

// ---- upgrade-required and the slots ------------------------------------------------------

fn many(states: &[(&str, UpgradeState, bool)]) -> ClusterView {
    ClusterView {
        nodes: states
            .iter()
            .map(|(n, s, cordoned)| {
                let mut v = node(n, *s);
                v.unschedulable = *cordoned;
                v
            })
            .collect(),
        driver_pods: states
            .iter()
            .map(|(n, _, _)| driver(n, false, true))
            .collect(),
        pods: vec![],
        driver_pods_complete: true,
        validator_expected: false,
    }
}

#[test]
fn max_parallel_upgrades_limits_nodes_leaving_upgrade_required() {
    let v = many(&[
        ("a", UpgradeRequired, false),
        ("b", UpgradeRequired, false),
        ("c", UpgradeRequired, false),
    ]);
    assert_eq!(
        states(&run(&v, &policy())),
        vec![("a".into(), CordonRequired)]
    );
    let mut p = policy();
    p.max_parallel_upgrades = 2;
    assert_eq!(
        states(&run(&v, &p)),
        vec![("a".into(), CordonRequired), ("b".into(), CordonRequired)]
    );
    p.max_parallel_upgrades = 0;
    assert_eq!(states(&run(&v, &p)).len(), 3);
    // One in flight already: no slot left at 1.
    let v = many(&[
        ("a", DrainRequired, true),
        ("b", UpgradeRequired, false),
        ("c", UpgradeRequired, false),
    ]);
    assert!(
        !states(&run(&v, &policy()))
            .iter()
            .any(|(_, s)| *s == CordonRequired)
    );
}

#[test]
fn failed_nodes_do_not_hold_a_slot() {
    let v = many(&[("a", UpgradeFailed, true), ("b", UpgradeRequired, false)]);
    assert_eq!(
        states(&run(&v, &policy())),
        vec![("b".into(), CordonRequired)]
    );
}

#[test]
fn max_unavailable_limits_even_with_parallel_slots() {
    let mut p = policy();
    p.max_parallel_upgrades = 0;
    p.max_unavailable = IntOrString::String("25%".into());
    // 8 nodes: ceil(2) = 2, one already cordoned by hand (it goes anyway) → one more.
    let mut spec: Vec<(String, UpgradeState, bool)> = (0..8)
        .map(|i| (format!("n{i}"), UpgradeRequired, false))
        .collect();
    spec[7].2 = true;
    let refs: Vec<(&str, UpgradeState, bool)> =
        spec.iter().map(|(n, s, c)| (n.as_str(), *s, *c)).collect();
    let moved = states(&run(&many(&refs), &p));
    assert_eq!(
        moved,
        vec![("n0".into(), CordonRequired), ("n7".into(), CordonRequired)]
    );
    p.max_unavailable = IntOrString::Int(1);
    let moved = states(&run(&many(&refs), &p));
    assert_eq!(moved, vec![("n7".into(), CordonRequired)]);
}

#[test]
fn skip_label_holds_a_node_and_requested_annotation_is_consumed() {
    let mut n = node("a", UpgradeRequired);
    n.labels
        .insert(names::LABEL_UPGRADE_SKIP.into(), "true".into());
    n.annotations
        .insert(names::ANNOTATION_UPGRADE_REQUESTED.into(), "true".into());
    let v = one(n, driver("a", false, true), vec![]);
    assert_eq!(
        run(&v, &policy()),
        vec![ann("a", names::ANNOTATION_UPGRADE_REQUESTED, None)]
    );
}

#[test]
fn already_cordoned_node_proceeds_without_a_slot() {
    let v = many(&[
        ("a", PodRestartRequired, true),
        ("b", UpgradeRequired, true),
    ]);
    assert_eq!(
        states(&run(&v, &policy())),
        vec![("b".into(), CordonRequired)]
    );
}

// ---- cordon / wait for jobs ---------------------------------------------------------------

#[test]
fn cordon_required_cordons() {
    let v = one(node("a", CordonRequired), driver("a", false, true), vec![]);
    assert_eq!(
        run(&v, &policy()),
        vec![
            Action::Cordon { node: "a".into() },
            to("a", WaitForJobsRequired)
        ]
    );
}

#[test]
fn wait_for_jobs_without_selector_moves_on() {
    let v = one(
        node("a", WaitForJobsRequired),
        driver("a", false, true),
        vec![pod("a", "p")],
    );
    assert_eq!(run(&v, &policy()), vec![to("a", PodDeletionRequired)]);
}

#[test]
fn wait_for_jobs_waits_for_matching_pods_with_a_timeout() {
    let key = names::ANNOTATION_UPGRADE_WAIT_FOR_POD_COMPLETION_START;
    let mut p = policy();
    p.wait_for_completion_pod_selector = "job=train".into();
    p.wait_for_completion_timeout_seconds = 60;
    let mut job = pod("a", "j");
    job.labels.insert("job".into(), "train".into());
    let mut n = node("a", WaitForJobsRequired);
    let v = one(n.clone(), driver("a", false, true), vec![job.clone()]);
    assert_eq!(run(&v, &p), vec![ann("a", key, Some(&NOW.to_string()))]);
    n.annotations.insert(key.into(), (NOW - 30).to_string());
    let v = one(n.clone(), driver("a", false, true), vec![job.clone()]);
    assert_eq!(run(&v, &p), vec![]);
    n.annotations.insert(key.into(), (NOW - 60).to_string());
    let v = one(n.clone(), driver("a", false, true), vec![job.clone()]);
    let a = run(&v, &p);
    assert!(has_warning(&a));
    assert_eq!(a.first(), Some(&ann("a", key, None)));
    assert_eq!(a.last(), Some(&to("a", PodDeletionRequired)));
    // The job finishes: move on and clear the timer.
    job.phase = "Succeeded".into();
    let v = one(n.clone(), driver("a", false, true), vec![job.clone()]);
    assert_eq!(
        run(&v, &p),
        vec![ann("a", key, None), to("a", PodDeletionRequired)]
    );
    // Timeout 0 waits forever.
    p.wait_for_completion_timeout_seconds = 0;
    job.phase = "Running".into();
    n.annotations.insert(key.into(), "0".into());
    let v = one(n, driver("a", false, true), vec![job]);
    assert_eq!(run(&v, &p), vec![]);
}

// ---- pod deletion / drain ----------------------------------------------------------------

#[test]
fn pod_deletion_evicts_running_gpu_pods_only() {
    let key = names::ANNOTATION_UPGRADE_POD_DELETION_START;
    let mut ds = pod("a", "ds");
    ds.daemonset = true;
    let mut done = pod("a", "done");
    done.phase = "Succeeded".into();
    let mut cpu = pod("a", "cpu");
    cpu.uses_gpu = false;
    let v = one(
        node("a", PodDeletionRequired),
        driver("a", false, true),
        vec![pod("a", "g1"), ds, done, cpu, pod("b", "elsewhere")],
    );
    assert_eq!(
        run(&v, &policy()),
        vec![
            ann("a", key, Some(&NOW.to_string())),
            Action::Evict {
                node: "a".into(),
                pod: pod("a", "g1").key
            }
        ]
    );
}

#[test]
fn pod_deletion_done_when_no_gpu_pods_left() {
    let key = names::ANNOTATION_UPGRADE_POD_DELETION_START;
    let mut n = node("a", PodDeletionRequired);
    n.annotations.insert(key.into(), NOW.to_string());
    let mut going = pod("a", "g");
    going.terminating = true;
    // A terminating pod still blocks, but is not evicted again.
    let v = one(n.clone(), driver("a", false, true), vec![going]);
    assert_eq!(run(&v, &policy()), vec![]);
    let v = one(n, driver("a", false, true), vec![]);
    assert_eq!(
        run(&v, &policy()),
        vec![ann("a", key, None), to("a", PodRestartRequired)]
    );
}

#[test]
fn pod_deletion_failure_goes_to_drain_or_failed() {
    let mut bare = pod("a", "bare");
    bare.controlled = false;
    let mut p = policy();
    let v = one(
        node("a", PodDeletionRequired),
        driver("a", false, true),
        vec![bare.clone()],
    );
    let a = run(&v, &p);
    assert!(has_warning(&a));
    assert_eq!(states(&a), vec![("a".into(), UpgradeFailed)]);
    p.drain_enable = true;
    assert_eq!(states(&run(&v, &p)), vec![("a".into(), DrainRequired)]);
    // force allows unmanaged pods; emptyDir needs deleteEmptyDir.
    p.pod_deletion_force = true;
    assert!(states(&run(&v, &p)).is_empty());
    let mut scratch = pod("a", "scratch");
    scratch.empty_dir = true;
    let v = one(
        node("a", PodDeletionRequired),
        driver("a", false, true),
        vec![scratch],
    );
    assert_eq!(states(&run(&v, &p)), vec![("a".into(), DrainRequired)]);
    p.pod_deletion_delete_empty_dir = true;
    assert!(states(&run(&v, &p)).is_empty());
}

#[test]
fn pod_deletion_times_out() {
    let key = names::ANNOTATION_UPGRADE_POD_DELETION_START;
    let mut n = node("a", PodDeletionRequired);
    n.annotations.insert(key.into(), (NOW - 300).to_string());
    let v = one(n, driver("a", false, true), vec![pod("a", "stuck")]);
    let a = run(&v, &policy());
    assert!(has_warning(&a));
    assert_eq!(states(&a), vec![("a".into(), UpgradeFailed)]);
}

#[test]
fn drain_disabled_skips_to_restart() {
    let v = one(
        node("a", DrainRequired),
        driver("a", false, true),
        vec![pod("a", "x")],
    );
    assert_eq!(run(&v, &policy()), vec![to("a", PodRestartRequired)]);
}

#[test]
fn drain_evicts_selected_pods_and_honours_the_skip_label() {
    let key = names::ANNOTATION_UPGRADE_DRAIN_START;
    let mut p = policy();
    p.drain_enable = true;
    p.drain_pod_selector = "team=ml".into();
    let mut ml = pod("a", "ml");
    ml.uses_gpu = false;
    ml.labels.insert("team".into(), "ml".into());
    let mut skip = ml.clone();
    skip.key.name = "skip".into();
    skip.labels
        .insert(names::LABEL_UPGRADE_DRAIN_SKIP.into(), "true".into());
    let mut other = pod("a", "other");
    other.uses_gpu = false;
    let mut ds = ml.clone();
    ds.key.name = "ds".into();
    ds.daemonset = true;
    let v = one(
        node("a", DrainRequired),
        driver("a", false, true),
        vec![ml.clone(), skip, other, ds],
    );
    assert_eq!(
        run(&v, &p),
        vec![
            ann("a", key, Some(&NOW.to_string())),
            Action::Evict {
                node: "a".into(),
                pod: ml.key.clone()
            }
        ]
    );
    // Unmanaged pod without drain.force: the drain fails.
    ml.controlled = false;
    let v = one(node("a", DrainRequired), driver("a", false, true), vec![ml]);
    let a = run(&v, &p);
    assert!(has_warning(&a));
    assert_eq!(states(&a), vec![("a".into(), UpgradeFailed)]);
    // Nothing left: on to the restart.
    let v = one(node("a", DrainRequired), driver("a", false, true), vec![]);
    assert_eq!(run(&v, &p), vec![to("a", PodRestartRequired)]);
}

// ---- pod restart / validation ------------------------------------------------------------

#[test]
fn pod_restart_deletes_the_stale_driver_pod_once() {
    let d = driver("a", false, true);
    let v = one(node("a", PodRestartRequired), d.clone(), vec![]);
    assert_eq!(
        run(&v, &policy()),
        vec![Action::DeletePod {
            node: "a".into(),
            pod: d.key.clone()
        }]
    );
    let mut going = d;
    going.terminating = true;
    let v = one(node("a", PodRestartRequired), going, vec![]);
    assert_eq!(run(&v, &policy()), vec![]);
}

#[test]
fn pod_restart_waits_for_ready_then_restarts_validators() {
    let mut n = node("a", PodRestartRequired);
    n.annotations.insert(
        names::ANNOTATION_UPGRADE_WAIT_FOR_SAFE_LOAD.into(),
        "true".into(),
    );
    let v = one(n.clone(), driver("a", true, false), vec![]);
    assert_eq!(run(&v, &policy()), vec![]);
    let old = validator("a", "val-old", 10, true);
    let new = validator("a", "val-new", 200, true);
    let v = one(n, driver("a", true, true), vec![old.clone(), new]);
    assert_eq!(
        run(&v, &policy()),
        vec![
            ann("a", names::ANNOTATION_UPGRADE_WAIT_FOR_SAFE_LOAD, None),
            Action::DeletePod {
                node: "a".into(),
                pod: old.key
            },
            to("a", ValidationRequired)
        ]
    );
}

#[test]
fn crash_looping_new_driver_fails_the_node() {
    let mut d = driver("a", true, false);
    d.restarts = 11;
    let v = one(node("a", PodRestartRequired), d, vec![]);
    let a = run(&v, &policy());
    assert!(has_warning(&a));
    assert_eq!(states(&a), vec![("a".into(), UpgradeFailed)]);
}

#[test]
fn validation_passes_on_ready_new_validators() {
    let key = names::ANNOTATION_UPGRADE_VALIDATION_START;
    let mut n = node("a", ValidationRequired);
    n.annotations.insert(key.into(), NOW.to_string());
    let mut v = one(
        n.clone(),
        driver("a", true, true),
        vec![validator("a", "v", 200, true)],
    );
    v.validator_expected = true;
    assert_eq!(
        run(&v, &policy()),
        vec![ann("a", key, None), to("a", UncordonRequired)]
    );
    // A node that was cordoned before stays cordoned: straight to done.
    n.annotations.insert(
        names::ANNOTATION_UPGRADE_INITIAL_UNSCHEDULABLE.into(),
        "true".into(),
    );
    v.nodes = vec![n];
    assert_eq!(
        run(&v, &policy()),
        vec![
            ann("a", key, None),
            ann("a", names::ANNOTATION_UPGRADE_INITIAL_UNSCHEDULABLE, None),
            to("a", UpgradeDone)
        ]
    );
}

#[test]
fn validation_waits_then_times_out() {
    let key = names::ANNOTATION_UPGRADE_VALIDATION_START;
    let mut n = node("a", ValidationRequired);
    // Old (pre-restart) validator pods do not count; the DaemonSet has not made new ones yet.
    let mut v = one(
        n.clone(),
        driver("a", true, true),
        vec![validator("a", "old", 10, true)],
    );
    v.validator_expected = true;
    assert_eq!(
        run(&v, &policy()),
        vec![ann("a", key, Some(&NOW.to_string()))]
    );
    n.annotations.insert(key.into(), (NOW - 599).to_string());
    v.nodes = vec![n.clone()];
    v.pods = vec![validator("a", "new", 200, false)];
    assert_eq!(run(&v, &policy()), vec![]);
    n.annotations.insert(key.into(), (NOW - 600).to_string());
    v.nodes = vec![n];
    let a = run(&v, &policy());
    assert!(has_warning(&a));
    assert_eq!(states(&a), vec![("a".into(), UpgradeFailed)]);
    // Without a validator DaemonSet there is nothing to wait for.
    let v = one(
        node("a", ValidationRequired),
        driver("a", true, true),
        vec![],
    );
    assert_eq!(
        states(&run(&v, &policy())),
        vec![("a".into(), UncordonRequired)]
    );
}

#[test]
fn uncordon_required_uncordons() {
    let v = one(node("a", UncordonRequired), driver("a", true, true), vec![]);
    assert_eq!(
        run(&v, &policy()),
        vec![Action::Uncordon { node: "a".into() }, to("a", UpgradeDone)]
    );
}

// ---- failure and recovery ----------------------------------------------------------------

#[test]
fn failed_node_recovers_when_its_driver_is_ready_on_the_new_revision() {
    let v = one(node("a", UpgradeFailed), driver("a", true, false), vec![]);
    assert_eq!(run(&v, &policy()), vec![]);
    let v = one(node("a", UpgradeFailed), driver("a", false, true), vec![]);
    assert_eq!(run(&v, &policy()), vec![]);
    let v = one(node("a", UpgradeFailed), driver("a", true, true), vec![]);
    assert_eq!(run(&v, &policy()), vec![to("a", UncordonRequired)]);
    let mut n = node("a", UpgradeFailed);
    n.annotations.insert(
        names::ANNOTATION_UPGRADE_INITIAL_UNSCHEDULABLE.into(),
        "true".into(),
    );
    let v = one(n, driver("a", true, true), vec![]);
    assert_eq!(
        run(&v, &policy()),
        vec![
            ann("a", names::ANNOTATION_UPGRADE_INITIAL_UNSCHEDULABLE, None),
            to("a", UpgradeDone)
        ]
    );
}

// ---- whole-round rules -------------------------------------------------------------------

#[test]
fn incomplete_driver_daemonset_pauses_everything() {
    let mut v = one(node("a", CordonRequired), driver("a", false, true), vec![]);
    v.driver_pods_complete = false;
    let p = plan(&v, &policy(), &Config::default(), NOW).unwrap();
    assert!(p.actions.is_empty());
    assert!(p.waiting.is_some());
}

#[test]
fn nodes_without_a_driver_pod_are_not_managed() {
    let mut v = one(node("a", Unknown), driver("a", false, true), vec![]);
    v.nodes.push(node("cpu", Unknown));
    assert_eq!(
        states(&run(&v, &policy())),
        vec![("a".into(), UpgradeRequired)]
    );
}

#[test]
fn disable_clears_every_state_label() {
    let v = many(&[("a", DrainRequired, true), ("b", Unknown, false)]);
    assert_eq!(
        disable(&v).actions,
        vec![Action::ClearState { node: "a".into() }]
    );
}

#[test]
fn bad_policy_values_name_the_field() {
    let v = one(node("a", Unknown), driver("a", true, true), vec![]);
    let mut p = policy();
    p.drain_pod_selector = "app in x".into();
    let e = plan(&v, &p, &Config::default(), NOW).unwrap_err();
    assert!(matches!(e, PlanError::Selector { .. }));
    assert!(e.to_string().contains("drain.podSelector"), "{e}");
    let mut p = policy();
    p.max_unavailable = IntOrString::String("lots".into());
    let e = plan(&v, &p, &Config::default(), NOW).unwrap_err();
    assert!(e.to_string().contains("maxUnavailable"), "{e}");
}

// ---- model-based property test -----------------------------------------------------------

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
            let actions = plan(&m.view(), &p, &cfg, NOW + round).unwrap().actions;
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
