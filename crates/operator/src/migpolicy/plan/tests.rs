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
    let mut labels = BTreeMap::from([(names::LABEL_GPU_PRODUCT.to_string(), product.to_string())]);
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
    // Nothing of its own to do, but its layout is not applied: not Ready.
    let r = cond_of(lost, condition::READY);
    assert_eq!(
        (r.status.as_str(), r.reason.as_str()),
        ("False", "OwnedByOlderPolicy")
    );
}

#[test]
fn an_invalid_older_policy_owns_no_node() {
    // Older, selecting the same nodes, but with both layout kinds: invalid.
    let mut bad = policy("bad", 1, A100, "all-1g.10gb", 1);
    bad.spec.layout.custom = Some(Default::default());
    assert!(!bad.spec.validate().is_empty());
    let good = policy("good", 5, A100, "all-balanced", 1);
    let nodes = vec![node("a-0", A100, None, None)];
    let d = decide(&[bad, good.clone()], &nodes, &t(9));
    assert_eq!(d.actions, vec![set("a-0", "all-balanced")]);
    let st = &d.statuses["good"];
    assert_eq!(cond_of(st, condition::CONFLICT).status, "False");
    let r = cond_of(st, condition::READY);
    assert_eq!(
        (r.status.as_str(), r.reason.as_str()),
        ("False", "RollingOut")
    );
    assert_eq!(
        cond_of(&d.statuses["bad"], condition::READY).reason,
        "InvalidSpec"
    );
    // Once the node is at the good layout, good is Ready.
    let nodes = vec![node("a-0", A100, Some("all-balanced"), Some("success"))];
    let mut bad = policy("bad", 1, A100, "all-1g.10gb", 1);
    bad.spec.layout.custom = Some(Default::default());
    let d = decide(&[bad, good], &nodes, &t(10));
    assert_eq!(
        cond_of(&d.statuses["good"], condition::READY).status,
        "True"
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
