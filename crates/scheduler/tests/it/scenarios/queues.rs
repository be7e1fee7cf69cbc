//! Queues and priorities: borrowing and reclaim, preemption inside a queue, quotas and limits,
//! job order.

use super::*;

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
