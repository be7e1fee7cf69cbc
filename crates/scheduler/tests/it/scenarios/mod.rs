//! Scenarios from KAI's documented behaviour, each run through a full cycle.

use crate::common;
use common::*;
use gantry_api::names;
use gantry_scheduler::input::*;
use gantry_scheduler::{Config, Decisions, EvictReason, GpuBinding, Snapshot, schedule};
use std::collections::BTreeSet;

fn run(input: &ClusterInput) -> Decisions {
    schedule(&Snapshot::build(input), &Config::default())
}

fn two_queue_cluster() -> ClusterInput {
    ClusterInput {
        nodes: vec![gpu_node("n0", 8)],
        queues: vec![
            queue("a", None, 4.0, -1.0, 1.0),
            queue("b", None, 4.0, -1.0, 1.0),
        ],
        ..Default::default()
    }
}

#[test]
fn queue_borrows_all_then_other_claims_its_quota_back() {
    // Cycle 1: only queue a asks; it borrows all 8 GPUs.
    let mut input = two_queue_cluster();
    for i in 0..8 {
        job(&mut input, &format!("a{i}"), "a", 50, 1, i);
    }
    let d = run(&input);
    assert_eq!(d.binds.len(), 8);
    // Cycle 2: a's pods run; b asks for its 4.
    for b in &d.binds {
        let p = input.pods.iter_mut().find(|p| p.name == b.name).unwrap();
        let GpuBinding::Whole { indices } = &b.gpu else {
            panic!("whole GPU expected")
        };
        *p = running(p.clone(), &b.node, indices);
    }
    for i in 0..4 {
        job(&mut input, &format!("b{i}"), "b", 50, 1, 100 + i);
    }
    let d = run(&input);
    assert_eq!(d.evictions.len(), 4, "{d:#?}");
    assert!(d.evictions.iter().all(|e| matches!(&e.reason, EvictReason::Reclaim { by_queue, victim_queue, .. } if by_queue == "b" && victim_queue == "a")));
    assert_eq!(d.binds.len(), 4);
    assert!(
        d.binds
            .iter()
            .all(|b| b.name.starts_with('b') && b.pipelined)
    );
    let a = d.queues.iter().find(|q| q.name == "a").unwrap();
    assert_eq!(a.allocated[0], 4.0, "a keeps exactly its deserved 4");
}

#[test]
fn reclaim_leaves_a_queue_at_its_quota_alone() {
    // a runs 4 (= its quota) and b asks 5 on 8 GPUs: b gets the 4 free ones, nothing is
    // evicted: a is neither above its quota nor above its fair share, so no strategy applies.
    let mut input = two_queue_cluster();
    for i in 0..4 {
        job(&mut input, &format!("a{i}"), "a", 50, 1, i);
        let p = input.pods.last_mut().unwrap();
        *p = running(p.clone(), "n0", &[i as u32]);
    }
    for i in 0..5 {
        job(&mut input, &format!("b{i}"), "b", 50, 1, 100 + i);
    }
    let d = run(&input);
    assert!(d.evictions.is_empty(), "{:?}", d.evictions);
    assert_eq!(d.binds.len(), 4);
}

#[test]
fn priority_preemption_inside_a_queue() {
    let mut input = ClusterInput {
        nodes: vec![gpu_node("n0", 4)],
        queues: vec![queue("q", None, 4.0, -1.0, 1.0)],
        ..Default::default()
    };
    for i in 0..4 {
        job(&mut input, &format!("low{i}"), "q", 50, 1, i);
        let p = input.pods.last_mut().unwrap();
        *p = running(p.clone(), "n0", &[i as u32]);
    }
    job(&mut input, "high", "q", 75, 2, 10);
    let d = run(&input);
    assert_eq!(d.evictions.len(), 2, "{d:#?}");
    // The newest low-priority pods go first.
    let names: BTreeSet<&str> = d.evictions.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, BTreeSet::from(["low2", "low3"]));
    assert!(d.evictions.iter().all(|e| matches!(
        e.reason,
        EvictReason::Preempt {
            priority: 75,
            victim_priority: 50,
            ..
        }
    )));
    assert_eq!(d.binds.len(), 1);
    assert!(d.binds[0].pipelined);
}

#[test]
fn equal_priority_does_not_preempt() {
    let mut input = ClusterInput {
        nodes: vec![gpu_node("n0", 2)],
        queues: vec![queue("q", None, 4.0, -1.0, 1.0)],
        ..Default::default()
    };
    for i in 0..2 {
        job(&mut input, &format!("old{i}"), "q", 50, 1, i);
        let p = input.pods.last_mut().unwrap();
        *p = running(p.clone(), "n0", &[i as u32]);
    }
    job(&mut input, "new", "q", 50, 1, 10);
    let d = run(&input);
    assert!(d.evictions.is_empty());
    assert_eq!(d.unschedulable.len(), 1);
    assert_eq!(
        d.unschedulable[0].message,
        "0/1 nodes: 1 insufficient nvidia.com/gpu"
    );
}

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
fn fractions_pack_onto_one_gpu() {
    let mut input = ClusterInput {
        nodes: vec![gpu_node("n0", 2)],
        queues: vec![queue("q", None, 2.0, -1.0, 1.0)],
        ..Default::default()
    };
    for (i, f) in ["0.5", "0.25", "0.25"].iter().enumerate() {
        let name = format!("f{i}");
        input.pod_groups.push(group(&name, "q", 50, 1, i as i64));
        input.pods.push(fraction_pod(
            &name,
            &name,
            names::ANNOTATION_GPU_FRACTION,
            f,
        ));
    }
    let d = run(&input);
    assert_eq!(d.binds.len(), 3);
    let gpus: BTreeSet<Vec<u32>> = d
        .binds
        .iter()
        .map(|b| match &b.gpu {
            GpuBinding::Fraction { indices, .. } => indices.clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(gpus.len(), 1, "all three share one GPU: {:?}", d.binds);
    let q = d.queues.iter().find(|q| q.name == "q").unwrap();
    assert_eq!(q.allocated[0], 1.0);
}

#[test]
fn gpu_memory_takes_its_share_of_the_device() {
    // 20000 MiB of an 80000 MiB GPU is a quarter: three 0.25 fractions still fit beside it.
    let mut input = ClusterInput {
        nodes: vec![gpu_node("n0", 1)],
        queues: vec![queue("q", None, 1.0, -1.0, 1.0)],
        ..Default::default()
    };
    input.pod_groups.push(group("m", "q", 50, 1, 0));
    input.pods.push(fraction_pod(
        "m",
        "m",
        names::ANNOTATION_GPU_MEMORY,
        "20000",
    ));
    for i in 0..4 {
        let name = format!("f{i}");
        input.pod_groups.push(group(&name, "q", 50, 1, 1 + i));
        input.pods.push(fraction_pod(
            &name,
            &name,
            names::ANNOTATION_GPU_FRACTION,
            "0.25",
        ));
    }
    let d = run(&input);
    let m = d.binds.iter().find(|b| b.name == "m").unwrap();
    assert_eq!(
        m.gpu,
        GpuBinding::Fraction {
            indices: vec![0],
            milli: 250
        }
    );
    assert_eq!(d.binds.len(), 4, "the fourth 0.25 does not fit");
    assert_eq!(d.unschedulable.len(), 1);
    assert_eq!(
        d.unschedulable[0].message,
        "0/1 nodes: 1 insufficient free GPU share"
    );
}

#[test]
fn multi_gpu_fraction() {
    let mut input = ClusterInput {
        nodes: vec![gpu_node("n0", 4)],
        queues: vec![queue("q", None, 4.0, -1.0, 1.0)],
        ..Default::default()
    };
    input.pod_groups.push(group("f", "q", 50, 1, 0));
    let mut p = fraction_pod("f", "f", names::ANNOTATION_GPU_FRACTION, "0.5");
    p.annotations.insert(
        names::ANNOTATION_GPU_FRACTION_NUM_DEVICES.into(),
        "3".into(),
    );
    input.pods.push(p);
    let d = run(&input);
    let GpuBinding::Fraction { indices, milli } = &d.binds[0].gpu else {
        panic!()
    };
    assert_eq!((indices.len(), *milli), (3, 500));
    assert_eq!(d.queues[0].allocated[0], 1.5);
}

#[test]
fn invalid_fractions_are_rejected_with_a_reason() {
    let mut input = ClusterInput {
        nodes: vec![gpu_node("n0", 1)],
        queues: vec![queue("q", None, 1.0, -1.0, 1.0)],
        ..Default::default()
    };
    for v in ["0", "1.5", "abc"] {
        let name = format!("bad-{}", v.replace('.', "-"));
        input.pod_groups.push(group(&name, "q", 50, 1, 0));
        input.pods.push(fraction_pod(
            &name,
            &name,
            names::ANNOTATION_GPU_FRACTION,
            v,
        ));
    }
    let d = run(&input);
    assert!(d.binds.is_empty());
    assert_eq!(d.unschedulable.len(), 3);
    for u in &d.unschedulable {
        assert!(u.message.contains("gpu-fraction"), "{}", u.message);
        assert!(u.message.contains(&u.name), "names the pod: {}", u.message);
    }
}

#[test]
fn whole_and_shared_never_on_the_same_gpu() {
    let mut input = ClusterInput {
        nodes: vec![gpu_node("n0", 1)],
        queues: vec![queue("q", None, 2.0, -1.0, 1.0)],
        ..Default::default()
    };
    job(&mut input, "whole", "q", 50, 1, 0);
    input.pod_groups.push(group("frac", "q", 50, 1, 1));
    input.pods.push(fraction_pod(
        "frac",
        "frac",
        names::ANNOTATION_GPU_FRACTION,
        "0.1",
    ));
    let d = run(&input);
    assert_eq!(d.binds.len(), 1);
    assert_eq!(d.binds[0].name, "whole");
}

#[test]
fn mig_and_whole_gpus_side_by_side_and_no_fractions_on_mig() {
    let mut node = gpu_node("mixed", 2);
    node.mig.insert("nvidia.com/mig-1g.10gb".into(), 7);
    let mut input = ClusterInput {
        nodes: vec![node],
        queues: vec![queue("q", None, 20.0, -1.0, 1.0)],
        ..Default::default()
    };
    job(&mut input, "whole", "q", 50, 2, 0);
    input.pod_groups.push(group("mig", "q", 50, 1, 1));
    let mut p = pod("mig", "mig", 0);
    p.extended.insert("nvidia.com/mig-1g.10gb".into(), 3);
    input.pods.push(p);
    input.pod_groups.push(group("frac", "q", 50, 1, 2));
    input.pods.push(fraction_pod(
        "frac",
        "frac",
        names::ANNOTATION_GPU_FRACTION,
        "0.5",
    ));
    let d = run(&input);
    let bound: BTreeSet<&str> = d.binds.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(bound, BTreeSet::from(["mig", "whole"]));
    let mig = d.binds.iter().find(|b| b.name == "mig").unwrap();
    assert_eq!(
        mig.gpu,
        GpuBinding::Mig {
            resource: "nvidia.com/mig-1g.10gb".into(),
            count: 3
        }
    );
    assert_eq!(
        d.unschedulable[0].message,
        "0/1 nodes: 1 MIG node does not host GPU fractions"
    );
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
fn limit_zero_means_none_of_that_resource() {
    let mut input = ClusterInput {
        nodes: vec![gpu_node("n0", 8)],
        queues: vec![queue("q", None, 0.0, 0.0, 1.0)],
        ..Default::default()
    };
    job(&mut input, "j", "q", 50, 1, 0);
    let d = run(&input);
    assert!(d.binds.is_empty());
    assert!(
        d.unschedulable[0].message.starts_with("OverLimit"),
        "{}",
        d.unschedulable[0].message
    );
}

#[test]
fn non_preemptible_never_exceeds_deserved_even_when_idle() {
    let mut input = ClusterInput {
        nodes: vec![gpu_node("n0", 8)],
        queues: vec![queue("q", None, 2.0, -1.0, 1.0)],
        ..Default::default()
    };
    job(&mut input, "inference", "q", 125, 3, 0);
    job(&mut input, "small", "q", 125, 2, 1);
    let d = run(&input);
    assert_eq!(
        d.binds.iter().map(|b| b.name.as_str()).collect::<Vec<_>>(),
        vec!["small"]
    );
    let u = d
        .unschedulable
        .iter()
        .find(|u| u.name == "inference")
        .unwrap();
    assert!(
        u.message.starts_with("NonPreemptibleOverQuota"),
        "{}",
        u.message
    );
}

#[test]
fn higher_priority_and_older_jobs_go_first() {
    let mut input = ClusterInput {
        nodes: vec![gpu_node("n0", 2)],
        queues: vec![queue("q", None, 2.0, -1.0, 1.0)],
        ..Default::default()
    };
    job(&mut input, "young-low", "q", 50, 1, 5);
    job(&mut input, "old-low", "q", 50, 1, 1);
    job(&mut input, "young-high", "q", 60, 1, 9);
    let d = run(&input);
    let bound: BTreeSet<&str> = d.binds.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(bound, BTreeSet::from(["young-high", "old-low"]));
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
fn missing_queue_and_group_are_reported() {
    let mut input = ClusterInput {
        nodes: vec![gpu_node("n0", 1)],
        ..Default::default()
    };
    input.pod_groups.push(group("g", "nope", 50, 1, 0));
    input.pods.push(pod("p", "g", 1));
    input.pods.push(pod("orphan", "missing", 1));
    let d = run(&input);
    assert!(d.binds.is_empty());
    assert!(
        d.unschedulable
            .iter()
            .any(|u| u.name == "p" && u.message.contains("\"nope\""))
    );
    assert!(
        d.unschedulable.iter().any(
            |u| u.name == "orphan" && u.message.contains("podgroup \"missing\" does not exist")
        )
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

/// Apply a cycle's binds to the input: bound pods now run where they were bound.
fn run_binds(input: &mut ClusterInput, d: &Decisions) {
    for b in &d.binds {
        let Some(p) = input.pods.iter_mut().find(|p| p.name == b.name) else {
            panic!("bound pod {} not in input", b.name)
        };
        let indices = match &b.gpu {
            GpuBinding::Whole { indices } | GpuBinding::Fraction { indices, .. } => indices.clone(),
            _ => vec![],
        };
        *p = running(p.clone(), &b.node, &indices);
    }
}

/// The demo (deploy/examples/demo): team-b's batch-b (6 × 4 H100 GPUs, gang minimum
/// `batch_min`) and mig-b run, team-a's fractions and L4 pods run, then team-a's gang
/// train-a (2 × 4 H100 GPUs) arrives. Returns the third cycle's decisions.
fn demo_cycle(batch_min: u32) -> Decisions {
    // The demo cluster: 4 H100 × 8, 2 MIG A100s, 2 time-sliced L4s (4 replicas each), 2 CPU nodes.
    let h100 = names::LABEL_GPU_PRODUCT;
    let mut nodes: Vec<NodeInput> = (0..4)
        .map(|i| {
            let mut n = gpu_node(&format!("h100-{i}"), 8);
            // What GFD reports for an H100 80GB HBM3: 20000 MiB is 0.246 of it.
            n.labels
                .insert(names::LABEL_GPU_MEMORY.into(), "81559".into());
            n
        })
        .collect();
    for i in 0..2 {
        let mut n = gpu_node(&format!("a100-{i}"), 0);
        n.labels.insert(h100.into(), "NVIDIA-A100-SXM4-80GB".into());
        n.mig.insert("nvidia.com/mig-1g.10gb".into(), 7);
        nodes.push(n);
    }
    for i in 0..2 {
        let mut n = gpu_node(&format!("l4-{i}"), 4);
        n.labels.insert(h100.into(), "NVIDIA-L4-SHARED".into());
        n.labels
            .insert(names::LABEL_GPU_MEMORY.into(), "23034".into());
        nodes.push(n);
    }
    for i in 0..2 {
        let mut n = gpu_node(&format!("cpu-{i}"), 0);
        n.labels.clear();
        nodes.push(n);
    }
    let mut input = ClusterInput {
        nodes,
        queues: vec![
            queue("demo", None, -1.0, -1.0, 1.0),
            queue("team-a", Some("demo"), 16.0, -1.0, 1.0),
            queue("team-b", Some("demo"), 12.0, -1.0, 1.0),
        ],
        ..Default::default()
    };
    // Pods without CPU/memory requests, as in the demo manifests.
    let bare = |name: &str, group: &str, gpus: i64, product: &str| {
        let mut p = pod(name, group, gpus);
        p.cpu_milli = 0;
        p.memory_bytes = 0;
        if !product.is_empty() {
            p.node_selector.insert(h100.into(), product.into());
        }
        p
    };
    let h100_product = "NVIDIA-H100-80GB-HBM3";
    input
        .pod_groups
        .push(group("batch-b", "team-b", 50, batch_min, 0));
    for i in 0..6 {
        input
            .pods
            .push(bare(&format!("batch-b-{i}"), "batch-b", 4, h100_product));
    }
    input.pod_groups.push(group("mig-b", "team-b", 50, 1, 1));
    for i in 0..4 {
        let mut p = bare(&format!("mig-b-{i}"), "mig-b", 0, "");
        p.extended.insert("nvidia.com/mig-1g.10gb".into(), 1);
        input.pods.push(p);
    }
    let d = run(&input);
    assert_eq!(d.binds.len(), 10, "{:?}", d.unschedulable);
    run_binds(&mut input, &d);
    for i in 0..2 {
        input
            .pod_groups
            .push(group(&format!("half-{i}"), "team-a", 50, 1, 10));
        let mut p = bare(&format!("half-{i}"), &format!("half-{i}"), 0, h100_product);
        p.annotations
            .insert(names::ANNOTATION_GPU_FRACTION.into(), "0.5".into());
        input.pods.push(p);
        input
            .pod_groups
            .push(group(&format!("mem-{i}"), "team-a", 50, 1, 11));
        let mut p = bare(&format!("mem-{i}"), &format!("mem-{i}"), 0, h100_product);
        p.annotations
            .insert(names::ANNOTATION_GPU_MEMORY.into(), "20000".into());
        input.pods.push(p);
    }
    for i in 0..3 {
        input
            .pod_groups
            .push(group(&format!("l4-{i}"), "team-a", 50, 1, 12));
        input.pods.push(bare(
            &format!("l4-{i}"),
            &format!("l4-{i}"),
            1,
            "NVIDIA-L4-SHARED",
        ));
    }
    let d = run(&input);
    assert_eq!(d.binds.len(), 7, "{:?}", d.unschedulable);
    run_binds(&mut input, &d);
    // The gang: 2 × 4 H100 GPUs; only one H100 node has room for a pod.
    input.pod_groups.push(group("train-a", "team-a", 50, 2, 20));
    for i in 0..2 {
        input
            .pods
            .push(bare(&format!("train-a-{i}"), "train-a", 4, h100_product));
    }
    run(&input)
}

#[test]
fn demo_gang_reclaims_an_elastic_pod_from_team_over_its_deserved_share() {
    // batch/v1 Job: KAI's pod-grouper gives minMember 1, so five batch-b pods are elastic.
    let d = demo_cycle(1);
    let qa = d.queues.iter().find(|q| q.name == "team-a").unwrap();
    let qb = d.queues.iter().find(|q| q.name == "team-b").unwrap();
    let report = format!(
        "{:#?}\n{:#?}\n{:#?}\n{:#?}",
        qa, qb, d.evictions, d.unschedulable
    );
    assert_eq!(d.evictions.len(), 1, "{report}");
    assert!(
        matches!(&d.evictions[0].reason, EvictReason::Reclaim { by_queue, victim_queue, .. } if by_queue == "team-a" && victim_queue == "team-b"),
        "{report}"
    );
    assert!(d.evictions[0].name.starts_with("batch-b"), "{report}");
    let train: Vec<_> = d
        .binds
        .iter()
        .filter(|b| b.name.starts_with("train-a"))
        .collect();
    assert_eq!(train.len(), 2, "{report}");
    assert!(train.iter().all(|b| b.pipelined), "{report}");
}

#[test]
fn demo_gang_takes_a_whole_victim_gang_from_a_team_over_its_quota() {
    // batch-b as one gang of 6: team-b holds 28 GPUs against a quota of 12, so KAI's reclaim
    // strategies let team-a take the gang, decided on team-b's share before the victim goes.
    // A gang is evicted whole (never split), even though team-b ends below its quota.
    let d = demo_cycle(6);
    let report = format!("{:#?}\n{:#?}", d.evictions, d.unschedulable);
    assert_eq!(d.evictions.len(), 6, "{report}");
    assert!(
        d.evictions.iter().all(|e| e.name.starts_with("batch-b")
            && matches!(&e.reason, EvictReason::Reclaim { by_queue, victim_queue, .. }
                if by_queue == "team-a" && victim_queue == "team-b")),
        "{report}"
    );
    let train: Vec<_> = d
        .binds
        .iter()
        .filter(|b| b.name.starts_with("train-a"))
        .collect();
    assert_eq!(train.len(), 2, "{report}");
    assert!(train.iter().all(|b| b.pipelined), "{report}");
}
