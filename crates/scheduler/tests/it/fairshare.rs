//! Fair share as KAI's proportion plugin divides it; every expected figure is worked out by
//! hand in the comment above it.

use crate::common;
use common::*;
use gantry_scheduler::input::{ClusterInput, QueueInput};
use gantry_scheduler::{Config, Snapshot, schedule};

/// GPU fair share per queue name, with `requests[i]` pending 1-GPU pods in queue i.
fn shares(
    total_gpus: u32,
    queues: Vec<QueueInput>,
    requests: &[(&str, i64)],
    cfg: &Config,
) -> Vec<(String, f64)> {
    let mut input = ClusterInput {
        nodes: vec![gpu_node("n0", total_gpus)],
        queues,
        ..Default::default()
    };
    for (q, n) in requests {
        for i in 0..*n {
            job(&mut input, &format!("{q}-{i}"), q, 50, 1, i);
        }
    }
    let d = schedule(&Snapshot::build(&input), cfg);
    d.queues
        .iter()
        .map(|q| (q.name.clone(), q.fair_share[0]))
        .collect()
}

fn get(v: &[(String, f64)], name: &str) -> f64 {
    v.iter()
        .find(|(n, _)| n == name)
        .map(|x| x.1)
        .unwrap_or(f64::NAN)
}

fn q(name: &str, quota: f64, limit: f64, weight: f64, creation: i64) -> QueueInput {
    let mut q = queue(name, None, quota, limit, weight);
    q.creation = creation;
    q
}

#[test]
fn deserved_quota_first() {
    // 8 GPUs, quotas 4 and 4, each asks for 8: deserved covers everything, nothing left over.
    let s = shares(
        8,
        vec![q("a", 4.0, -1.0, 1.0, 0), q("b", 4.0, -1.0, 1.0, 1)],
        &[("a", 8), ("b", 8)],
        &Config::default(),
    );
    assert_eq!((get(&s, "a"), get(&s, "b")), (4.0, 4.0));
}

#[test]
fn deserved_capped_by_request() {
    // 10 GPUs: a=min(4,2)=2, b=min(4,8)=4, remaining 4; only b unsatisfied: offer 4, needs 4 -> b=8.
    let s = shares(
        10,
        vec![q("a", 4.0, -1.0, 1.0, 0), q("b", 4.0, -1.0, 1.0, 1)],
        &[("a", 2), ("b", 8)],
        &Config::default(),
    );
    assert_eq!((get(&s, "a"), get(&s, "b")), (2.0, 8.0));
}

#[test]
fn over_quota_split_by_weight_in_whole_units_then_leftovers() {
    // 10 GPUs; quotas 2+2, remaining 6 split 1:3 -> offers 1.5 and 4.5; both need more, so each
    // gets floor: a=2+1, b=2+4, 1 GPU left; leftovers tie at 0.5, the older queue (a) gets it.
    let s = shares(
        10,
        vec![q("a", 2.0, -1.0, 1.0, 0), q("b", 2.0, -1.0, 3.0, 1)],
        &[("a", 10), ("b", 10)],
        &Config::default(),
    );
    assert_eq!((get(&s, "a"), get(&s, "b")), (4.0, 6.0));
}

#[test]
fn leftover_units_one_each_largest_first() {
    // 10 GPUs, three equal queues with no quota: offers 3.33 each, floors 3+3+3, 1 left,
    // equal leftovers -> oldest queue gets the last unit.
    let qs = vec![
        q("x", 0.0, -1.0, 1.0, 5),
        q("y", 0.0, -1.0, 1.0, 3),
        q("z", 0.0, -1.0, 1.0, 4),
    ];
    let s = shares(
        10,
        qs,
        &[("x", 10), ("y", 10), ("z", 10)],
        &Config::default(),
    );
    assert_eq!((get(&s, "x"), get(&s, "y"), get(&s, "z")), (3.0, 4.0, 3.0));
}

#[test]
fn limit_caps_over_quota_and_another_round_runs() {
    // 10 GPUs, no quotas, equal weights: offers 5/5; a is capped at 3 (satisfied, takes 3),
    // b takes floor 5; a queue was satisfied so another round: b is offered the 2 left -> 7.
    let s = shares(
        10,
        vec![q("a", 0.0, 3.0, 1.0, 0), q("b", 0.0, -1.0, 1.0, 1)],
        &[("a", 10), ("b", 10)],
        &Config::default(),
    );
    assert_eq!((get(&s, "a"), get(&s, "b")), (3.0, 7.0));
}

#[test]
fn higher_priority_bucket_served_first() {
    // 10 GPUs, no quotas: priority 200 queue asks 6 and gets it all; the 100 bucket gets the 4 left.
    let mut hi = q("hi", 0.0, -1.0, 1.0, 1);
    hi.priority = Some(200);
    let s = shares(
        10,
        vec![hi, q("lo", 0.0, -1.0, 1.0, 0)],
        &[("hi", 6), ("lo", 10)],
        &Config::default(),
    );
    assert_eq!((get(&s, "hi"), get(&s, "lo")), (6.0, 4.0));
}

#[test]
fn zero_weight_gets_no_surplus() {
    // 8 GPUs: a has quota 1 and weight 0 -> exactly 1; b (weight 1) takes the other 7.
    let s = shares(
        8,
        vec![q("a", 1.0, -1.0, 0.0, 0), q("b", 0.0, -1.0, 1.0, 1)],
        &[("a", 8), ("b", 8)],
        &Config::default(),
    );
    assert_eq!((get(&s, "a"), get(&s, "b")), (1.0, 7.0));
}

#[test]
fn quota_minus_one_deserves_everything_at_its_level() {
    // quota -1 deserves the whole level total (8) but only asks 3: a=3, b gets the remaining 5.
    let s = shares(
        8,
        vec![q("a", -1.0, -1.0, 1.0, 0), q("b", 0.0, -1.0, 1.0, 1)],
        &[("a", 3), ("b", 8)],
        &Config::default(),
    );
    assert_eq!((get(&s, "a"), get(&s, "b")), (3.0, 5.0));
}

#[test]
fn hierarchical_division() {
    // 8 GPUs: parents p1 (quota 6) and p2 (quota 2) each deserve exactly their quota (requests
    // 16 and 8). Inside p1 (total 6): c1, c2 quota 1 each, remaining 4, equal weights -> +2 each.
    let mut qs = vec![q("p1", 6.0, -1.0, 1.0, 0), q("p2", 2.0, -1.0, 1.0, 1)];
    qs.push(queue("c1", Some("p1"), 1.0, -1.0, 1.0));
    qs.push(queue("c2", Some("p1"), 1.0, -1.0, 1.0));
    qs.push(queue("c3", Some("p2"), 0.0, -1.0, 1.0));
    let s = shares(
        8,
        qs,
        &[("c1", 8), ("c2", 8), ("c3", 8)],
        &Config::default(),
    );
    assert_eq!((get(&s, "p1"), get(&s, "p2")), (6.0, 2.0));
    assert_eq!(
        (get(&s, "c1"), get(&s, "c2"), get(&s, "c3")),
        (3.0, 3.0, 2.0)
    );
}

#[test]
fn historical_usage_shifts_over_quota_with_k_value() {
    // 9 GPUs, no quotas, equal weights (normalised 0.5 each); usage a=0.5, b=0, k=1:
    // s_a = 0.5 + (0.5-0.5) = 0.5, s_b = 0.5 + (0.5-0) = 1.0 -> offers 3 and 6.
    let mut a = q("a", 0.0, -1.0, 1.0, 0);
    a.usage = [0.5, 0.0, 0.0];
    let s = shares(
        9,
        vec![a, q("b", 0.0, -1.0, 1.0, 1)],
        &[("a", 9), ("b", 9)],
        &Config::default(),
    );
    assert_eq!((get(&s, "a"), get(&s, "b")), (3.0, 6.0));
}

#[test]
fn default_two_level_queues() {
    // KAI's Helm defaults: default-parent-queue / default-queue, quota 0, limit -1, weight 1:
    // everything comes from over-quota; the single leaf gets the whole cluster when it asks.
    let qs = vec![
        queue("default-parent-queue", None, 0.0, -1.0, 1.0),
        queue(
            "default-queue",
            Some("default-parent-queue"),
            0.0,
            -1.0,
            1.0,
        ),
    ];
    let s = shares(8, qs.clone(), &[("default-queue", 5)], &Config::default());
    assert_eq!(
        (get(&s, "default-parent-queue"), get(&s, "default-queue")),
        (5.0, 5.0)
    );
    let mut input = ClusterInput {
        nodes: vec![gpu_node("n0", 8)],
        queues: qs,
        ..Default::default()
    };
    for i in 0..5 {
        job(&mut input, &format!("j{i}"), "default-queue", 50, 1, i);
    }
    let d = schedule(&Snapshot::build(&input), &Config::default());
    assert_eq!(d.binds.len(), 5);
}

#[test]
fn dominant_share_uses_allocatable_and_penalises_zero() {
    use gantry_scheduler::fairshare::FairShare;
    use gantry_scheduler::snapshot::Res;
    let input = ClusterInput {
        nodes: vec![gpu_node("n0", 8)],
        queues: vec![q("a", 4.0, -1.0, 1.0, 0), q("b", 0.0, 0.0, 1.0, 1)],
        ..Default::default()
    };
    let s = Snapshot::build(&input);
    let fs = FairShare::compute(&s, &[Res([4000, 0, 0]), Res::default()], 1.0);
    // a: allocatable GPU = max(deserved 4, fair 4) = 4; 2 allocated -> 0.5 (CPU/memory quota -1 => cluster total).
    assert_eq!(fs.dominant_share(&s, 0, [2.0, 0.0, 0.0]), 0.5);
    // b: limit 0 -> allocatable 0 -> allocated x 1000.
    assert_eq!(fs.dominant_share(&s, 1, [0.5, 0.0, 0.0]), 500.0);
}
