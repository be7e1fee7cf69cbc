//! Gangs and placement: consolidation, all-or-nothing gangs, stale gangs, spread, the
//! unschedulable summary.

use super::*;

#[test]
fn consolidation_makes_room_for_a_gang() {
    // 4 nodes x 4 GPUs, each with two 1-GPU pods: 8 GPUs free but no node has 4 free.
    // A gang of two 4-GPU pods fits only if the pods of two nodes move to the other two.
    let mut input = ClusterInput {
        queues: vec![queue("q", None, 16.0, -1.0, 1.0)],
        ..Default::default()
    };
    for n in 0..4 {
        input.nodes.push(gpu_node(&format!("n{n}"), 4));
        for k in 0..2 {
            let name = format!("small-{n}-{k}");
            job(&mut input, &name, "q", 50, 1, (n * 2 + k) as i64);
            let p = input.pods.last_mut().unwrap();
            *p = running(p.clone(), &format!("n{n}"), &[k as u32]);
        }
    }
    input.pod_groups.push(group("gang", "q", 50, 2, 100));
    for i in 0..2 {
        input.pods.push(pod(&format!("gang-{i}"), "gang", 4));
    }
    let d = run(&input);
    assert_eq!(d.binds.len(), 2, "{d:#?}");
    assert!(d.binds.iter().all(|b| b.pipelined));
    let gang_nodes: BTreeSet<&str> = d.binds.iter().map(|b| b.node.as_str()).collect();
    assert_eq!(gang_nodes.len(), 2);
    assert_eq!(d.evictions.len(), 4);
    for e in &d.evictions {
        let EvictReason::Consolidation { relocate_to, .. } = &e.reason else {
            panic!("{e:?}")
        };
        assert!(
            !gang_nodes.contains(relocate_to.as_str()),
            "moved pod must leave the gang's nodes"
        );
        assert!(gang_nodes.contains(e.node.as_str()));
    }
}

#[test]
fn consolidation_disabled_by_spread() {
    let cfg = Config {
        gpu_strategy: gantry_scheduler::Strategy::Spread,
        ..Config::default()
    };
    assert!(!cfg.consolidation_enabled());
    assert!(Config::default().consolidation_enabled());
}

#[test]
fn unschedulable_summary_per_node() {
    let mut input = ClusterInput {
        queues: vec![queue("q", None, 400.0, -1.0, 1.0)],
        ..Default::default()
    };
    for n in 0..40 {
        let mut node = gpu_node(&format!("n{n:02}"), 8);
        if n >= 32 {
            node.taints.push(Taint {
                key: names::TAINT_GPU.into(),
                value: String::new(),
                effect: TaintEffect::NoSchedule,
            });
        }
        input.nodes.push(node);
    }
    job(&mut input, "big", "q", 50, 9, 0);
    let d = run(&input);
    assert_eq!(
        d.unschedulable[0].message,
        "0/40 nodes: 32 insufficient nvidia.com/gpu, 8 untolerated taint nvidia.com/gpu"
    );
}

#[test]
fn gang_is_all_or_nothing() {
    let mut input = ClusterInput {
        nodes: vec![gpu_node("n0", 4), gpu_node("n1", 4)],
        queues: vec![queue("q", None, 12.0, -1.0, 1.0)],
        ..Default::default()
    };
    input.pod_groups.push(group("gang", "q", 50, 3, 0));
    for i in 0..3 {
        input.pods.push(pod(&format!("g{i}"), "gang", 4));
    }
    job(&mut input, "solo", "q", 50, 1, 5);
    let d = run(&input);
    assert_eq!(d.binds.len(), 1);
    assert_eq!(d.binds[0].name, "solo");
    assert_eq!(d.unschedulable.len(), 3);
    assert!(
        d.unschedulable[0]
            .message
            .starts_with("gang of 3 pods cannot be placed together"),
        "{}",
        d.unschedulable[0].message
    );
}

#[test]
fn stale_gang_marked_then_evicted_after_grace() {
    let mut input = ClusterInput {
        now: 1000,
        nodes: vec![gpu_node("n0", 1)],
        queues: vec![queue("q", None, 8.0, -1.0, 1.0)],
        ..Default::default()
    };
    input.pod_groups.push(group("gang", "q", 50, 3, 0));
    input.pods.push(running(pod("g0", "gang", 1), "n0", &[0]));
    input.pods.push(pod("g1", "gang", 1));
    input.pods.push(pod("g2", "gang", 1));
    let d = run(&input);
    assert!(d.evictions.is_empty());
    assert_eq!(d.stale_marks.len(), 1);
    assert_eq!(d.stale_marks[0].since, Some(1000));
    input.pod_groups[0].stale_since = Some(1000 - 61);
    let d = run(&input);
    assert_eq!(d.evictions.len(), 1);
    assert!(matches!(
        d.evictions[0].reason,
        EvictReason::StaleGang { grace_secs: 60, .. }
    ));
    input.pod_groups[0].staleness_grace_secs = Some(-1);
    assert!(
        run(&input).evictions.is_empty(),
        "negative grace disables stale eviction"
    );
}

#[test]
fn spread_uses_the_emptiest_node() {
    let mut input = ClusterInput {
        nodes: vec![gpu_node("n0", 8), gpu_node("n1", 8)],
        queues: vec![queue("q", None, 16.0, -1.0, 1.0)],
        ..Default::default()
    };
    job(&mut input, "r", "q", 50, 1, 0);
    *input.pods.last_mut().unwrap() = running(input.pods.last().unwrap().clone(), "n0", &[0]);
    job(&mut input, "p", "q", 50, 1, 1);
    let d = run(&input);
    assert_eq!(d.binds[0].node, "n0", "binpack joins the used node");
    let cfg = Config {
        gpu_strategy: gantry_scheduler::Strategy::Spread,
        ..Config::default()
    };
    let d = schedule(&Snapshot::build(&input), &cfg);
    assert_eq!(d.binds[0].node, "n1", "spread takes the emptier node");
}
