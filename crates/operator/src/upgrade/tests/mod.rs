//! Unit tests of the planning core: every transition, the slot rules, and a model-based
//! proptest of whole upgrades.

use std::collections::BTreeMap;

use gantry_api::common::{EffectiveUpgradePolicy, UpgradePolicy};
use gantry_api::names;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::plan::{Action, Config, PlanError, PolicyAt, disable, plan};
use super::state::UpgradeState::{self, *};
use super::view::{ClusterView, DriverPod, NodeView, PodKey, PodView};

const NOW: i64 = 1_000_000;

fn at() -> PolicyAt {
    PolicyAt::cluster_policy("cluster-policy")
}

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

/// A driver pod on `node` (the pool planning tests use it too).
pub(super) fn driver(node: &str, in_sync: bool, ready: bool) -> DriverPod {
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
    plan(v, p, &at(), &Config::default(), NOW).unwrap().actions
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
fn a_node_whose_pods_would_not_leave_does_not_count_against_max_unavailable() {
    let mut p = policy();
    p.max_unavailable = IntOrString::Int(1);
    // a failed before its driver was replaced (its driver pod runs the old template): parked,
    // cordoned, and the rollout goes on past it.
    let mut v = many(&[
        ("a", UpgradeFailed, true),
        ("b", UpgradeRequired, false),
        ("c", UpgradeRequired, false),
    ]);
    assert_eq!(states(&run(&v, &p)), vec![("b".into(), CordonRequired)]);
    // a's new driver is what failed: a bad version stops at maxUnavailable nodes.
    v.driver_pods[0] = driver("a", true, false);
    assert_eq!(states(&run(&v, &p)), vec![]);
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
    let p = plan(&v, &policy(), &at(), &Config::default(), NOW).unwrap();
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
    let e = plan(&v, &p, &at(), &Config::default(), NOW).unwrap_err();
    assert!(matches!(e, PlanError::Selector { .. }));
    assert!(e.to_string().contains("drain.podSelector"), "{e}");
    let mut p = policy();
    p.max_unavailable = IntOrString::String("lots".into());
    let e = plan(&v, &p, &at(), &Config::default(), NOW).unwrap_err();
    assert!(e.to_string().contains("maxUnavailable"), "{e}");
}

mod model;
mod removal;
