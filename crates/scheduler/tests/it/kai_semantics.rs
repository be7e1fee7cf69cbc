//! KAI semantics that Gantry once got wrong (issue #18): reclaim with quota `-1` queues,
//! KAI's victim choice by its reclaim strategies, and preemption inside a queue at its limit.

use crate::common;
use common::*;
use gantry_scheduler::input::*;
use gantry_scheduler::{Config, Decisions, EvictReason, Snapshot, schedule};

fn run(input: &ClusterInput) -> Decisions {
    schedule(&Snapshot::build(input), &Config::default())
}

/// A queue of KAI's usual shape: GPU quota as given, CPU and memory quota `-1`.
fn kai_queue(name: &str, parent: Option<&str>, gpu_quota: f64, gpu_limit: f64) -> QueueInput {
    queue(name, parent, gpu_quota, gpu_limit, 1.0)
}

fn running_job(
    input: &mut ClusterInput,
    name: &str,
    queue: &str,
    prio: i32,
    gpus: i64,
    node: &str,
    idx: &[u32],
) {
    input.pod_groups.push(group(name, queue, prio, 1, 0));
    let p = pod(name, name, gpus);
    input.pods.push(running(p, node, idx));
}

#[test]
fn quota_minus_one_project_reclaims_its_guaranteed_gpus_across_departments() {
    // Two departments, every CPU/memory quota -1 (KAI's usual shape). The borrower's
    // department has nothing pending, so the borrower's CPU "deserved" (its parent's fair
    // share) equals exactly what it holds: any eviction takes it below that. KAI treats -1
    // as unlimited and reclaims all the same: dept-b is above its GPU quota.
    let mut input = ClusterInput {
        nodes: vec![gpu_node("n0", 4)],
        queues: vec![
            kai_queue("dept-a", None, 2.0, -1.0),
            kai_queue("proj-a", Some("dept-a"), 2.0, -1.0),
            kai_queue("dept-b", None, 0.0, -1.0),
            kai_queue("proj-b", Some("dept-b"), 0.0, -1.0),
        ],
        ..Default::default()
    };
    for i in 0..4 {
        running_job(&mut input, &format!("b{i}"), "proj-b", 50, 1, "n0", &[i]);
    }
    job(&mut input, "a0", "proj-a", 50, 1, 10);
    let d = run(&input);
    assert_eq!(d.evictions.len(), 1, "{d:#?}");
    assert!(
        matches!(&d.evictions[0].reason, EvictReason::Reclaim { by_queue, victim_queue, .. }
            if by_queue == "proj-a" && victim_queue == "proj-b"),
        "{d:#?}"
    );
    assert_eq!(d.binds.len(), 1);
    assert!(d.binds[0].pipelined && d.binds[0].name == "a0");
}

#[test]
fn guaranteed_quota_is_taken_from_a_queue_above_its_quota_even_below_it_afterwards() {
    // Both queues deserve 1 GPU; b runs one 2-GPU job. a's guaranteed GPU exists only if
    // b's job goes: KAI's GuaranteeDeservedQuota decides on b's share before the victim is
    // taken (2 > 1), so b ends at 0, below its quota.
    let mut input = ClusterInput {
        nodes: vec![gpu_node("n0", 2)],
        queues: vec![
            kai_queue("a", None, 1.0, -1.0),
            kai_queue("b", None, 1.0, -1.0),
        ],
        ..Default::default()
    };
    running_job(&mut input, "big", "b", 50, 2, "n0", &[0, 1]);
    job(&mut input, "small", "a", 50, 1, 10);
    let d = run(&input);
    assert_eq!(d.evictions.len(), 1, "{d:#?}");
    assert_eq!(d.evictions[0].name, "big");
    assert_eq!(d.binds.len(), 1);
    assert_eq!(d.binds[0].name, "small");
}

#[test]
fn queue_at_or_below_its_quota_keeps_its_jobs() {
    // b holds exactly its quota: neither strategy lets a take from it.
    let mut input = ClusterInput {
        nodes: vec![gpu_node("n0", 2)],
        queues: vec![
            kai_queue("a", None, 0.0, -1.0),
            kai_queue("b", None, 2.0, -1.0),
        ],
        ..Default::default()
    };
    running_job(&mut input, "b0", "b", 50, 1, "n0", &[0]);
    running_job(&mut input, "b1", "b", 50, 1, "n0", &[1]);
    job(&mut input, "a0", "a", 50, 1, 10);
    let d = run(&input);
    assert!(d.evictions.is_empty(), "{d:#?}");
    assert!(d.binds.is_empty());
}

#[test]
fn build_preempts_train_in_a_queue_limited_to_one_gpu() {
    // KAI's priority example: queue `test` limited to 1 GPU (quota 1 so the non-preemptible
    // `build` pod fits its quota), a `train` pod runs on it; a `build` pod arrives. Free GPUs
    // elsewhere do not help: the limit does. The victim frees the queue's quota.
    let mut input = ClusterInput {
        nodes: vec![gpu_node("n0", 4)],
        queues: vec![kai_queue("test", None, 1.0, 1.0)],
        ..Default::default()
    };
    running_job(&mut input, "train-pod", "test", 50, 1, "n0", &[0]);
    job(&mut input, "build-pod", "test", 100, 1, 10);
    let d = run(&input);
    assert_eq!(d.evictions.len(), 1, "{d:#?}");
    assert!(
        matches!(
            &d.evictions[0].reason,
            EvictReason::Preempt {
                priority: 100,
                victim_priority: 50,
                ..
            }
        ),
        "{d:#?}"
    );
    assert_eq!(d.binds.len(), 1);
    assert_eq!(d.binds[0].name, "build-pod");
    assert!(d.binds[0].pipelined);
    let q = &d.queues[0];
    assert_eq!(q.allocated[0], 1.0, "the queue stays at its limit: {q:?}");
}

#[test]
fn over_limit_job_without_lower_priority_victims_stays_pending() {
    // Same queue, but the running pod has the same priority: nothing to preempt, the
    // pending pod keeps its OverLimit reason.
    let mut input = ClusterInput {
        nodes: vec![gpu_node("n0", 4)],
        queues: vec![kai_queue("test", None, 0.0, 1.0)],
        ..Default::default()
    };
    running_job(&mut input, "first", "test", 50, 1, "n0", &[0]);
    job(&mut input, "second", "test", 50, 1, 10);
    let d = run(&input);
    assert!(d.evictions.is_empty(), "{d:#?}");
    assert!(d.binds.is_empty());
    assert!(
        d.unschedulable[0].message.starts_with("OverLimit"),
        "{d:#?}"
    );
}

#[test]
fn preemption_frees_only_what_the_limit_needs() {
    // Limit 2: two train pods run; a 1-GPU build-preemptible pod needs exactly one victim.
    let mut input = ClusterInput {
        nodes: vec![gpu_node("n0", 4)],
        queues: vec![kai_queue("test", None, 0.0, 2.0)],
        ..Default::default()
    };
    running_job(&mut input, "t0", "test", 50, 1, "n0", &[0]);
    running_job(&mut input, "t1", "test", 50, 1, "n0", &[1]);
    job(&mut input, "bp", "test", 75, 1, 10);
    let d = run(&input);
    assert_eq!(d.evictions.len(), 1, "{d:#?}");
    assert_eq!(d.binds.len(), 1);
    assert_eq!(d.queues[0].allocated[0], 2.0);
}
